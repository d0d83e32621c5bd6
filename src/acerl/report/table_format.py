"""The report's table model and its two renderings: one :class:`Table` of :class:`Row` s of :class:`Cell` s
(values already in display units, marks decided), written to LaTeX (booktabs) and Markdown.

The two renderers share :func:`render_cell` and differ only in their :class:`Syntax` (how to write bold, +-, a
p-value, a power of ten) and in the table frame. :func:`rank_marks` decides the bold / underline marks of a
column. The builders that fill tables are :mod:`acerl.report.tables` (the paper's tables) and
:mod:`acerl.report.stat_tables` (the comparisons' tests).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

import numpy as np
import pandas as pd

__all__ = [
    "Mark",
    "Cell",
    "Row",
    "Table",
    "Syntax",
    "LATEX",
    "MARKDOWN",
    "TPM_MACRO",
    "rank_marks",
    "render_cell",
    "to_latex",
    "to_markdown",
    "finite",
    "number_text",
    "p_parts",
]


Mark = Literal["bold", "underline"]

TPM_MACRO = r"\providecommand{\tpm}[1]{{\scriptsize\,$\pm$\,#1}}"
"""The paper's ``\\tpm`` macro (mean +- CI); every generated .tex file starts with it."""


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
def finite(x: Any) -> TypeGuard[float]:
    return x is not None and not pd.isna(x) and math.isfinite(float(x))


def number_text(value: float, decimals: int, signed: bool = False) -> str:
    value = round(float(value), decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def p_parts(p: float) -> tuple[str, str]:
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
    elif not finite(cell.value):
        return syn.missing
    else:
        text = number_text(float(cell.value), decimals, cell.signed)
    if cell.mark == "bold":
        text = syn.bold(text)
    elif cell.mark == "underline":
        text = syn.underline(text)
    if finite(cell.ci):
        text = syn.pm(text, number_text(float(cell.ci), decimals))
    if finite(cell.pvalue):
        text = syn.pvalue(text, *p_parts(float(cell.pvalue)))
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
    shown = [round(float(v), decimals) if finite(v) else None for v in values]
    present = [v for v in shown if v is not None]
    marks: list[Mark | None] = []
    for v in shown:
        if v is None or len(present) < 2:
            marks.append(None)
            continue
        rank = 1 + sum(1 for o in present if o > v)
        marks.append("bold" if rank == 1 else ("underline" if rank == 2 and len(present) >= 3 else None))
    return marks
