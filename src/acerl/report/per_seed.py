"""The report's view of every seed on the primary endpoint: each seed's paired difference (a table and a strip
plot) and, for a sequential design (``report.stage1_seeds``) or one with pilot seeds (``report.pilot_seeds``),
the estimate of each stage and without the pilot seeds.

The numbers are :func:`acerl.report.sequential.per_seed_frame` and :func:`~acerl.report.sequential.stage_frame`,
the same the sequential tool prints (``acerl report sequential``); this module only lays them out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from acerl.report.aggregate import MissingData
from acerl.report.spec import DisplayNames
from acerl.report.table_format import Cell, Row, Table

__all__ = ["per_seed_table", "stage_table", "strip_figure"]


def _comparison(names: DisplayNames, model: str, method: str, baseline: str) -> str:
    return f"{names.model(model)}: {names.method(method)} - {names.method(baseline)}"


def _require_two_seeds(per_seed: pd.DataFrame, benchmark: str) -> None:
    if per_seed.empty or per_seed.groupby(["model", "method", "baseline"]).size().max() < 2:
        raise MissingData(f"fewer than 2 paired seeds on {benchmark}")


def per_seed_table(
    per_seed: pd.DataFrame,
    *,
    names: DisplayNames,
    benchmark: str,
    k: int,
    staged: bool,
    scale: float = 100.0,
) -> Table:
    """One row per seed (the stage and a pilot mark where the design has them), one column pair per comparison:
    the method's and the baseline's Pass@``k`` and their difference, in points.

    Raises:
        MissingData: fewer than two paired seeds.
    """
    _require_two_seeds(per_seed, benchmark)
    keys = list(per_seed.groupby(["model", "method", "baseline"], sort=False).groups)
    header = ["Seed"]
    for model, method, baseline in keys:
        label = _comparison(names, model, method, baseline)
        header += [f"{label}: method", "baseline", "$\\Delta$"]
    rows = []
    for seed, grp in per_seed.groupby("seed", sort=True):
        first = grp.iloc[0]
        label = (
            str(seed)
            + (f" (stage {int(first['stage'])})" if staged else "")
            + (" pilot" if first["pilot"] else "")
        )
        cells: list[Cell] = []
        for model, method, baseline in keys:
            hit = grp[(grp["model"] == model) & (grp["method"] == method) & (grp["baseline"] == baseline)]
            if hit.empty:
                cells += [Cell(), Cell(), Cell()]
                continue
            r = hit.iloc[0]
            cells += [
                Cell(value=r["score_method"] * scale),
                Cell(value=r["score_baseline"] * scale),
                Cell(value=r["d"] * scale, signed=True),
            ]
        rows.append(Row(label, tuple(cells)))
    return Table(
        name=f"per_seed_{benchmark}",
        caption=f"Every seed's Pass@{k} on {names.benchmark(benchmark)} (points): each method and its baseline, "
        "paired by seed, and their difference",
        label=f"tab:per_seed_{benchmark}",
        header=tuple(header),
        groups=(tuple(rows),),
        align="l" + "r" * (len(header) - 1),
        notes=("Pilot: a seed whose results were seen before the design was fixed (report.pilot_seeds).",)
        if per_seed["pilot"].any()
        else (),
    )


def stage_table(
    stages: pd.DataFrame,
    *,
    names: DisplayNames,
    benchmark: str,
    k: int,
    level: float = 0.95,
    scale: float = 100.0,
) -> Table:
    """Per comparison, the estimate on each subset of seeds (all, stage 1, stage 2, without pilot, and the
    difference of the stages): the mean paired difference with its t interval at ``level`` (unadjusted), the
    paired t p-value and the sign-flip permutation p-value.

    Raises:
        MissingData: no comparison.
    """
    if stages.empty:
        raise MissingData(f"no paired comparison on {benchmark}")
    groups = []
    for (model, method, baseline), grp in stages.groupby(["model", "method", "baseline"], sort=False):
        label = _comparison(names, model, method, baseline)
        rows = []
        for r in grp.itertuples(index=False):
            flip = Cell(pvalue=r.p_signflip) if np.isfinite(r.p_signflip) else Cell(raw=r.flips)
            rows.append(
                Row(
                    f"{label}, {r.seeds}",
                    (
                        Cell(raw=str(r.n_seeds)),
                        Cell(value=r.delta * scale, signed=True),
                        Cell(raw=f"[{r.ci_low * scale:+.1f}, {r.ci_high * scale:+.1f}]"),
                        Cell(pvalue=r.p_t),
                        flip,
                    ),
                )
            )
        groups.append(tuple(rows))
    pct = f"{100 * level:g}%"
    return Table(
        name=f"stages_{benchmark}",
        caption=f"Pass@{k} on {names.benchmark(benchmark)}, method minus baseline (points), on each subset of "
        f"seeds: {pct} t intervals and p-values unadjusted (the stage difference: Welch's test)",
        label=f"tab:stages_{benchmark}",
        header=("Comparison, seeds", "Seeds", "$\\Delta$", f"{pct} CI", "p (paired t)", "p (sign flip)"),
        groups=tuple(groups),
        align="lrrrrr",
    )


def strip_figure(
    per_seed: pd.DataFrame, *, k: int, benchmark: str, names: DisplayNames | None = None, staged: bool = True
) -> Figure:
    """Every seed's paired difference (points) per comparison (``staged``: stage 1 and 2 in two colours), pilot
    seeds hollow, the mean of all seeds as a bar.

    Raises:
        MissingData: fewer than two paired seeds.
    """
    _require_two_seeds(per_seed, benchmark)
    names = names or DisplayNames()
    groups = list(per_seed.groupby(["model", "method", "baseline"], sort=False))
    fig = Figure(figsize=(1.8 + 1.6 * len(groups), 3.2))
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    for i, (_, grp) in enumerate(groups):
        for stage, colour in ((1, "tab:blue"), (2, "tab:orange")):
            sub = grp[grp["stage"] == stage]
            x = i + rng.uniform(-0.15, 0.15, size=len(sub))
            filled = ~sub["pilot"].to_numpy(dtype=bool)
            y = 100.0 * sub["d"].to_numpy()
            what = f"stage {stage}" if staged else "seed"
            ax.scatter(
                x[filled], y[filled], s=18, color=colour, label=what if i == 0 and filled.any() else None
            )
            ax.scatter(x[~filled], y[~filled], s=18, facecolors="none", edgecolors=colour,
                       label=f"{what}, pilot" if i == 0 and (~filled).any() else None)  # fmt: skip
        ax.hlines(100.0 * grp["d"].mean(), i - 0.25, i + 0.25, color="black")
    ax.axhline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(groups)), [f"{names.method(m)} - {names.method(b)}" for (_, m, b), _ in groups])
    ax.set_ylabel(f"Pass@{k} difference on {names.benchmark(benchmark)} (points)")
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig
