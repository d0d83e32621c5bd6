"""The README's first screen: its picture of the pipeline is what ``acerl config graph`` prints for the default
config (so it cannot drift from the stage table), and its prose is short (median sentence at most 16 words, no
paragraph over 150 words, as measured by :func:`prose_stats`)."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path

from acerl.config import load_config
from acerl.stages import pipeline_graph

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FIRST_SCREEN_END = "## Quick start"


def first_screen() -> str:
    text = README.read_text(encoding="utf-8")
    return text[: text.index(FIRST_SCREEN_END)]


def prose_paragraphs(markdown: str) -> list[str]:
    """The prose paragraphs of ``markdown``: no fenced code, tables, headings or images; a list item is a
    paragraph of its own."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if ln.strip() and not re.match(r"\s*(\||#|!\[)", ln)]
        item: list[str] = []
        for line in lines:
            if re.match(r"\s*[-*] ", line) and item:
                paragraphs.append(" ".join(item))
                item = []
            item.append(re.sub(r"^\s*[-*] ", "", line).strip())
        if item:
            paragraphs.append(" ".join(item))
    return paragraphs


def sentences(paragraph: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z*`(\[])", paragraph) if s.strip()]


def prose_stats(markdown: str) -> tuple[float, int]:
    """(median words per sentence, most words in one paragraph) of ``markdown``'s prose."""
    paragraphs = prose_paragraphs(markdown)
    lengths = [len(s.split()) for p in paragraphs for s in sentences(p)]
    return statistics.median(lengths), max(len(p.split()) for p in paragraphs)


def test_the_readme_picture_is_the_stage_table() -> None:
    block = re.search(r"```mermaid\n(.*?)```", first_screen(), re.S)
    assert block, "README's first screen has no mermaid picture"
    expected = pipeline_graph(load_config([REPO / "config" / "config.yaml"]))
    assert block.group(1) == expected, "regenerate it: acerl config graph > the README's mermaid block"
    out = subprocess.run(
        [sys.executable, "-m", "acerl.cli", "config", "graph"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == expected  # the command the README names prints it


def test_the_first_screen_reads_short() -> None:
    median, longest = prose_stats(first_screen())
    assert median <= 16, f"median sentence {median} words"
    assert longest <= 150, f"a paragraph of {longest} words"


def test_prose_stats_measure_sentences_and_paragraphs() -> None:
    text = "# Title\n\nOne two three. Four five six seven.\n\n```bash\nmake run\n```\n\n- a b c\n- d e\n\n| x | y |\n"
    assert prose_paragraphs(text) == ["One two three. Four five six seven.", "a b c", "d e"]
    assert prose_stats(text) == (3, 7)


def test_user_docs_speak_of_the_project_not_its_history() -> None:
    """README.md and docs/*.md are references: no work sessions, project issue numbers or numbered run pairs
    (history lives in benchmarks/results/). An upstream project's issue is named with the project."""
    upstream = re.compile(r"[\w.-]+/[\w.-]+ issue|Math-Verify issue")
    wrong = []
    for doc in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            line = upstream.sub("", line)
            for found in re.findall(r"\b(?:[Ss]ession|[Ii]ssue|[Pp]air) #?\d+\b(?![,.]\d| s\b)", line):
                wrong.append(f"{doc.relative_to(REPO)}:{lineno}: {found}")
    assert wrong == []
