"""The paper's tables: one intermediate :class:`Table` per table, rendered to LaTeX (booktabs) and Markdown.

Builders turn DataFrames into a :class:`Table` (values already in display units, marks decided); the two
renderers share :func:`render_cell` and differ only in their :class:`Syntax` (how to write bold, +-, a p-value,
a power of ten) and in the table frame. Tables (paper numbering):

- :func:`passk_table` — Tables 1/2: Pass@k (%) rows = model x method (the base model first), columns @k; mean
  +- 95% CI across seeds (LaTeX ``74.2\\tpm{0.8}``, Markdown ``74.2 ± 0.8``); bold = best, underline = second
  within each model group (ranked on the displayed, rounded values; ties share the mark; competition ranking,
  so two tied best values leave no second).
- :func:`ablation_table` — Table 3 (Sec. 5.4): GRPO baseline, ACE-ReLU, ACE-Softplus x @k.
- :func:`alpha_table` — Table 4 (App. D): rows alpha, columns Pass@1 and Pass@32, the default row in bold.
- :func:`hyperparameter_table` — Table 5: one column per model from ``{model: {hyperparameter: value}}``.
- :func:`significance_table` — ACE vs its baseline per k: difference in points with the p-value.
- :func:`ours_vs_paper_table` — our numbers next to the paper's, with the difference.
- :func:`power_table` — ACE vs its baseline per k: paired difference with its t interval, the interval with seeds
  and problems both random, and the minimal detectable effect of the design (:mod:`acerl.report.power`).

A table that reproduces one of the paper's carries its number (:attr:`Table.number`, from :data:`PAPER_TABLES`)
and starts its caption with the paper caption's first sentence; ``tests/report/test_table_numbers.py`` checks
both against the LaTeX source, in the order the compiled paper numbers its tables.

Kept as one module: the seven table builders are read and checked next to the cell model they fill.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeGuard

import numpy as np
import pandas as pd

from acerl.evaluate.stats import holm
from acerl.report.aggregate import AGG_COLUMNS, CMP_COLUMNS, SIG_COLUMNS, MissingData, require_columns
from acerl.report.power import POWER_COLUMNS
from acerl.report.spec import DisplayNames

__all__ = [
    "Mark",
    "Cell",
    "Row",
    "Table",
    "Syntax",
    "LATEX",
    "MARKDOWN",
    "TPM_MACRO",
    "PAPER_TABLES",
    "rank_marks",
    "render_cell",
    "to_latex",
    "to_markdown",
    "passk_table",
    "alpha_table",
    "rows_seed_note",
    "ablation_table",
    "hyperparameter_table",
    "significance_table",
    "ours_vs_paper_table",
    "power_table",
]

Mark = Literal["bold", "underline"]

TPM_MACRO = r"\providecommand{\tpm}[1]{{\scriptsize\,$\pm$\,#1}}"
"""The paper's ``\\tpm`` macro (mean +- CI); every generated .tex file starts with it."""

PAPER_TABLES: Mapping[str, int] = MappingProxyType(
    {"passk": 1, "ablation": 3, "alpha": 4, "hyperparameters": 5}
)
"""Table numbers of the compiled paper: the Pass@k tables are 1 (first benchmark, MATH-500) and 2 (second,
AIME 2025), the modulation ablation (Sec. 5.4) is 3, the alpha sensitivity (App. D) 4, the hyperparameters
(App. E) 5. LaTeX numbers floats in source order and ``\\appendix`` does not reset the counter."""


# -------------------------------------------------------------------------------------------- structure
@dataclass(frozen=True)
class Cell:
    """One table cell.

    ``value`` (a number in display units; ``None``/NaN shows as missing) with an optional CI half-width
    ``ci``, p-value ``pvalue`` and sign (``signed``: ``+1.2``); or ``raw``, any other content (a hyperparameter,
    a name) formatted by :func:`render_cell`. ``mark`` bolds or underlines the number.
    """

    value: float | None = None
    ci: float | None = None
    pvalue: float | None = None
    signed: bool = False
    mark: Mark | None = None
    raw: Any = None


@dataclass(frozen=True)
class Row:
    label: str
    cells: tuple[Cell, ...]
    bold_label: bool = False  # e.g. Table 4's default alpha (its numbers carry mark="bold")


