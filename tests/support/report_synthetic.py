"""Constants and builders shared by the report tests (imported as ``report_synthetic``: a unique name, since
``conftest`` modules of several test folders would clash on ``sys.path``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from acerl.report.spec import DisplayNames

REPO_ROOT = Path(__file__).resolve().parents[2]
KS = (1, 2, 4, 8)
MODELS = ("m_small", "m_large")
MAIN = ("base", "grpo", "dapo", "ace_grpo", "ace_dapo")
ALPHAS = {"grpo": 0.0, "ace_grpo-alpha0.5": 0.5, "ace_grpo": 1.0, "ace_grpo-alpha2": 2.0}
NAMES = DisplayNames(
    models={"m_small": "Small-1B", "m_large": "Large-7B"},
    methods={"base": "Base", "grpo": "GRPO", "dapo": "DAPO", "ace_grpo": "ACE-GRPO", "ace_dapo": "ACE-DAPO"},
    benchmarks={"bench_a": "Bench-A", "bench_b": "Bench-B"},
)


def paper_tex_path() -> Path:
    """``ace_paper.tex`` beside the repo (``../shared/paper``) or ``$ACERL_PAPER_TEX``."""
    return Path(os.environ.get("ACERL_PAPER_TEX", REPO_ROOT.parent / "shared" / "paper" / "ace_paper.tex"))


def synthetic_problems(
    seeds: Sequence[int],
    shifts: Mapping[str, float],
    *,
    n: int = 8,
    problems: int = 30,
    rng_seed: int = 0,
) -> pd.DataFrame:
    """Per-problem counts (``benchmark, model, method, seed, id, n, c``) of ``bench_a`` / ``m_large``: problem
    difficulties shared by every method, each method's logit shifted by ``shifts[method]``, seed-level and
    problem-level noise, ``c ~ Binomial(n, p)``."""
    rng = np.random.default_rng(rng_seed)
    theta = rng.normal(-1.0, 1.2, size=problems)
    rows = []
    for method, shift in shifts.items():
        for seed in seeds:
            p = 1 / (1 + np.exp(-(theta + shift + rng.normal(0, 0.2) + rng.normal(0, 0.3, size=problems))))
            rows += [
                ("bench_a", "m_large", method, seed, f"q{i}", n, int(c))
                for i, c in enumerate(rng.binomial(n, p))
            ]
    df = pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "id", "n", "c"])
    df["seed"] = df["seed"].astype("Int64")
    return df
