"""The paper's tables, each built from the report's DataFrames into a :class:`~acerl.report.table_format.Table`
(values already in display units, marks decided), rendered by :mod:`acerl.report.table_format`. Tables (paper
numbering):

- :func:`passk_table` — Tables 1/2: Pass@k (%) rows = model x method (the base model first), columns @k; mean
  +- 95% CI across seeds (LaTeX ``74.2\\tpm{0.8}``, Markdown ``74.2 ± 0.8``); bold = best, underline = second
  within each model group (ranked on the displayed, rounded values; ties share the mark; competition ranking,
  so two tied best values leave no second).
- :func:`ablation_table` — Table 3 (Sec. 5.4): GRPO baseline, ACE-ReLU, ACE-Softplus x @k.
- :func:`alpha_table` — Table 4 (App. D): rows alpha, columns Pass@1 and Pass@32, the default row in bold.
- :func:`hyperparameter_table` — Table 5: one column per model from ``{model: {hyperparameter: value}}``.
- :func:`ours_vs_paper_table` — our numbers next to the paper's, with the difference.

The comparisons' tests (significance, the power study) are :mod:`acerl.report.stat_tables`. A table that
reproduces one of the paper's carries its number (:attr:`Table.number`, from :data:`PAPER_TABLES`) and starts
its caption with the paper caption's first sentence; ``tests/report/test_table_numbers.py`` checks both against
the LaTeX source, in the order the compiled paper numbers its tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pandas as pd

from acerl.report.aggregate import AGG_COLUMNS, CMP_COLUMNS, MissingData, require_columns
from acerl.report.spec import DisplayNames
from acerl.report.table_format import Cell, Mark, Row, Table, rank_marks

__all__ = [
    "PAPER_TABLES",
    "passk_table",
    "alpha_table",
    "rows_seed_note",
    "ablation_table",
    "hyperparameter_table",
    "ours_vs_paper_table",
    "table_ks",
]

PAPER_TABLES: Mapping[str, int] = MappingProxyType(
    {"passk": 1, "ablation": 3, "alpha": 4, "hyperparameters": 5}
)
"""Table numbers of the compiled paper: the Pass@k tables are 1 (first benchmark, MATH-500) and 2 (second,
AIME 2025), the modulation ablation (Sec. 5.4) is 3, the alpha sensitivity (App. D) 4, the hyperparameters
(App. E) 5. LaTeX numbers floats in source order and ``\\appendix`` does not reset the counter."""


# --------------------------------------------------------------------------------------------- builders
def _cell_lookup(agg: pd.DataFrame) -> dict[tuple[str, str, str, int], tuple[float, float, Any]]:
    require_columns(agg, AGG_COLUMNS, "aggregated results")
    return {
        (r.benchmark, r.model, r.method, int(r.k)): (float(r.mean), float(r.ci95), r.n_seeds)
        for r in agg.itertuples(index=False)
    }


def table_ks(agg: pd.DataFrame, ks: Sequence[int] | None) -> tuple[int, ...]:
    return tuple(int(k) for k in ks) if ks is not None else tuple(sorted(int(k) for k in agg["k"].unique()))


def _seed_phrase(counts: Sequence[Any]) -> str:
    """How many training runs the rows average: one count, or a range when rows differ (a partial report, where
    a row with one run has no interval; :func:`rows_seed_note` then names the rows of each count)."""
    vals = sorted({int(c) for c in counts if c is not None and not pd.isna(c)})
    if not vals:
        return "training runs"
    if len(vals) == 1:
        return f"{vals[0]} independent training run{'s' if vals[0] != 1 else ''}"
    return f"{vals[0]}-{vals[-1]} independent training runs"


def passk_table(
    agg: pd.DataFrame,
    benchmark: str,
    *,
    names: DisplayNames,
    models: Sequence[str],
    methods: Sequence[str],
    ks: Sequence[int] | None = None,
    with_ci: bool = True,
    mark: bool = True,
    name: str | None = None,
    caption: str | None = None,
    label: str | None = None,
    scale: float = 100.0,
    number: int | None = None,
    ci_kind: str | None = None,
) -> Table:
    """Paper Tables 1/2: Pass@k (%) of every model x method on one benchmark.

    Args:
        agg: aggregated results (:data:`acerl.report.aggregate.AGG_COLUMNS`, fractions).
        benchmark: benchmark key.
        names: display names; a row is ``"<model>"`` for the base model and ``"<model> + <method>"`` otherwise.
        models, methods: group order and row order within a group; absent (model, method) pairs are skipped.
        ks: columns (default: every k of the benchmark).
        with_ci: show ``mean +- ci95`` (Table 1) or the mean only (Table 2).
        mark: bold best / underline second within each model group (:func:`rank_marks`).
        scale: fraction -> display unit (100: percent).
        number: the paper's table number (1 or 2, :data:`PAPER_TABLES`) or ``None``.
        ci_kind: how the CIs were computed (``"t"`` / ``"normal"``), named in the caption; ``None``: not named
            (the paper's own numbers).

    Raises:
        MissingData: nothing for this benchmark.
    """
    sub = agg[agg["benchmark"] == benchmark]
    if sub.empty:
        raise MissingData(f"no Pass@k results for benchmark {benchmark!r}")
    cells = _cell_lookup(sub)
    ks = table_ks(sub, ks)
    decimals = 1
    groups: list[tuple[Row, ...]] = []
    seed_counts = []
    row_counts: list[tuple[str, Any, bool]] = []  # (row label, training runs, the base model's row)
    evaluated = set(
        zip(agg["model"], agg["method"], strict=True)
    )  # on any benchmark: missing here shows as "-"
    for model in models:
        present = [m for m in methods if (model, m) in evaluated]
        if not present:
            continue
        columns: list[list[Cell]] = []
        for k in ks:
            col = []
            for method in present:
                mean, ci, n_seeds = cells.get((benchmark, model, method, k), (math.nan, math.nan, None))
                if method != "base":  # the base model is no training run (one evaluation, no interval)
                    seed_counts.append(n_seeds)
                col.append(Cell(value=mean * scale, ci=ci * scale if with_ci else None))
            if mark:
                marks = rank_marks([c.value for c in col], decimals)
                col = [Cell(value=c.value, ci=c.ci, mark=mk) for c, mk in zip(col, marks, strict=True)]
            columns.append(col)
        rows = tuple(
            Row(_row_label(names, model, method), tuple(columns[j][i] for j in range(len(ks))))
            for i, method in enumerate(present)
        )
        row_counts += [
            (row.label, _row_seeds(cells, benchmark, model, m, ks), m == "base")
            for row, m in zip(rows, present, strict=True)
        ]
        groups.append(rows)
    if not groups:
        raise MissingData(f"none of models {list(models)} x methods {list(methods)} on {benchmark!r}")
    bench = names.benchmark(benchmark)
    if caption is None:
        stat = (
            f"Mean $\\pm$ 95% confidence interval{_CI_NAMES.get(ci_kind or '', '')} over {_seed_phrase(seed_counts)}"
            if with_ci
            else "Point estimates (mean over training runs)"
        )
        caption = f"Pass@$k$ (%) on {bench}. {stat}."
        missing = [label for label, n, _ in row_counts if n is None]
        trained = [(label, n) for label, n, base in row_counts if not base]
        if len({n for _, n in trained if n is not None}) > 1:
            caption += " " + rows_seed_note(trained)
        if missing:
            caption += f" Not evaluated on {bench} (shown as -): {', '.join(missing)}."
        if mark:
            caption += " Bold = best within each model group; underline = second best."
    return Table(
        name=name or f"passk_{benchmark}",
        caption=caption,
        label=label or f"tab:passk_{benchmark}",
        header=("Model", *(f"@{k}" for k in ks)),
        groups=tuple(groups),
        decimals=decimals,
        resize=with_ci,
        number=number,
    )


_CI_NAMES = {"t": " (Student t)", "normal": " (normal approximation)"}


def _row_label(names: DisplayNames, model: str, method: str) -> str:
    return names.model(model) if method == "base" else f"{names.model(model)} + {names.method(method)}"


def _alpha_text(alpha: float) -> str:
    return f"{alpha:.1f}" if round(alpha, 1) == alpha else f"{alpha:g}"


def rows_seed_note(counts: Sequence[tuple[str, Any]]) -> str:
    """Caption sentence saying how many training runs each row averages, from ``(row label, n_seeds)`` pairs:
    one count for all rows, or the rows grouped by count when they differ (e.g. rows reused from the main grid
    with its seeds next to rows trained for this table only)."""
    known = [(label, int(n)) for label, n in counts if n is not None and not pd.isna(n)]
    if not known:
        return ""
    by_n: dict[int, list[str]] = {}
    for label, n in known:
        by_n.setdefault(n, []).append(label)
    if len(by_n) == 1:
        n = next(iter(by_n))
        return f"Every row averages {n} training run{'s' if n != 1 else ''}."
    parts = [f"{n} ({', '.join(labels)})" for n, labels in sorted(by_n.items(), reverse=True)]
    return "Training runs averaged per row: " + "; ".join(parts) + "."


def _caption(*sentences: str) -> str:
    return " ".join(s for s in sentences if s)


def alpha_table(
    agg: pd.DataFrame,
    *,
    model: str,
    benchmark: str,
    alpha_methods: Mapping[str, float],
    names: DisplayNames,
    default_alpha: float = 1.0,
    zero_label: str | None = "GRPO",
    ks: Sequence[int] = (1, 32),
    name: str = "alpha_sensitivity",
    scale: float = 100.0,
    seed_note: bool = False,
    number: int | None = PAPER_TABLES["alpha"],
) -> Table:
    """Paper Table 4 (App. D): sensitivity to alpha; rows sorted by alpha, the default alpha's row in bold.

    Args:
        alpha_methods: method key -> its alpha (e.g. ``{"grpo": 0.0, "ace_grpo-alpha0.5": 0.5, "ace_grpo": 1.0}``).
        zero_label: shown after alpha = 0 (``"0.0 (GRPO)"``); ``None`` for none.
        seed_note: add :func:`rows_seed_note` (from ``agg``'s ``n_seeds``) to the caption.

    Raises:
        MissingData: none of the methods has results for ``model`` on ``benchmark``.
    """
    sub = agg[(agg["benchmark"] == benchmark) & (agg["model"] == model)]
    cells = _cell_lookup(sub)
    rows, counts = [], []
    for method, alpha in sorted(alpha_methods.items(), key=lambda kv: kv[1]):
        if not any((benchmark, model, method, k) in cells for k in ks):
            continue
        label = _alpha_text(alpha)
        if alpha == 0.0 and zero_label:
            label += f" ({zero_label})"
        is_default = alpha == float(default_alpha)
        if is_default:
            label += " (default)"
        vals = [cells.get((benchmark, model, method, k), (math.nan,))[0] * scale for k in ks]
        mark: Mark | None = "bold" if is_default else None
        rows.append(Row(label, tuple(Cell(value=v, mark=mark) for v in vals), bold_label=is_default))
        counts.append((label, _row_seeds(cells, benchmark, model, method, ks)))
    if not rows:
        raise MissingData(f"no alpha-sweep results for {model!r} on {benchmark!r}")
    caption = _caption(
        f"Sensitivity to $\\alpha$ on {names.benchmark(benchmark)} ({names.model(model)}).",
        "Default in bold.",
        rows_seed_note(counts) if seed_note else "",
    )
    return Table(
        name=name,
        caption=caption,
        label="tab:alpha_sensitivity",
        header=("$\\alpha$", *(f"Pass@{k} (%)" for k in ks)),
        groups=(tuple(rows),),
        number=number,
    )


def _row_seeds(
    cells: Mapping[tuple[str, str, str, int], tuple[float, float, Any]],
    benchmark: str,
    model: str,
    method: str,
    ks: Sequence[int],
) -> Any:
    """The largest seed count of one row's cells (``None`` when no cell states one)."""
    ns = [cells[key][2] for k in ks if (key := (benchmark, model, method, k)) in cells]
    ns = [int(n) for n in ns if n is not None and not pd.isna(n)]
    return max(ns) if ns else None


def ablation_table(
    agg: pd.DataFrame,
    *,
    model: str,
    benchmark: str,
    methods: Mapping[str, str],
    names: DisplayNames,
    ks: Sequence[int] | None = None,
    alpha: float | None = 1.0,
    name: str = "ablation_modulation",
    scale: float = 100.0,
    seed_note: bool = False,
    number: int | None = PAPER_TABLES["ablation"],
) -> Table:
    """Paper Table 3 (Sec. 5.4): the modulation-function ablation; rows ``methods`` (key -> row label),
    columns @k. ``seed_note``: add :func:`rows_seed_note` (from ``agg``'s ``n_seeds``) to the caption.

    Raises:
        MissingData: none of the methods has results for ``model`` on ``benchmark``.
    """
    sub = agg[(agg["benchmark"] == benchmark) & (agg["model"] == model)]
    if sub.empty:
        raise MissingData(f"no ablation results for {model!r} on {benchmark!r}")
    cells = _cell_lookup(sub)
    ks = table_ks(sub, ks)
    present = [
        (m, label) for m, label in methods.items() if any((benchmark, model, m, k) in cells for k in ks)
    ]
    rows = tuple(
        Row(label, tuple(Cell(value=cells.get((benchmark, model, m, k), (math.nan,))[0] * scale) for k in ks))
        for m, label in present
    )
    if not rows:
        raise MissingData(f"none of the ablation methods {list(methods)} ran for {model!r} on {benchmark!r}")
    extra = f", $\\alpha = {_alpha_text(alpha)}$" if alpha is not None else ""
    counts = [(label, _row_seeds(cells, benchmark, model, m, ks)) for m, label in present]
    caption = _caption(
        f"Ablation: modulation function on {names.benchmark(benchmark)} ({names.model(model)}{extra}).",
        rows_seed_note(counts) if seed_note else "",
    )
    return Table(
        name=name,
        caption=caption,
        label="tab:ablation_modulation",
        header=("Method", *(f"@{k}" for k in ks)),
        groups=(rows,),
        number=number,
    )


def hyperparameter_table(
    hyperparameters: Mapping[str, Mapping[str, Any]],
    *,
    names: DisplayNames,
    name: str = "hyperparameters",
    caption: str = "Training hyperparameters for ACE-GRPO experiments. Every method on a model uses them.",
    number: int | None = PAPER_TABLES["hyperparameters"],
) -> Table:
    """Paper Table 5: ``{model: {hyperparameter: value}}`` -> rows = hyperparameters (first-seen order),
    columns = models. Values: ints and strings as given, booleans as True/False, ``None`` as ``--``, floats
    below 1e-3 as ``m x 10^e`` (``1e-5`` -> ``$1 \\times 10^{-5}$``), other floats by ``repr`` (``1.0``).

    Raises:
        MissingData: empty mapping.
    """
    if not hyperparameters:
        raise MissingData("no hyperparameters given")
    models = list(hyperparameters)
    keys: list[str] = []
    for m in models:
        keys += [k for k in hyperparameters[m] if k not in keys]
    rows = tuple(
        Row(key, tuple(Cell(raw=hyperparameters[m][key]) if hyperparameters[m].get(key) is not None else Cell()
                       for m in models))
        for key in keys
    )  # fmt: skip
    return Table(
        name=name,
        caption=caption,
        label="tab:hyperparameters",
        header=("Hyperparameter", *(names.model(m) for m in models)),
        groups=(rows,),
        number=number,
    )


def ours_vs_paper_table(
    cmp: pd.DataFrame,
    *,
    names: DisplayNames,
    models: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    benchmarks: Sequence[str] | None = None,
    name: str = "ours_vs_paper",
    scale: float = 100.0,
) -> Table:
    """Our Pass@k next to the paper's for every (benchmark, model, method, k) in both (from
    :func:`acerl.report.aggregate.ours_vs_paper`); ``Delta = ours - paper`` in points. One row per cell, grouped
    by benchmark and model, ordered by ``benchmarks``, ``models``, ``methods`` (others after them), then k.

    Raises:
        MissingData: no overlap between our results and the paper's.
    """
    require_columns(cmp, CMP_COLUMNS, "ours-vs-paper results")
    if cmp.empty:
        raise MissingData("no (benchmark, model, method, k) in common with the paper's results")

    def rank(order: Sequence[str] | None) -> Callable[[str], tuple[int, str]]:
        pos = {x: i for i, x in enumerate(order or [])}
        return lambda x: (pos.get(x, len(pos)), x)

    by_bench, by_model, by_method = rank(benchmarks), rank(models), rank(methods)
    cmp = cmp.assign(
        _b=cmp["benchmark"].map(by_bench), _m=cmp["model"].map(by_model), _me=cmp["method"].map(by_method)
    ).sort_values(["_b", "_m", "_me", "k"], kind="stable")
    groups = []
    for (_, _, bench, model), grp in cmp.groupby(["_b", "_m", "benchmark", "model"], sort=True):
        rows = tuple(
            Row(
                names.benchmark(bench),
                (
                    Cell(raw=names.model(model)),
                    Cell(raw=names.method(r.method)),
                    Cell(raw=int(r.k)),
                    Cell(value=r.ours * scale, ci=r.ours_ci95 * scale),
                    Cell(value=r.paper * scale, ci=r.paper_ci95 * scale),
                    Cell(value=r.delta * scale, signed=True),
                ),
            )
            for r in grp.itertuples(index=False)
        )
        groups.append(rows)
    return Table(
        name=name,
        caption="Our Pass@$k$ (%) vs the paper's; $\\Delta$ = ours - paper (points).",
        label="tab:ours_vs_paper",
        header=("Benchmark", "Model", "Method", "k", "Ours", "Paper", "$\\Delta$"),
        groups=tuple(groups),
        align="lllcccc",
    )
