"""The paper's published numbers (``config/paper_results/``) as data, in the shape of our aggregated results.

Files (transcribed from ``ace_paper.tex``; percentages as printed, see ``config/paper_results/README.md``):

- ``table1_math500.csv`` — Table 1, Pass@k on MATH-500 with 95% CI half-widths (5 runs);
- ``table2_aime2025.csv`` — Table 2, Pass@k on AIME 2025 (point estimates);
- ``table3_ablation_modulation.csv`` — Table 3 (Sec. 5.4), GRPO / ACE-ReLU / ACE-Softplus (Qwen2.5-Math-7B,
  MATH-500);
- ``table4_alpha_sensitivity.csv`` — Table 4 (App. D), Pass@1/@32 vs alpha (Qwen2.5-Math-7B, MATH-500);
- ``table5_hyperparameters.json`` — Table 5, ``{model: {hyperparameter: value}}``.

Columns of the CSVs: ``benchmark, model, method, k, [alpha,] pass_at_k_pct, ci95_pct, n_seeds`` (empty = not
reported). A (benchmark, model, method, k) printed in several tables (GRPO and ACE-GRPO appear in Tables 1, 3
and 4: Table 4's alpha = 0 row is the ``grpo`` run, its alpha = 1.0 row ``ace_grpo``) must agree; the first file listed wins (Table 1, which has the CI).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from acerl.errors import MissingInputError
from acerl.pipeline import paths
from acerl.pipeline.records import ResultFormatError
from acerl.report.aggregate import AGG_COLUMNS, AGG_KEYS
from acerl.report.spec import AblationSpec, AlphaSweepSpec, DisplayNames, ReportSpec

__all__ = [
    "PAPER_FILES",
    "PAPER_NAMES",
    "PAPER_MODELS",
    "PAPER_BENCHMARKS",
    "paper_results_dir",
    "load_paper_results",
    "load_paper_alpha_methods",
    "load_paper_hyperparameters",
    "paper_spec",
]

RESTORE = f"tracked in git: restore it with `git checkout -- {paths.paper_results_dir('.').as_posix()}`"
"""How to get the paper's numbers back (they are part of the repository, not an output)."""

PAPER_FILES = (
    "table1_math500.csv",
    "table2_aime2025.csv",
    "table3_ablation_modulation.csv",
    "table4_alpha_sensitivity.csv",
)
ALPHA_FILE = "table4_alpha_sensitivity.csv"
HPARAM_FILE = "table5_hyperparameters.json"

PAPER_MODELS = ("qwen25_math_7b", "qwen3_8b_base", "llama31_8b_instruct")
PAPER_BENCHMARKS = ("math500", "aime2025")
PAPER_NAMES = DisplayNames(
    models={
        "qwen25_math_7b": "Qwen2.5-Math-7B",
        "qwen3_8b_base": "Qwen3-8B-Base",
        "llama31_8b_instruct": "Llama-3.1-8B-Instruct",
    },
    methods={
        "base": "Base",
        "grpo": "GRPO",
        "dapo": "DAPO",
        "ace_grpo": "ACE-GRPO",
        "ace_dapo": "ACE-DAPO",
        "ace_grpo_relu": "ACE-ReLU",
    },
    benchmarks={"math500": "MATH-500", "aime2025": "AIME 2025"},
)
PAPER_ABLATION_LABELS = {
    "grpo": "GRPO (baseline)",
    "ace_grpo_relu": "ACE-ReLU",
    "ace_grpo": "ACE-Softplus (ours)",
}

_REQUIRED = ("benchmark", "model", "method", "k", "pass_at_k_pct", "ci95_pct", "n_seeds")


def paper_results_dir() -> Path:
    """``$ACERL_PAPER_RESULTS`` if set, else ``config/paper_results`` of the source checkout this package lives in."""
    env = os.environ.get("ACERL_PAPER_RESULTS")
    if env:
        return Path(env)
    return paths.paper_results_dir(Path(__file__).resolve().parents[3])


