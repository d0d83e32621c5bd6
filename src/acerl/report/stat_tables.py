"""The report's tables of the comparisons' tests: method minus baseline per k with its p-value
(:func:`significance_table`, Holm-adjusted by :func:`holm_by_family`) and the power study's paired differences
with their intervals and the design's minimal detectable effect (:func:`power_table`, from
:mod:`acerl.report.power`). Rendered like every table by :mod:`acerl.report.table_format`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from acerl.evaluate.stats import holm
from acerl.report.aggregate import SIG_COLUMNS, MissingData, require_columns
from acerl.report.power import POWER_COLUMNS
from acerl.report.spec import DisplayNames
from acerl.report.table_format import Cell, Row, Table, finite, number_text, p_parts
from acerl.report.tables import table_ks

__all__ = ["Primary", "holm_by_family", "significance_table", "power_table"]


def _comparison_rows(
    frame: pd.DataFrame,
    columns: Sequence[str],
    what: str,
    benchmark: str,
    ks: Sequence[int] | None,
    data: str,
) -> tuple[tuple[int, ...], dict[tuple[str, str, int], Any]]:
    """The ks and a ``(model, method, k) -> row`` lookup of one benchmark's method-vs-baseline rows.

    Raises:
        MissingData: no comparison for this benchmark.
    """
    require_columns(frame, columns, what)
    sub = frame[frame["benchmark"] == benchmark]
    if sub.empty:
        raise MissingData(f"no method/baseline pairs with {data} on {benchmark!r}")
    return table_ks(sub, ks), {(r.model, r.method, int(r.k)): r for r in sub.itertuples(index=False)}


Primary = tuple[str, int]
"""The primary endpoint ``(benchmark, k)`` (config ``report.primary``)."""


def holm_by_family(
    pvalues: Mapping[tuple[str, str, int], float], benchmark: str, primary: Primary | None
) -> tuple[dict[tuple[str, str, int], float], str]:
    """Holm-adjusted p-values of one table's cells ``{(model, method, k): p}`` and the caption's sentence.

    On the primary endpoint's benchmark its column (``k``) is one family (the confirmatory tests, one per
    comparison) and every other cell of the table another; elsewhere the whole table is one family."""
    keys = [key for key, p in pvalues.items() if finite(p)]
    k1 = primary[1] if primary is not None and primary[0] == benchmark else None
    families = [keys] if k1 is None else [[x for x in keys if x[2] == k1], [x for x in keys if x[2] != k1]]
    adjusted: dict[tuple[str, str, int], float] = {}
    for fam in families:
        adjusted |= dict(zip(fam, holm([pvalues[x] for x in fam]).tolist(), strict=True))
    if k1 is not None:
        n1, n2 = (len(f) for f in families)
        note = (
            f"p-values Holm-adjusted: the primary endpoint (@{k1}) over its {n1} comparison(s), the other {n2} "
            "cells (secondary) over the rest of the table"
        )
    else:
        end = f" (the primary endpoint is on {primary[0]})" if primary is not None else ""
        note = f"p-values Holm-adjusted over the table's {len(keys)} tests; all secondary{end}"
    return adjusted, note


def significance_table(
    sig: pd.DataFrame,
    benchmark: str,
    *,
    names: DisplayNames,
    models: Sequence[str],
    comparisons: Mapping[str, str],
    ks: Sequence[int] | None = None,
    primary: Primary | None = None,
    alpha_level: float = 0.05,
    name: str | None = None,
    scale: float = 100.0,
) -> Table:
    """ACE vs its baseline on one benchmark: ``mean(ACE) - mean(baseline)`` in points per k with the study's
    test (column ``p`` of :data:`acerl.report.aggregate.SIG_COLUMNS`: paired where the seeds match, else Welch's)
    Holm-adjusted by :func:`holm_by_family`; bold where the adjusted ``p < alpha_level``.

    Raises:
        MissingData: no comparison for this benchmark.
    """
    ks, look = _comparison_rows(sig, SIG_COLUMNS, "significance results", benchmark, ks, "results")
    shown = {
        key: r.p for key, r in look.items() if key[2] in ks and key[0] in models and key[1] in comparisons
    }
    adjusted, note = holm_by_family(shown, benchmark, primary)
    groups = []
    for model in models:
        rows = []
        for method, baseline in comparisons.items():
            if not any((model, method, k) in look for k in ks):
                continue
            cells = []
            for k in ks:
                r = look.get((model, method, k))
                if r is None:
                    cells.append(Cell())
                    continue
                p = adjusted.get((model, method, k), math.nan)
                significant = finite(p) and p < alpha_level
                cells.append(
                    Cell(value=r.delta * scale, signed=True, pvalue=p, mark="bold" if significant else None)
                )
            label = f"{names.model(model)}: {names.method(method)} vs {names.method(baseline)}"
            rows.append(Row(label, tuple(cells)))
        if rows:
            groups.append(tuple(rows))
    if not groups:
        raise MissingData(f"no comparisons for models {list(models)} on {benchmark!r}")
    tests = {r.test for r in look.values() if finite(r.p)}
    test = {
        frozenset({"paired"}): "the paired t-test (runs paired by seed)",
        frozenset({"welch"}): "Welch's t-test (runs not paired by seed)",
    }.get(frozenset(tests), "the paired t-test where runs are paired by seed, else Welch's")
    caption = f"ACE vs its baseline on {names.benchmark(benchmark)}: difference in Pass@$k$ (points)"
    if adjusted:
        caption += f" with the two-sided p-value of {test} across seeds; {note}; bold = adjusted $p < {alpha_level:g}$."
    else:
        caption += "; no p-values (needs per-seed results, or confidence intervals with their seed counts)."
    name = name or f"significance_{benchmark}"
    return Table(
        name=name,
        caption=caption,
        label=f"tab:{name}",
        header=("Comparison", *(f"$\\Delta$@{k}" for k in ks)),
        groups=tuple(groups),
    )


def power_table(
    pw: pd.DataFrame,
    benchmark: str,
    *,
    names: DisplayNames,
    models: Sequence[str],
    comparisons: Mapping[str, str],
    ks: Sequence[int] | None = None,
    alpha_level: float = 0.05,
    power: float = 0.8,
    primary: Primary | None = None,
    name: str | None = None,
    scale: float = 100.0,
    margin: float = 0.04,
    tost_declared: bool = True,
) -> Table:
    """ACE vs its baseline on one benchmark with the power of the design (:func:`acerl.report.power.power_frame`).

    Per comparison five rows, columns @k: the paired difference (points) +- its t interval with the paired
    p-value Holm-adjusted by :func:`holm_by_family` (bold where the adjusted ``p < alpha_level``); the interval
    with seeds and problems both random ("n/a" with one seed); the minimal detectable effect (two-sided
    ``alpha_level``, ``power``); the standardized effect ``d_z``; the TOST p of equivalence within ``margin``
    (a fraction; ``pw`` computed with the same margin; unadjusted; labelled post hoc unless ``tost_declared``).

    Raises:
        MissingData: no comparison for this benchmark.
    """
    ks, look = _comparison_rows(pw, POWER_COLUMNS, "power results", benchmark, ks, "per-problem results")
    level = f"{100 * (1 - alpha_level):g}%"
    shown = {
        key: r.p_paired
        for key, r in look.items()
        if key[2] in ks and key[0] in models and key[1] in comparisons
    }
    adjusted, note = holm_by_family(shown, benchmark, primary)

    def p_of(r: Any) -> float:
        return adjusted.get((r.model, r.method, int(r.k)), math.nan)

    stats: tuple[tuple[str, Callable[[Any], Cell]], ...] = (
        (
            f"$\\Delta$ ± {level} CI (paired t)",
            lambda r: Cell(
                value=r.delta * scale, signed=True, ci=(r.ci_high - r.ci_low) / 2 * scale, pvalue=p_of(r),
                mark="bold" if finite(p_of(r)) and p_of(r) < alpha_level else None,
            ),
        ),
        (
            f"{level} CI (seeds and problems random)",
            lambda r: Cell(raw=f"[{number_text(r.sp_low * scale, 1, True)}, {number_text(r.sp_high * scale, 1, True)}]")
            if r.n_seeds >= 2 else Cell(raw="n/a (needs >= 2 seeds)"),
        ),
        (f"MDE ($\\alpha$ = {alpha_level:g}, power {power:g})", lambda r: Cell(value=r.mde * scale)),
        ("Standardized effect ($\\Delta$ / SD across seeds)", lambda r: Cell(raw=number_text(r.dz, 2, True)) if finite(r.dz) else Cell()),
        (
            f"TOST p (equivalence within ±{scale * margin:g}{'' if tost_declared else ', post hoc'})",
            lambda r: Cell(raw="".join(p_parts(r.p_tost)).lstrip("=")) if finite(r.p_tost) else Cell(),
        ),
    )  # fmt: skip
    groups, designs = [], set()
    for model in models:
        for method, baseline in comparisons.items():
            found = [look.get((model, method, k)) for k in ks]
            if not any(r is not None for r in found):
                continue
            designs |= {(r.n_seeds, r.n_problems, r.n_samples) for r in found if r is not None}
            label = f"{names.model(model)}: {names.method(method)} vs {names.method(baseline)}"
            groups.append(
                tuple(
                    Row(
                        label if i == 0 else "",
                        (Cell(raw=stat), *(Cell() if r is None else cell(r) for r in found)),
                    )
                    for i, (stat, cell) in enumerate(stats)
                )
            )
    if not groups:
        raise MissingData(f"no comparisons for models {list(models)} on {benchmark!r}")
    design = "; ".join(
        f"{s} seed{'s' if s != 1 else ''}, {p} problems, n = {n}" for s, p, n in sorted(designs)
    )
    if not any(finite(p) for p in adjusted.values()):
        note = (
            "no test: the paired t, its p-value, the interval with seeds and problems random and the MDE "
            "need >= 2 seeds"
        )
    tost_note = "" if tost_declared else "; post hoc: not declared before the data were seen"
    caption = (
        f"Power of ACE vs its baseline on {names.benchmark(benchmark)} ({design}): difference in Pass@$k$ "
        f"(points) paired by seed with its t interval and p-value, the interval with seeds and problems "
        f"both random, the minimal detectable effect (MDE) of this design, the standardized effect and the "
        f"TOST p of equivalence within ±{scale * margin:g} points (unadjusted{tost_note}); {note}; bold = adjusted "
        f"$p < {alpha_level:g}$."
    )
    name = name or f"power_{benchmark}"
    return Table(
        name=name,
        caption=caption,
        label=f"tab:{name}",
        header=("Comparison", "Statistic", *(f"@{k}" for k in ks)),
        groups=tuple(groups),
        align="ll" + "c" * len(ks),
    )
