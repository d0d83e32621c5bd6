"""Power of the study's ACE-vs-baseline comparisons and the variance decomposition, from per-problem counts.

:func:`power_frame` feeds the report's power tables (:func:`acerl.report.stat_tables.power_table`);
:func:`decomposition_frame` and :func:`design_frame` the variance decomposition and the design predictions of
``acerl report power`` (docs/reports.md, "Power"). The statistics live in :mod:`acerl.evaluate.power`.

    acerl report power <root>/metrics/*/*/*/*.json [--k 32] [--seeds 3 5 8] [--n 32 64 128]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acerl.evaluate.power import (
    comparison_components,
    mde_paired,
    method_components,
    paired_effect,
    predicted_sd,
    sampling_variance,
    seeds_problems_ci,
)
from acerl.evaluate.stats import tost_paired
from acerl.passk import pass_at_k_array
from acerl.report.aggregate import require_columns
from acerl.report.frames import load_passk_problems

__all__ = [
    "PROBLEM_COLUMNS",
    "POWER_COLUMNS",
    "RunMatrix",
    "run_matrix",
    "paired_matrices",
    "power_frame",
    "decomposition_frame",
    "design_frame",
    "write_counts_csv",
    "read_counts_csv",
    "main",
]

PROBLEM_COLUMNS = ("benchmark", "model", "method", "seed", "id", "n", "c")
"""Per-problem counts (:func:`acerl.report.frames.load_passk_problems`)."""

POWER_COLUMNS = (
    "benchmark", "model", "method", "baseline", "k", "n_seeds", "n_problems", "n_samples",
    "delta", "ci_low", "ci_high", "p_paired", "sp_low", "sp_high", "sd_diff", "mde", "dz", "p_tost",
    "var_seed", "var_seed_problem", "var_sampling", "var_problem",
)  # fmt: skip
DEFAULT_MARGIN = 0.04
"""The equivalence margin (a fraction) where no ``report.equivalence_margin`` is given."""


@dataclass(frozen=True)
class RunMatrix:
    """Counts of one method's runs on one benchmark: ``c: (S, P)`` correct of ``n`` per seed and problem."""

    seeds: tuple[int, ...]
    ids: tuple[str, ...]
    n: int
    c: np.ndarray

    def passk(self, k: int) -> np.ndarray:
        """``(S, P)`` per-problem Pass@k."""
        return np.stack([pass_at_k_array(self.n, row, k) for row in self.c])

    def sampling(self, k: int, n_eval: int | None = None) -> np.ndarray:
        """``(S, P)`` sampling variances (:func:`acerl.evaluate.power.sampling_variance`, one prior per run)."""
        return np.stack([sampling_variance(row, self.n, k, n_eval=n_eval) for row in self.c])


def run_matrix(
    problems: pd.DataFrame, benchmark: str, model: str, method: str, seeds: Sequence[int] | None = None
) -> RunMatrix:
    """The ``(seeds, problems)`` counts of one method on one benchmark (problems sorted by id).

    Raises:
        ValueError: no runs, seeds with different problem sets, or runs with different ``n`` (the report
            reads ``n`` per problem; the power analysis needs one ``n`` per benchmark).
    """
    require_columns(problems, PROBLEM_COLUMNS, "per-problem counts")
    sub = problems[
        (problems["benchmark"] == benchmark) & (problems["model"] == model) & (problems["method"] == method)
    ]
    sub = sub[sub["seed"].notna()]
    if seeds is not None:
        sub = sub[sub["seed"].isin(list(seeds))]
    if sub.empty:
        raise ValueError(f"no per-problem counts for {model}/{method} on {benchmark}")
    ns = sorted(set(sub["n"].astype(int)))
    if len(ns) != 1:
        raise ValueError(
            f"{model}/{method} on {benchmark}: samples per problem differ ({ns}); rerun with one n"
        )
    wide = sub.pivot(index="seed", columns="id", values="c")
    if wide.isna().any().any():
        raise ValueError(f"{model}/{method} on {benchmark}: the seeds were evaluated on different problems")
    wide = wide.sort_index().sort_index(axis=1)
    return RunMatrix(
        tuple(int(s) for s in wide.index), tuple(str(i) for i in wide.columns), ns[0], wide.to_numpy(np.int64)
    )


def paired_matrices(
    problems: pd.DataFrame, bench: str, model: str, method: str, baseline: str
) -> tuple[RunMatrix, ...]:
    """A and B on their common seeds; the problems must match."""
    a, b = (run_matrix(problems, bench, model, m) for m in (method, baseline))
    common = sorted(set(a.seeds) & set(b.seeds))
    if not common:
        raise ValueError(
            f"{model} on {bench}: {method} and {baseline} share no seed; the paired test needs some"
        )
    a, b = (run_matrix(problems, bench, model, m, common) for m in (method, baseline))
    if a.ids != b.ids or a.n != b.n:
        raise ValueError(
            f"{model} on {bench}: {method} and {baseline} were evaluated on different problems or n"
        )
    return a, b


def _comparisons(problems: pd.DataFrame, comparisons: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    keys = problems[["benchmark", "model", "method"]].drop_duplicates()
    have = set(map(tuple, keys.to_numpy()))
    out = []
    for bench, model in sorted({(b, m) for b, m, _ in have}):
        out += [
            (bench, model, a, b)
            for a, b in comparisons.items()
            if {(bench, model, a), (bench, model, b)} <= have
        ]
    return out


def power_frame(
    problems: pd.DataFrame,
    comparisons: Mapping[str, str],
    ks: Sequence[int],
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    margin: float = DEFAULT_MARGIN,
) -> pd.DataFrame:
    """Every ACE-vs-baseline comparison per (benchmark, model, k): :data:`POWER_COLUMNS` (fractions).

    ``delta, ci_low, ci_high, p_paired``: the paired t-test on per-seed differences; ``sp_low/high``: the
    interval with seeds and problems both random (:func:`acerl.evaluate.power.seeds_problems_ci`; ``nan`` with
    one seed); ``sd_diff``: ``sd(d_s)``; ``mde``: its minimal detectable effect at ``alpha``/``power`` with this
    design; ``dz``: the standardized effect ``delta / sd_diff``; ``p_tost``: equivalence within ``+-margin``
    (:func:`acerl.evaluate.stats.tost_paired`, the larger one-sided p); ``var_*``:
    :func:`acerl.evaluate.power.comparison_components`. Comparisons where either method is absent are left out.
    """
    rows = []
    for bench, model, method, baseline in _comparisons(problems, comparisons):
        a, b = paired_matrices(problems, bench, model, method, baseline)
        for k in ks:
            if k > a.n:
                continue
            d = a.passk(k) - b.passk(k)
            eff = paired_effect(d.mean(axis=1), alpha=alpha, power=power)
            both = seeds_problems_ci(d, level=1.0 - alpha)
            comp = comparison_components(d, a.sampling(k) + b.sampling(k))
            dz = eff.delta / eff.sd if eff.sd > 0 else math.nan
            p_tost = max(tost_paired(d.mean(axis=1), margin))
            rows.append(
                (bench, model, method, baseline, int(k), len(a.seeds), len(a.ids), a.n, eff.delta, eff.ci_low,
                 eff.ci_high, eff.pvalue, *both, eff.sd, eff.mde, dz, p_tost, comp.seed, comp.seed_problem,
                 comp.sampling, comp.problem)
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(POWER_COLUMNS))


def decomposition_frame(problems: pd.DataFrame, ks: Sequence[int]) -> pd.DataFrame:
    """Per (benchmark, model, method, k) with trained seeds: the SDs of :class:`~acerl.evaluate.power.
    MethodComponents` (fractions) -- between seeds, of which evaluation sampling and training, and problems."""
    rows = []
    trained = problems[problems["seed"].notna()]
    for bench, model, method in (
        trained[["benchmark", "model", "method"]].drop_duplicates().itertuples(index=False)
    ):
        m = run_matrix(problems, bench, model, method)
        for k in (k for k in ks if k <= m.n):
            x = m.passk(k)
            mc = method_components(x, m.sampling(k))
            rows.append(
                (bench, model, method, int(k), mc.n_seeds, mc.n_problems, m.n, float(x.mean()), mc.between_seeds,
                 mc.sampling, mc.training, mc.problems)
            )  # fmt: skip
    cols = ["benchmark", "model", "method", "k", "n_seeds", "n_problems", "n_samples", "mean", "sd_between",
            "sd_sampling", "sd_training", "sd_problems"]  # fmt: skip
    return pd.DataFrame(rows, columns=cols).sort_values(
        ["benchmark", "model", "method", "k"], ignore_index=True
    )


def design_frame(
    problems: pd.DataFrame,
    comparisons: Mapping[str, str],
    k: int,
    *,
    seeds: Sequence[int],
    n_samples: Sequence[int],
    n_problems: Sequence[int] | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> pd.DataFrame:
    """Predicted ``sd(d_s)`` and MDE of each comparison at Pass@``k`` for every design (seeds x problems x n),
    from the variance components the observed runs give (sampling noise re-derived for each ``n``)."""
    rows = []
    for bench, model, method, baseline in _comparisons(problems, comparisons):
        a, b = paired_matrices(problems, bench, model, method, baseline)
        if k > a.n:
            continue
        comp = comparison_components(a.passk(k) - b.passk(k), a.sampling(k) + b.sampling(k))
        for s, n, p in itertools.product(seeds, n_samples, n_problems or [len(a.ids)]):
            if k > n:
                continue
            samp = float((a.sampling(k, n_eval=n) + b.sampling(k, n_eval=n)).mean())
            sd = predicted_sd(comp, n_problems=p, sampling=samp) if math.isfinite(comp.seed) else math.nan
            rows.append(
                (
                    bench,
                    model,
                    method,
                    baseline,
                    int(k),
                    int(s),
                    int(p),
                    int(n),
                    sd,
                    mde_paired(sd, s, alpha, power),
                )
            )
    cols = [
        "benchmark",
        "model",
        "method",
        "baseline",
        "k",
        "n_seeds",
        "n_problems",
        "n_samples",
        "sd_diff",
        "mde",
    ]
    return pd.DataFrame(rows, columns=cols)


COUNTS_KEYS = ("benchmark", "model", "method", "seed", "n")
"""The leading columns of a counts file (:func:`write_counts_csv`); the rest are problem ids."""


def write_counts_csv(problems: pd.DataFrame, directory: Path, ks: Sequence[int]) -> tuple[Path, Path]:
    """A study's per-run data as two small CSV files in ``directory``: ``counts.csv`` (one row per run and
    benchmark: :data:`COUNTS_KEYS`, then the correct samples of each problem, one column per problem id) and
    ``passk.csv`` (run, method, seed, benchmark, k, pass@k in points, for every ``k <= n``). The counts
    file holds everything the power analysis reads (:func:`read_counts_csv` gives the metrics files' frame
    back); the Pass@k file is for reading."""
    require_columns(problems, PROBLEM_COLUMNS, "per-problem counts")
    if problems.empty:
        raise ValueError("no per-problem counts to write (no metrics files were read)")
    directory.mkdir(parents=True, exist_ok=True)
    wide = problems.pivot_table(
        index=list(COUNTS_KEYS), columns="id", values="c", dropna=False, aggfunc="first"
    )
    wide = wide.reset_index().sort_values(["benchmark", "model", "method", "seed"], na_position="first")
    wide = wide.dropna(subset=[c for c in wide.columns if c not in COUNTS_KEYS], how="all")
    counts = directory / "counts.csv"
    wide.astype({c: "Int64" for c in wide.columns if c not in COUNTS_KEYS[:3]}).to_csv(counts, index=False)
    rows = []
    for bench, model, method, seed, n in wide[list(COUNTS_KEYS)].itertuples(index=False):
        sub = problems[
            (problems["benchmark"] == bench) & (problems["model"] == model) & (problems["method"] == method)
            & (problems["seed"].isna() if pd.isna(seed) else problems["seed"] == seed)
        ]  # fmt: skip
        run = f"{model}/{method}" + ("" if pd.isna(seed) else f"/seed{int(seed)}")
        for k in (k for k in ks if k <= int(n)):
            value = 100.0 * float(pass_at_k_array(int(n), sub["c"].to_numpy(np.int64), k).mean())
            rows.append((run, method, None if pd.isna(seed) else int(seed), bench, int(k), round(value, 6)))
    passk = directory / "passk.csv"
    pd.DataFrame(rows, columns=["run", "method", "seed", "benchmark", "k", "pass@k"]).astype(
        {"seed": "Int64"}
    ).to_csv(passk, index=False)
    return counts, passk


def read_counts_csv(path: Path) -> pd.DataFrame:
    """The per-problem frame (:data:`PROBLEM_COLUMNS`, as :func:`acerl.report.frames.load_passk_problems`) of a
    counts file written by :func:`write_counts_csv`.

    Raises:
        ValueError: the file lacks a key column or holds no problem column.
    """
    wide = pd.read_csv(path, dtype={"benchmark": str, "model": str, "method": str})
    missing = [c for c in COUNTS_KEYS if c not in wide.columns]
    if missing or len(wide.columns) == len(COUNTS_KEYS):
        raise ValueError(
            f"{path}: not a counts file (needs columns {', '.join(COUNTS_KEYS)} and problem ids)"
        )
    long = wide.melt(id_vars=list(COUNTS_KEYS), var_name="id", value_name="c").dropna(subset=["c"])
    long = long.astype({"n": np.int64, "c": np.int64, "id": str})
    long["seed"] = long["seed"].astype("Int64")
    return long[list(PROBLEM_COLUMNS)].reset_index(drop=True)


def _markdown(df: pd.DataFrame, decimals: int = 2) -> str:
    """A DataFrame as a Markdown pipe table (floats to ``decimals`` places)."""

    def cell(v: object) -> str:
        if isinstance(v, float):
            return "n/a" if math.isnan(v) else f"{v:.{decimals}f}"
        return str(v)

    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the variance decomposition, the power of every comparison and the design predictions (Markdown)."""
    ap = argparse.ArgumentParser(prog="acerl report power", description=main.__doc__)
    ap.add_argument(
        "metrics", nargs="+", type=Path, help="Pass@k metrics files (metrics/<benchmark>/.../*.json)"
    )
    ap.add_argument(
        "--ks", type=int, nargs="+", default=None, help="budgets (default: every k the files hold)"
    )
    ap.add_argument(
        "--k", type=int, default=None, help="budget of the design predictions (default: largest k)"
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 5, 8], help="seed counts of the designs")
    ap.add_argument("--n", type=int, nargs="+", default=None, help="samples per problem of the designs")
    ap.add_argument("--problems", type=int, nargs="+", default=None, help="problem counts of the designs")
    ap.add_argument("--comparisons", nargs="+", default=["ace_grpo:grpo", "ace_dapo:dapo"],
                    help="method:baseline pairs")  # fmt: skip
    ap.add_argument("--margin", type=float, default=100 * DEFAULT_MARGIN,
                    help="equivalence margin of the TOST p in points (default 4, report.equivalence_margin)")  # fmt: skip
    args = ap.parse_args(argv)
    problems = load_passk_problems(args.metrics)
    n_max = int(problems["n"].min())
    ks = args.ks or [k for k in (1, 2, 4, 8, 16, 32, 64, 128) if k <= n_max]
    comparisons = dict(pair.split(":", 1) for pair in args.comparisons)
    k = args.k or max(ks)
    pct = 100.0
    seeds = int(problems.loc[problems["seed"].notna(), "seed"].nunique())
    few = f"n/a: needs >= 2 seeds, the study has {seeds}" if seeds < 2 else ""
    dec = decomposition_frame(problems, ks)
    dec[["mean", *[c for c in dec.columns if c.startswith("sd_")]]] *= pct
    print("## Variance decomposition (Pass@k points; SD of one run's score)\n")
    if few:
        print(f"The between-seed and training SDs are {few} (they are variances across seeds).\n")
    print(_markdown(dec))
    pw = power_frame(problems, comparisons, ks, margin=args.margin / pct)
    pw[["delta", "ci_low", "ci_high", "sp_low", "sp_high", "sd_diff", "mde"]] *= pct
    for c in ("var_seed", "var_seed_problem", "var_sampling", "var_problem"):
        pw[c] = np.sqrt(pw[c]) * pct  # shown as SDs in points
    print("## Comparisons (points; var_* columns shown as SDs in points)\n")
    print(f"Intervals at 95%, unadjusted; p_paired unadjusted; p_tost: equivalence within +-{args.margin:g} "
          "points; dz = delta / sd_diff.\n")  # fmt: skip
    if few:
        print(f"The paired test, its interval, the seeds-and-problems interval and the MDE are {few}.\n")
    print(_markdown(pw, decimals=3))
    print(f"## Designs at Pass@{k} (predicted sd of the per-seed difference and MDE, points)\n")
    if few:
        print(f"Not predicted ({few}: the seed variance component is unknown).\n")
        return 0
    des = design_frame(
        problems, comparisons, k, seeds=args.seeds, n_samples=args.n or [n_max], n_problems=args.problems
    )
    des[["sd_diff", "mde"]] *= pct
    print(_markdown(des))
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report.power", main))
