"""The report's Markdown as HTML: every table cell a cell of an HTML table, marks as tags, figures embedded."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

from acerl.report import table_format
from acerl.report.html import html_page, markdown_html
from acerl.report.render import write_table


class _Cells(HTMLParser):
    """The text of every ``<td>``/``<th>`` per row, and the tags seen."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: list[str] = []
        self.images: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _table() -> table_format.Table:
    cells = (
        table_format.Cell(value=41.25, ci=1.5, mark="bold"),
        table_format.Cell(value=40.0, mark="underline"),
        table_format.Cell(raw="a|b"),
    )
    return table_format.Table(
        name="passk_x",
        caption="Pass@k (%) with $\\alpha$ = 1",
        label="tab:x",
        header=("Method", "Pass@1", "Pass@8", "note"),
        groups=(
            (
                table_format.Row("ACE-GRPO", cells),
                table_format.Row("GRPO", (table_format.Cell(value=39.0),) * 3),
            ),
        ),
        notes=("Mean over 5 seeds.",),
    )


def test_a_table_reads_the_same_in_html_as_in_markdown(tmp_path):
    table = _table()
    written = write_table(table, tmp_path)
    assert [p.name for p in written] == ["passk_x.tex", "passk_x.md", "passk_x.html"]
    page = (tmp_path / "passk_x.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    parsed = _Cells()
    parsed.feed(page)
    md_rows = [
        [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        for line in table_format.to_markdown(table).splitlines()
        if line.startswith("|") and not line.startswith("|:")
    ]
    plain = [[re.sub(r"\*\*|</?u>", "", c).replace("\\|", "|") for c in row] for row in md_rows]
    assert parsed.rows == plain
    assert parsed.rows[1] == ["ACE-GRPO", "41.2 ± 1.5", "40.0", "a|b"]
    assert "strong" in parsed.tags and "u" in parsed.tags
    assert "Mean over 5 seeds." in page and "Pass@k (%) with α = 1" in page and "**" not in page


def test_images_are_embedded_and_text_is_escaped(tmp_path):
    png = b"\x89PNG\r\n\x1a\nfake"
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "f.png").write_bytes(png)
    md = "# Results: a<b\n\n**Figure**\n\n![Figure](figures/f.png)\n\n- one `x`\n- two\n\ntext & more\nsame paragraph\n"
    frag = markdown_html(md, base=tmp_path)
    parsed = _Cells()
    parsed.feed(frag)
    assert parsed.images == ["data:image/png;base64," + base64.b64encode(png).decode()]
    assert "<h1>Results: a&lt;b</h1>" in frag
    assert "<ul><li>one <code>x</code></li><li>two</li></ul>" in frag
    assert "<p>text &amp; more same paragraph</p>" in frag
    assert html_page("t", "![broken](nowhere.png)").count("<img") == 1  # a missing file keeps its path