@dataclass(frozen=True)
class Table:
    """A table independent of its output format.

    Attributes:
        name: file stem (``passk_math500`` -> ``passk_math500.tex`` / ``.md``).
        caption: caption text; ``$...$`` is math (kept in LaTeX, simplified in Markdown), ``%``/``&``/``_`` are
            escaped for LaTeX.
        label: LaTeX label (``tab:...``).
        header: column titles, the first one over the row labels.
        groups: row groups, separated by ``\\midrule`` in LaTeX.
        decimals: digits after the point for numbers.
        resize: wrap the LaTeX tabular in ``\\resizebox{\\textwidth}{!}`` (paper Table 1).
        notes: lines printed under the Markdown table and as ``%`` comments in LaTeX.
        align: one LaTeX column letter per column (``l``/``c``/``r``); default ``l`` then ``c``. Markdown
            left-aligns ``l`` columns and right-aligns the others (numbers).
        number: the paper's table number this table reproduces (:data:`PAPER_TABLES`), ``None`` for tables
            the paper does not have; LaTeX shows it as the caption's number, Markdown as ``Table N.``.
    """

    name: str
    caption: str
    label: str
    header: tuple[str, ...]
    groups: tuple[tuple[Row, ...], ...]
    decimals: int = 1
    resize: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    align: str | None = None
    number: int | None = None

    def __post_init__(self) -> None:
        ncol = len(self.header) - 1
        if self.align is not None and (len(self.align) != ncol + 1 or set(self.align) - set("lcr")):
            raise ValueError(
                f"table {self.name}: align {self.align!r} needs one of l/c/r per column ({ncol + 1})"
            )
        for group in self.groups:
            for row in group:
                if len(row.cells) != ncol:
                    raise ValueError(
                        f"table {self.name}: row {row.label!r} has {len(row.cells)} cells, expected {ncol}"
                    )

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(r for g in self.groups for r in g)

    @property
    def column_align(self) -> str:
        return self.align or "l" + "c" * (len(self.header) - 1)


# ----------------------------------------------------------------------------------------------- syntax
_MATH = re.compile(r"(\$[^$]*\$)")
_MD_MACROS = {
    r"\alpha": "α", r"\beta": "β", r"\Delta": "Δ", r"\pm": "±", r"\times": "×", r"\leq": "≤", r"\geq": "≥",
}  # fmt: skip
_LATEX_TEXT = {"&": r"\&", "%": r"\%", "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "<": r"\textless{}",
               ">": r"\textgreater{}"}  # fmt: skip


def _md_math(segment: str) -> str:
    r"""``$...$`` for Markdown: simple math becomes plain text (``$\alpha$`` -> ``α``, ``$p < 0.05$`` ->
    ``p < 0.05``); anything with sub/superscripts or other commands stays ``$...$`` (GitHub renders it)."""
    inner = segment[1:-1]
    for macro, char in _MD_MACROS.items():
        inner = re.sub(re.escape(macro) + r"(?![A-Za-z])", char, inner)
    return segment if re.search(r"[\\^_{}]", inner) else inner


_MD_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


@dataclass(frozen=True)
class Syntax:
    """How one output format writes the pieces of a cell."""

    name: str
    missing: str

    def escape(self, text: str) -> str:
        raise NotImplementedError

    def bold(self, text: str) -> str:
        raise NotImplementedError

    def underline(self, text: str) -> str:
        raise NotImplementedError

    def pm(self, number: str, ci: str) -> str:
        raise NotImplementedError

    def pvalue(self, number: str, op: str, p: str) -> str:
        raise NotImplementedError

    def power_of_ten(self, mantissa: str, exponent: int) -> str:
        raise NotImplementedError


class _Latex(Syntax):
    def escape(self, text: str) -> str:
        parts = _MATH.split(text)
        for i in range(0, len(parts), 2):  # even parts are outside $...$
            parts[i] = "".join(_LATEX_TEXT.get(ch, ch) for ch in parts[i])
        return "".join(parts)

    def bold(self, text: str) -> str:
        return rf"\textbf{{{text}}}"

    def underline(self, text: str) -> str:
        return rf"\underline{{{text}}}"

    def pm(self, number: str, ci: str) -> str:
        return rf"{number}\tpm{{{ci}}}"

    def pvalue(self, number: str, op: str, p: str) -> str:
        return rf"{number} {{\scriptsize($p{{{op}}}{p}$)}}"

    def power_of_ten(self, mantissa: str, exponent: int) -> str:
        return rf"${mantissa} \times 10^{{{exponent}}}$"


class _Markdown(Syntax):
    def escape(self, text: str) -> str:
        parts = _MATH.split(text)
        for i in range(1, len(parts), 2):
            parts[i] = _md_math(parts[i])
        return "".join(parts).replace("|", r"\|")

    def bold(self, text: str) -> str:
        return f"**{text}**"

    def underline(self, text: str) -> str:
        return f"<u>{text}</u>"

    def pm(self, number: str, ci: str) -> str:
        return f"{number} ± {ci}"

    def pvalue(self, number: str, op: str, p: str) -> str:
        return f"{number} (p{op}{p})"

    def power_of_ten(self, mantissa: str, exponent: int) -> str:
        return f"{mantissa} × 10{str(exponent).translate(_MD_SUPERSCRIPT)}"