def _resolve(directory: str | Path | None) -> Path:
    d = Path(directory) if directory is not None else paper_results_dir()
    if not d.is_dir():
        raise MissingInputError(
            f"paper results folder not found: {d} ({RESTORE}, or set ACERL_PAPER_RESULTS to a copy of it)"
        )
    return d


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise MissingInputError(f"paper results file not found: {path} ({RESTORE})")
    df = pd.read_csv(path, dtype={"benchmark": str, "model": str, "method": str})
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise ResultFormatError(f"{path}: missing columns {missing}")
    for col in ("k", "pass_at_k_pct", "ci95_pct", "n_seeds"):
        try:
            df[col] = pd.to_numeric(df[col])
        except (ValueError, TypeError) as e:
            raise ResultFormatError(f"{path}: column '{col}' is not numeric ({e})") from None
    bad = df[(df["pass_at_k_pct"] < 0) | (df["pass_at_k_pct"] > 100) | df["pass_at_k_pct"].isna()]
    if not bad.empty:
        row = int(bad.index[0]) + 2  # 1-based, after the header line
        raise ResultFormatError(f"{path}: line {row}: pass_at_k_pct must be a percentage in [0, 100]")
    return df


def load_paper_results(directory: str | Path | None = None) -> pd.DataFrame:
    """The paper's Tables 1-4 as one aggregated DataFrame (:data:`acerl.report.aggregate.AGG_COLUMNS`).

    ``mean`` and ``ci95`` are fractions (the printed percentage / 100; ``ci95`` NaN where not printed), ``std``
    is NaN, ``n_seeds`` is the run count where the paper states it (Table 1: 5) and ``<NA>`` otherwise.

    Raises:
        ResultFormatError: a malformed file, or two tables printing different numbers for the same cell.
    """
    d = _resolve(directory)
    seen: dict[tuple[Any, ...], tuple[float, str]] = {}
    rows = []
    for name in PAPER_FILES:
        df = _read_csv(d / name)
        for r in df.itertuples(index=False):
            key = (r.benchmark, r.model, r.method, int(r.k))
            value = float(r.pass_at_k_pct)
            if key in seen:
                if seen[key][0] != value:
                    raise ResultFormatError(
                        f"{d / name}: {key} is {value} but {seen[key][1]} prints {seen[key][0]}"
                    )
                continue
            seen[key] = (value, name)
            ci = float(r.ci95_pct) / 100.0 if not pd.isna(r.ci95_pct) else math.nan
            n = int(r.n_seeds) if not pd.isna(r.n_seeds) else pd.NA
            rows.append((*key, value / 100.0, ci, math.nan, n))
    out = pd.DataFrame(rows, columns=list(AGG_COLUMNS))
    out = out.astype(
        {"k": "int64", "mean": "float64", "ci95": "float64", "std": "float64", "n_seeds": "Int64"}
    )
    return out.sort_values(list(AGG_KEYS), kind="stable").reset_index(drop=True)


def load_paper_alpha_methods(directory: str | Path | None = None) -> dict[str, float]:
    """Method key -> alpha of the paper's Table 4 rows (alpha 0 is the ``grpo`` run, alpha 1 is ``ace_grpo``)."""
    path = _resolve(directory) / ALPHA_FILE
    df = _read_csv(path)
    if "alpha" not in df.columns:
        raise ResultFormatError(f"{path}: missing column 'alpha'")
    pairs = df[["method", "alpha"]].drop_duplicates()
    if pairs["method"].duplicated().any():
        raise ResultFormatError(f"{path}: a method key appears with two different alphas")
    return {str(m): float(a) for m, a in zip(pairs["method"], pairs["alpha"], strict=True)}


def load_paper_hyperparameters(directory: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The paper's Table 5 as ``{model: {hyperparameter: value}}`` (row order as printed)."""
    path = _resolve(directory) / HPARAM_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingInputError(f"paper results file not found: {path} ({RESTORE})") from None
    except json.JSONDecodeError as e:
        raise ResultFormatError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ResultFormatError(f"{path}: expected {{model: {{hyperparameter: value}}}}")
    return data


def paper_spec(directory: str | Path | None = None) -> ReportSpec:
    """The report layout of the paper: its models, benchmarks (AIME without CI), Tables 3-4 and names.

    The paper does not say how many runs Tables 3-4 average; their GRPO / ACE-GRPO rows equal Table 1's 5-run
    means, so no seed note is added to their captions (``seeds=None``)."""
    return ReportSpec(
        names=PAPER_NAMES,
        models=PAPER_MODELS,
        benchmarks=PAPER_BENCHMARKS,
        no_ci_benchmarks=("aime2025",),
        ks=(1, 2, 4, 8, 16, 32),
        alpha_sweep=AlphaSweepSpec(
            model="qwen25_math_7b", benchmark="math500", methods=load_paper_alpha_methods(directory)
        ),
        ablation=AblationSpec(model="qwen25_math_7b", benchmark="math500", methods=PAPER_ABLATION_LABELS),
    )
