"""From per-run results to the numbers in the tables: seed aggregation, significance, ours vs paper.

DataFrame shapes (all Pass@k values are fractions in [0, 1]; the tables turn them into %):

- *runs* — one row per run x benchmark x k: :data:`acerl.report.frames.RUN_COLUMNS`
  (benchmark, model, method, seed, k, pass_at_k).
- *aggregated* — one row per (benchmark, model, method, k): :data:`AGG_COLUMNS`
  (mean, ci95 = 95% Student-t half-width across seeds or NaN, std, n_seeds). :func:`aggregate_seeds` makes it
  from runs; :func:`acerl.report.paper.load_paper_results` gives the paper's numbers in the same shape.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from acerl.evaluate.stats import compare_seeds, mean_ci, welch_from_summary
from acerl.report.frames import RUN_COLUMNS

__all__ = [
    "AGG_KEYS",
    "AGG_COLUMNS",
    "SIG_COLUMNS",
    "CMP_COLUMNS",
    "MissingData",
    "require_columns",
    "seed_summary",
    "aggregate_seeds",
    "significance",
    "significance_from_summary",
    "ours_vs_paper",
]

AGG_KEYS = ("benchmark", "model", "method", "k")
AGG_COLUMNS = (*AGG_KEYS, "mean", "ci95", "std", "n_seeds")
SIG_COLUMNS = (
    "benchmark", "model", "method", "baseline", "k", "mean", "mean_baseline", "delta",
    "p_welch", "p_paired", "n", "n_baseline", "test", "p",
)  # fmt: skip
CMP_COLUMNS = ("benchmark", "model", "method", "k", "ours", "ours_ci95", "paper", "paper_ci95", "delta")


class MissingData(LookupError):
    """The results hold nothing for a requested table or figure (the report skips it)."""


def require_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise ``ValueError`` naming ``what`` and the missing columns if ``df`` lacks any of ``columns``."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing}; has {list(df.columns)}")


def seed_summary(
    df: pd.DataFrame, keys: Sequence[str], value: str, level: float = 0.95, ci: str = "t"
) -> pd.DataFrame:
    """Mean and t confidence half-width of ``value`` across the rows (seeds) of each ``keys`` group.

    Returns:
        DataFrame with ``keys`` + ``mean, ci95, std, n_seeds`` (``ci95``/``std`` NaN for one seed); rows with a
        NaN ``value`` are dropped first.
    """
    require_columns(df, [*keys, value], "seed_summary")
    out = []
    clean = df.dropna(subset=[value])
    for key, grp in clean.groupby(list(keys), sort=True, dropna=False):
        m = mean_ci(grp[value].to_numpy(dtype=np.float64), level, ci)
        out.append((*key, m.mean, m.half_width, m.std, m.n))
    res = pd.DataFrame(out, columns=[*keys, "mean", "ci95", "std", "n_seeds"])
    return res.astype({"mean": "float64", "ci95": "float64", "std": "float64", "n_seeds": "Int64"})


def aggregate_seeds(runs: pd.DataFrame, level: float = 0.95, ci: str = "t") -> pd.DataFrame:
    """Aggregate per-run Pass@k across seeds: ``runs`` (RUN_COLUMNS) -> :data:`AGG_COLUMNS`; ``ci``: ``"t"``
    or ``"normal"`` half-widths (:func:`acerl.evaluate.stats.mean_ci`).

    Raises:
        ValueError: missing columns, or the same (benchmark, model, method, seed, k) twice.
    """
    require_columns(runs, RUN_COLUMNS, "aggregate_seeds")
    dup = runs.duplicated(subset=["benchmark", "model", "method", "seed", "k"], keep=False)
    if dup.any():
        first = runs.loc[dup, list(RUN_COLUMNS[:5])].iloc[0].to_dict()
        raise ValueError(f"aggregate_seeds: duplicate rows for {first}")
    return seed_summary(runs, AGG_KEYS, "pass_at_k", level, ci)[list(AGG_COLUMNS)]


def significance(runs: pd.DataFrame, comparisons: Mapping[str, str]) -> pd.DataFrame:
    """Method vs its baseline per (benchmark, model, k), across seeds.

    Args:
        runs: per-run long table (RUN_COLUMNS).
        comparisons: ``{method: baseline}``, e.g. ``{"ace_grpo": "grpo", "ace_dapo": "dapo"}``.

    Returns:
        :data:`SIG_COLUMNS`; ``p_welch`` from Welch's t-test, ``p_paired`` from the paired t-test when both
        methods have the same seeds (else NaN); ``test`` (``paired`` or ``welch``) and ``p`` are the study's
        test (:attr:`acerl.evaluate.stats.Comparison.p_primary`). Cells where either method is absent are left
        out.
    """
    require_columns(runs, RUN_COLUMNS, "significance")
    rows = []
    for (bench, model, k), grp in runs.groupby(["benchmark", "model", "k"], sort=True):
        for method, baseline in comparisons.items():
            a = grp[grp["method"] == method]
            b = grp[grp["method"] == baseline]
            if a.empty or b.empty:
                continue
            cmp = compare_seeds(_by_seed(a), _by_seed(b))
            p_paired = math.nan if cmp.p_paired is None else cmp.p_paired
            test = "welch" if cmp.p_paired is None else "paired"
            rows.append(
                (bench, model, method, baseline, int(k), cmp.mean_a, cmp.mean_b, cmp.delta, cmp.p_welch, p_paired,
                 cmp.n_a, cmp.n_b, test, cmp.p_primary)
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SIG_COLUMNS))


def _by_seed(df: pd.DataFrame) -> dict[int, float]:
    seeds = [(-1 if pd.isna(s) else int(s)) for s in df["seed"]]
    return dict(zip(seeds, df["pass_at_k"].astype(float), strict=True))


def significance_from_summary(
    agg: pd.DataFrame, comparisons: Mapping[str, str], level: float = 0.95
) -> pd.DataFrame:
    """Like :func:`significance` but from aggregated numbers (Welch from mean, CI half-width and seed count;
    ``p_paired`` NaN). Used for published results, whose per-seed values are unknown."""
    require_columns(agg, AGG_COLUMNS, "significance_from_summary")
    idx = agg.set_index(list(AGG_KEYS))
    rows = []
    for (bench, model, method, k), r in idx.iterrows():
        baseline = comparisons.get(method)
        if baseline is None or (bench, model, baseline, k) not in idx.index:
            continue
        b = idx.loc[(bench, model, baseline, k)]
        n_a = int(r["n_seeds"]) if not pd.isna(r["n_seeds"]) else 0
        n_b = int(b["n_seeds"]) if not pd.isna(b["n_seeds"]) else 0
        test = welch_from_summary(r["mean"], r["ci95"], n_a, b["mean"], b["ci95"], n_b, level)
        rows.append(
            (bench, model, method, baseline, int(k), r["mean"], b["mean"], r["mean"] - b["mean"], test.pvalue,
             math.nan, n_a, n_b, "welch", test.pvalue)
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(SIG_COLUMNS))


def ours_vs_paper(ours: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Every (benchmark, model, method, k) present in both aggregated tables: ours, paper, ``delta = ours -
    paper`` (fractions), with both CI half-widths. Returns :data:`CMP_COLUMNS`."""
    require_columns(ours, AGG_COLUMNS, "ours_vs_paper (ours)")
    require_columns(paper, AGG_COLUMNS, "ours_vs_paper (paper)")
    keys = list(AGG_KEYS)
    merged = ours[[*keys, "mean", "ci95"]].merge(
        paper[[*keys, "mean", "ci95"]], on=keys, how="inner", suffixes=("_ours", "_paper")
    )
    merged = merged.rename(
        columns={
            "mean_ours": "ours",
            "ci95_ours": "ours_ci95",
            "mean_paper": "paper",
            "ci95_paper": "paper_ci95",
        }
    )
    merged["delta"] = merged["ours"] - merged["paper"]
    return merged[list(CMP_COLUMNS)].sort_values(keys, kind="stable").reset_index(drop=True)