LATEX: Syntax = _Latex("latex", "--")
MARKDOWN: Syntax = _Markdown("markdown", "–")


# ------------------------------------------------------------------------------------------- formatting
def _finite(x: Any) -> TypeGuard[float]:
    return x is not None and not pd.isna(x) and math.isfinite(float(x))


def _number(value: float, decimals: int, signed: bool = False) -> str:
    value = round(float(value), decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def _p_parts(p: float) -> tuple[str, str]:
    """A p-value as (operator, digits): ``("=", "0.012")`` or ``("<", "0.001")``."""
    return ("<", "0.001") if p < 0.001 else ("=", f"{p:.3f}")


def _power_parts(value: float) -> tuple[str, int]:
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}", int(exponent)


def _raw(value: Any, syn: Syntax) -> str:
    """A hyperparameter or name: bools and strings as written, ints plainly, small floats as m x 10^e."""
    if value is None:
        return syn.missing
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if value != 0.0 and abs(value) < 1e-3:
            return syn.power_of_ten(*_power_parts(value))
        return repr(value)
    return syn.escape(str(value))


def render_cell(cell: Cell, syn: Syntax, decimals: int) -> str:
    """The text of one cell in ``syn`` (shared by every output format)."""
    if cell.raw is not None:
        text = _raw(cell.raw, syn)
    elif not _finite(cell.value):
        return syn.missing
    else:
        text = _number(float(cell.value), decimals, cell.signed)
    if cell.mark == "bold":
        text = syn.bold(text)
    elif cell.mark == "underline":
        text = syn.underline(text)
    if _finite(cell.ci):
        text = syn.pm(text, _number(float(cell.ci), decimals))
    if _finite(cell.pvalue):
        text = syn.pvalue(text, *_p_parts(float(cell.pvalue)))
    return text


def _row_cells(row: Row, syn: Syntax, decimals: int) -> list[str]:
    label = syn.escape(row.label)
    return [syn.bold(label) if row.bold_label else label, *(render_cell(c, syn, decimals) for c in row.cells)]


