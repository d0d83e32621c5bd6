"""Every table the report emits carries the number and title of the paper's table with the same content.

The paper's tables are read from the LaTeX source (``../shared/paper/ace_paper.tex``, skipped where absent) and
numbered as LaTeX numbers them: ``table`` floats in source order (``\\appendix`` does not reset the counter).
The report's rendering of ``config/paper_results/`` must emit each of Tables 1-5 exactly once, with that number, the
caption's first sentence, and the same numbers in its body, so the numbering can never drift from the paper's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from acerl.report.render import render_paper


class TexTable(NamedTuple):
    number: int | None
    caption: str
    label: str
    body: str


def _strip_comments(tex: str) -> str:
    return re.sub(r"(?<!\\)%.*", "", tex)


def _braced(tex: str, start: int) -> str:
    """The text inside the braces opening at ``tex[start]`` (nested braces kept)."""
    assert tex[start] == "{", tex[start : start + 20]
    depth = 0
    for i in range(start, len(tex)):
        depth += {"{": 1, "}": -1}.get(tex[i], 0)
        if depth == 0:
            return tex[start + 1 : i]
    raise AssertionError("unbalanced braces")


def _table(float_text: str, number: int | None) -> TexTable:
    cap = float_text.index(r"\caption") + len(r"\caption")
    label = re.search(r"\\label\{([^}]*)\}", float_text)
    assert label is not None, float_text[:200]
    body = float_text[float_text.index(r"\midrule") : float_text.index(r"\bottomrule")]
    return TexTable(number, _braced(float_text, cap), label.group(1), body)


def paper_tables(tex: str) -> list[TexTable]:
    """The paper's ``table`` floats in source order, numbered 1, 2, ... as the compiled paper shows them."""
    tex = _strip_comments(tex)
    floats = re.findall(r"\\begin\{table\*?\}.*?\\end\{table\*?\}", tex, flags=re.S)
    return [_table(f, i) for i, f in enumerate(floats, start=1)]


def emitted_table(path: Path) -> TexTable:
    """One ``.tex`` file the report wrote; its number is the ``\\thetable`` it sets (``None``: not numbered)."""
    tex = path.read_text(encoding="utf-8")
    number = re.search(r"\\renewcommand\{\\thetable\}\{(\d+)\}", tex)
    return _table(_strip_comments(tex), int(number.group(1)) if number else None)


def title(caption: str) -> str:
    """A caption's first sentence, whitespace collapsed."""
    first = re.split(r"\.(?:\s|$)", caption.strip(), maxsplit=1)[0]
    return " ".join(first.split())


def body_numbers(body: str) -> list[str]:
    """Every number in the table body's data cells (row labels left out), row by row."""
    out = []
    for line in body.splitlines():
        if line.strip().endswith(r"\\"):
            cells = line.strip()[:-2].split("&")[1:]
            out += re.findall(r"-?\d+(?:\.\d+)?", " ".join(cells))
    return out


def test_paper_source_has_five_tables(paper_tex):
    """The reading of the source this test relies on: Table 3 is the modulation ablation (Sec. 5.4, before the
    appendix), Table 4 the alpha sensitivity (App. D)."""
    labels = [t.label for t in paper_tables(paper_tex)]
    assert labels == [
        "tab:math500_results",
        "tab:math_aime25_results",
        "tab:ablation_modulation",
        "tab:alpha_sensitivity",
        "tab:hyperparameters",
    ]


def test_report_numbers_tables_as_the_paper(paper_tex, tmp_path):
    render_paper(tmp_path, formats=("png",))
    emitted = [emitted_table(p) for p in sorted((tmp_path / "tables").glob("*.tex"))]
    numbered = [t for t in emitted if t.number is not None]
    paper = {t.number: t for t in paper_tables(paper_tex)}
    assert sorted(t.number for t in numbered) == sorted(paper), "each of the paper's tables exactly once"
    for ours in numbered:
        theirs = paper[ours.number]
        assert title(ours.caption) == title(theirs.caption), (ours.number, ours.label)
        assert body_numbers(ours.body) == body_numbers(theirs.body), (ours.number, ours.label)
    markdown = {p.stem: p.read_text(encoding="utf-8") for p in (tmp_path / "tables").glob("*.md")}
    assert markdown["ablation_modulation"].startswith("**Table 3: Ablation: modulation function on MATH-500")
    assert markdown["alpha_sensitivity"].startswith("**Table 4: Sensitivity to α on MATH-500")


def test_the_check_catches_swapped_numbers(paper_tex, tmp_path):
    """The comparison fails when two tables carry each other's numbers (the bug this file guards against)."""
    render_paper(tmp_path, formats=("png",))
    paper = {t.number: t for t in paper_tables(paper_tex)}
    ablation = emitted_table(tmp_path / "tables" / "ablation_modulation.tex")
    swapped = ablation._replace(number=4)
    assert title(swapped.caption) != title(paper[4].caption)
    assert body_numbers(swapped.body) != body_numbers(paper[4].body)


@pytest.mark.parametrize(
    ("caption", "expected"),
    [
        (r"Pass@$k$ (\%) on MATH-500. We report", r"Pass@$k$ (\%) on MATH-500"),
        ("Ablation: on X (M, $\\alpha = 1.0$).", "Ablation: on X (M, $\\alpha = 1.0$)"),
        (
            "Training hyperparameters for ACE-GRPO experiments.",
            "Training hyperparameters for ACE-GRPO experiments",
        ),
    ],
)
def test_title_is_the_first_sentence(caption, expected):
    assert title(caption) == expected
