"""Equations are cited one way: ``Eq. N`` by the ACE paper's printed number (``Eqs. N-M``, ``Eqs. N, M``), or
``arXiv <id> Eq. N`` for another paper. Every ACE number cited in the code, the docs and the tests is one of
:data:`PAPER_EQUATIONS`, whose numbers are checked against the equation counter of ``ace_paper.tex`` (each
numbered ``equation`` one number, each ``align`` line without ``\\nonumber`` one), so a cited number always names
the labelled equation it is meant to."""

from __future__ import annotations

import os
import re
from pathlib import Path

from support.ci_inputs import skip_or_fail_in_ci

REPO = Path(__file__).resolve().parents[1]
PAPER = Path(os.environ.get("ACERL_PAPER_TEX", REPO.parent / "shared" / "paper" / "ace_paper.tex"))

# the ACE paper's equations the project cites: printed number -> label in ace_paper.tex
PAPER_EQUATIONS = {
    2: "eq:grpo",  # GRPO's objective (group-normalised advantage, clipped ratio, beta KL)
    5: "eq:ace_advantage",  # the ACE advantage: A_i * (1 + alpha * phi(c_i)) on incorrect rollouts
    8: "eq:ace_grpo",  # ACE-GRPO's objective
    9: "eq:psr_loss",  # the loss on correct rollouts
    10: "eq:nsr_loss",  # the loss on incorrect rollouts
}

CITED_FILES = ("src", "docs", "tests", "benchmarks", "scripts", "workflow", "README.md", "Snakefile")
CITATION = re.compile(r"(arXiv\s+\d{4}\.\d{4,5}\s+)?Eqs?\.\s*(\d+(?:\s*(?:-|,|and)\s*\d+)*)")
LABEL_CITATION = re.compile(r"Eqs?\.\s*`*eq:")  # the retired style: a LaTeX label in place of the number


def equation_numbers(tex: str) -> dict[str, int]:
    """``{label: printed number}`` of the labelled equations: LaTeX's counter over numbered ``equation``
    environments and ``align`` lines (a line ends at ``\\\\``; ``\\nonumber``/``\\notag`` skips it)."""
    numbers: dict[str, int] = {}
    counter = 0
    env = re.compile(r"\\begin\{(equation|align)\}(.*?)\\end\{\1\}", re.S)
    for match in env.finditer(tex):
        kind, body = match.groups()
        lines = [body] if kind == "equation" else re.split(r"\\\\(?!\w)", body)
        for line in lines:
            if kind == "align" and not line.strip():
                continue
            if re.search(r"\\(nonumber|notag)\b", line):
                continue
            counter += 1
            for label in re.findall(r"\\label\{([^}]+)\}", line):
                numbers[label] = counter
    return numbers


def _citations(text: str) -> list[tuple[int, int]]:
    """``(offset, number)`` of each ACE equation cited in ``text`` (a citation may break across lines)."""
    out = []
    for match in CITATION.finditer(text):
        if match.group(1):  # another paper's equation
            continue
        for part in re.split(r"\s*(?:,|and)\s*", match.group(2)):
            ends = [int(x) for x in re.split(r"\s*-\s*", part)]
            out += [(match.start(), n) for n in range(ends[0], ends[-1] + 1)]
    return out


def _cited_numbers(text: str) -> list[int]:
    return [n for _, n in _citations(text)]


def _files() -> list[Path]:
    files: list[Path] = []
    for name in CITED_FILES:
        path = REPO / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p for p in path.rglob("*") if p.suffix in (".py", ".md", ".smk", ".yaml", ".sh", ".tex")
            ]
    return [f for f in files if f.is_file()]


def test_cited_numbers_are_the_papers_labels() -> None:
    if not PAPER.is_file():
        skip_or_fail_in_ci(f"{PAPER} not found (set ACERL_PAPER_TEX)")
    numbers = equation_numbers(PAPER.read_text(encoding="utf-8"))
    assert {label: numbers.get(label) for label in PAPER_EQUATIONS.values()} == {
        label: n for n, label in PAPER_EQUATIONS.items()
    }


def test_every_equation_is_cited_by_its_number() -> None:
    wrong: list[str] = []
    for file in _files():
        if file == Path(__file__):
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        rel = file.relative_to(REPO)
        for match in LABEL_CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            wrong.append(f"{rel}:{line}: cite the paper's number, not its label")
        for offset, n in _citations(text):
            if n not in PAPER_EQUATIONS:
                line = text.count("\n", 0, offset) + 1
                wrong.append(f"{rel}:{line}: Eq. {n} is not one of the ACE paper's cited equations")
    assert wrong == []


def test_the_counter_counts_align_lines_and_skips_nonumber() -> None:
    tex = r"""
    \begin{equation} a \label{eq:a} \end{equation}
    \begin{equation*} x \end{equation*}
    \begin{align} b &= c \nonumber \\ d &= e \label{eq:d} \\ f &= g \label{eq:f} \end{align}
    \begin{equation} h \label{eq:h} \end{equation}
    """
    assert equation_numbers(tex) == {"eq:a": 1, "eq:d": 2, "eq:f": 3, "eq:h": 4}


def test_the_citation_pattern_reads_ranges_lists_and_other_papers() -> None:
    assert _cited_numbers("paper Eq. 5 and Eqs. 8-10, and Eqs. 2, 5") == [5, 8, 9, 10, 2, 5]
    assert _cited_numbers("arXiv 2506.01347 Eq. 4; arXiv 2505.22617 Eqs. 10-12") == []
