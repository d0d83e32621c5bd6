"""Synthetic study results for the report tests (no files, no training)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.report_synthetic import ALPHAS, KS, MAIN, MODELS, NAMES, paper_tex_path

from acerl.pipeline.records import diagnostics_record
from acerl.report.frames import Diagnostics, diagnostics_frames
from acerl.report.spec import AblationSpec, AlphaSweepSpec, ReportSpec


@pytest.fixture(scope="session")
def paper_tex() -> str:
    path = paper_tex_path()
    if not path.is_file():
        pytest.skip(f"paper source not found at {path} (set ACERL_PAPER_TEX)")
    return path.read_text(encoding="utf-8")


def _curve(base: float, ks: tuple[int, ...]) -> np.ndarray:
    k = np.asarray(ks, dtype=float)
    return 1.0 - (1.0 - base) ** np.sqrt(k)


@pytest.fixture(scope="session")
def synthetic_runs() -> pd.DataFrame:
    """Per-run Pass@k (RUN_COLUMNS): 2 benchmarks x 2 models x main methods (+ ablation, alpha sweep)."""
    rng = np.random.default_rng(0)
    level = {
        "base": 0.40,
        "grpo": 0.50,
        "dapo": 0.52,
        "ace_grpo": 0.53,
        "ace_dapo": 0.55,
        "ace_grpo_relu": 0.51,
    }
    level.update({"ace_grpo-alpha0.5": 0.52, "ace_grpo-alpha2": 0.515})
    rows = []
    for bench, shift in (("bench_a", 0.0), ("bench_b", -0.3)):
        for model, mshift in (("m_small", -0.05), ("m_large", 0.05)):
            for method, p in level.items():
                if model == "m_small" and method not in MAIN:
                    continue
                seeds = [None] if method == "base" else [0, 1, 2]
                for seed in seeds:
                    vals = _curve(min(max(p + shift + mshift + rng.normal(0, 0.01), 0.01), 0.99), KS)
                    rows += [(bench, model, method, seed, k, float(v)) for k, v in zip(KS, vals, strict=True)]
    df = pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "k", "pass_at_k"])
    df["seed"] = df["seed"].astype("Int64")
    return df


@pytest.fixture(scope="session")
def synthetic_diagnostics() -> Diagnostics:
    rng = np.random.default_rng(1)
    recs = []
    for model in MODELS:
        for method in ("grpo", "ace_grpo"):
            for seed in (0, 1):
                ace = method == "ace_grpo"
                rows = []
                for step in range(0, 101, 25):
                    oef = 0.2 + (0.2 if not ace else 0.08) * step / 100 + rng.normal(0, 0.01)
                    mag = 0.05 + (0.1 if not ace else 0.03) * step / 100 + abs(rng.normal(0, 0.003))
                    rows.append(
                        {"step": step, "oef": oef, "overconf_magnitude": mag, "entropy": 0.4, "n_incorrect": 300,
                         "n_total": 1024}
                    )  # fmt: skip
                early = [
                    {"step": t, "entropy": 0.7 * np.exp(-t / (5 if not ace else 20)) + 0.05}
                    for t in range(21)
                ]
                recs.append(
                    (diagnostics_record(model, method, seed, rows, early), f"<{model}/{method}/{seed}>")
                )
    return diagnostics_frames(recs)


@pytest.fixture(scope="session")
def synthetic_spec() -> ReportSpec:
    return ReportSpec(
        names=NAMES,
        models=MODELS,
        benchmarks=("bench_a", "bench_b"),
        no_ci_benchmarks=("bench_b",),
        alpha_sweep=AlphaSweepSpec(model="m_large", benchmark="bench_a", methods=ALPHAS),
        ablation=AblationSpec(
            model="m_large",
            benchmark="bench_a",
            methods={
                "grpo": "GRPO (baseline)",
                "ace_grpo_relu": "ACE-ReLU",
                "ace_grpo": "ACE-Softplus (ours)",
            },
        ),
    )