def to_latex(table: Table) -> str:
    """The table as a LaTeX ``table`` float with a booktabs ``tabular`` (needs ``booktabs``; ``graphicx`` when
    ``resize``); starts with :data:`TPM_MACRO`."""
    syn = LATEX
    lines = [
        f"% Generated by acerl.report ({table.name}); needs \\usepackage{{booktabs}}"
        + ("" if not table.resize else " and \\usepackage{graphicx}"),
        TPM_MACRO,
        *(f"% {note}" for note in table.notes),
        r"\begin{table}[t]",
        r"\centering",
        *(
            [rf"\renewcommand{{\thetable}}{{{table.number}}}% the paper's Table {table.number}"]
            if table.number
            else []
        ),
        rf"\caption{{{syn.escape(table.caption)}}}",
        rf"\label{{{table.label}}}",
    ]
    if table.resize:
        lines.append(r"\resizebox{\textwidth}{!}{%")
    lines += [
        rf"\begin{{tabular}}{{{table.column_align}}}",
        r"\toprule",
        " & ".join(syn.bold(syn.escape(h)) for h in table.header) + r" \\",
    ]
    for group in table.groups:
        lines.append(r"\midrule")
        lines += [" & ".join(_row_cells(row, syn, table.decimals)) + r" \\" for row in group]
    lines += [r"\bottomrule", r"\end{tabular}" + ("%" if table.resize else "")]
    if table.resize:
        lines.append("}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def to_markdown(table: Table) -> str:
    """The table as GitHub-flavoured Markdown: a bold caption line, the pipe table, then the notes."""
    syn = MARKDOWN
    lines = [
        f"**{'' if table.number is None else f'Table {table.number}: '}{syn.escape(table.caption)}**",
        "",
        "| " + " | ".join(syn.escape(h) for h in table.header) + " |",
        "|" + "|".join(":---" if a == "l" else "---:" for a in table.column_align) + "|",
    ]
    lines += ["| " + " | ".join(_row_cells(row, syn, table.decimals)) + " |" for row in table.rows]
    if table.notes:
        lines += ["", *(f"{note}" for note in table.notes)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- marking
def rank_marks(values: Sequence[float | None], decimals: int = 1) -> list[Mark | None]:
    """Bold the best and underline the second best (higher is better) of one column within one group.

    Values are compared as displayed (rounded to ``decimals``). Competition ranking: rank = 1 + number of
    strictly better values, rank 1 -> bold, rank 2 -> underline; ties share a rank (two tied best values are
    both bold and nothing is underlined). Missing values get no mark; with fewer than two values nothing is
    marked, with fewer than three nothing is underlined.
    """
    shown = [round(float(v), decimals) if _finite(v) else None for v in values]
    present = [v for v in shown if v is not None]
    marks: list[Mark | None] = []
    for v in shown:
        if v is None or len(present) < 2:
            marks.append(None)
            continue
        rank = 1 + sum(1 for o in present if o > v)
        marks.append("bold" if rank == 1 else ("underline" if rank == 2 and len(present) >= 3 else None))
    return marks


# --------------------------------------------------------------------------------------------- builders
def _cell_lookup(agg: pd.DataFrame) -> dict[tuple[str, str, str, int], tuple[float, float, Any]]:
    require_columns(agg, AGG_COLUMNS, "aggregated results")
    return {
        (r.benchmark, r.model, r.method, int(r.k)): (float(r.mean), float(r.ci95), r.n_seeds)
        for r in agg.itertuples(index=False)
    }


def _ks(agg: pd.DataFrame, ks: Sequence[int] | None) -> tuple[int, ...]:
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
    ks = _ks(sub, ks)
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
    ks = _ks(sub, ks)
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
    return _ks(sub, ks), {(r.model, r.method, int(r.k)): r for r in sub.itertuples(index=False)}


Primary = tuple[str, int]
"""The primary endpoint ``(benchmark, k)`` (config ``report.primary``)."""


def holm_by_family(
    pvalues: Mapping[tuple[str, str, int], float], benchmark: str, primary: Primary | None
) -> tuple[dict[tuple[str, str, int], float], str]:
    """Holm-adjusted p-values of one table's cells ``{(model, method, k): p}`` and the caption's sentence.

    On the primary endpoint's benchmark its column (``k``) is one family (the confirmatory tests, one per
    comparison) and every other cell of the table another; elsewhere the whole table is one family."""
    keys = [key for key, p in pvalues.items() if _finite(p)]
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
                significant = _finite(p) and p < alpha_level
                cells.append(
                    Cell(value=r.delta * scale, signed=True, pvalue=p, mark="bold" if significant else None)
                )
            label = f"{names.model(model)}: {names.method(method)} vs {names.method(baseline)}"
            rows.append(Row(label, tuple(cells)))
        if rows:
            groups.append(tuple(rows))
    if not groups:
        raise MissingData(f"no comparisons for models {list(models)} on {benchmark!r}")
    tests = {r.test for r in look.values() if _finite(r.p)}
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
) -> Table:
    """ACE vs its baseline on one benchmark with the power of the design (:func:`acerl.report.power.power_frame`).

    Per comparison five rows, columns @k: the paired difference (points) +- its t interval with the paired
    p-value Holm-adjusted by :func:`holm_by_family` (bold where the adjusted ``p < alpha_level``); the interval
    with seeds and problems both random ("n/a" with one seed); the minimal detectable effect (two-sided
    ``alpha_level``, ``power``); the standardized effect ``d_z``; the TOST p of equivalence within ``margin``
    (a fraction; ``pw`` computed with the same margin; unadjusted).

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
                mark="bold" if _finite(p_of(r)) and p_of(r) < alpha_level else None,
            ),
        ),
        (
            f"{level} CI (seeds and problems random)",
            lambda r: Cell(raw=f"[{_number(r.sp_low * scale, 1, True)}, {_number(r.sp_high * scale, 1, True)}]")
            if r.n_seeds >= 2 else Cell(raw="n/a (needs >= 2 seeds)"),
        ),
        (f"MDE ($\\alpha$ = {alpha_level:g}, power {power:g})", lambda r: Cell(value=r.mde * scale)),
        ("Standardized effect ($\\Delta$ / SD across seeds)", lambda r: Cell(raw=_number(r.dz, 2, True)) if _finite(r.dz) else Cell()),
        (
            f"TOST p (equivalence within ±{scale * margin:g})",
            lambda r: Cell(raw="".join(_p_parts(r.p_tost)).lstrip("=")) if _finite(r.p_tost) else Cell(),
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
    if not any(_finite(p) for p in adjusted.values()):
        note = (
            "no test: the paired t, its p-value, the interval with seeds and problems random and the MDE "
            "need >= 2 seeds"
        )
    caption = (
        f"Power of ACE vs its baseline on {names.benchmark(benchmark)} ({design}): difference in Pass@$k$ "
        f"(points) paired by seed with its t interval and p-value, the interval with seeds and problems "
        f"both random, the minimal detectable effect (MDE) of this design, the standardized effect and the "
        f"TOST p of equivalence within ±{scale * margin:g} points (unadjusted); {note}; bold = adjusted "
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
