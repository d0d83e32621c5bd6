"""The report's Markdown as HTML pages that a browser shows inline (Snakemake's HTML report offers Markdown only as
a download).

:func:`markdown_html` converts the subset of Markdown the report writes (headings, bold and ``<u>`` marks, code
spans, pipe tables, ``- `` lists, images, paragraphs) without a Markdown dependency; :func:`html_page` wraps it in
a standalone page. Images are embedded as ``data:`` URIs, so a page read from inside Snakemake's report (an
iframe over a ``data:`` URI) shows its figures.
"""

from __future__ import annotations

import base64
import html
import mimetypes
import re
from pathlib import Path

__all__ = ["markdown_html", "html_page"]

_STYLE = """
body { font-family: "DejaVu Sans", Arial, Helvetica, sans-serif; font-size: 14px; margin: 1.2em 2em; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 0.4em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.7em; }
thead th { border-bottom: 2px solid #555; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.l, th.l { text-align: left; }
img { max-width: 100%; }
code { background: #f4f4f4; padding: 0 0.2em; }
p.caption { margin-bottom: 0.2em; }
div.headline { border-left: 4px solid #08519c; background: #f3f7fb; padding: 0.3em 1em; margin: 0.8em 0 1.2em; }
"""

_IMAGE = re.compile(r"^!\[(?P<alt>[^\]]*)\]\((?P<src>[^)]+)\)\s*$")
_ROW_SPLIT = re.compile(r"(?<!\\)\|")


def _inline(text: str) -> str:
    """Escape ``text`` for HTML, then turn ``**bold**``, ``<u>...</u>`` and ```code``` into tags."""
    out = html.escape(text, quote=False)
    out = out.replace("&lt;u&gt;", "<u>").replace("&lt;/u&gt;", "</u>")
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return out.replace("\\|", "|")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _ROW_SPLIT.split(line.strip().strip("|"))]


def _table(lines: list[str]) -> str:
    header, rule, *body = lines
    align = ["l" if c.startswith(":") and not c.endswith(":") else "r" for c in _cells(rule)]

    def row(cells: list[str], tag: str) -> str:
        return "<tr>" + "".join(
            f'<{tag} class="{align[i] if i < len(align) else "l"}">{_inline(c)}</{tag}>' for i, c in enumerate(cells)
        ) + "</tr>"  # fmt: skip

    rows = "\n".join(row(_cells(line), "td") for line in body)
    return f"<table>\n<thead>{row(_cells(header), 'th')}</thead>\n<tbody>\n{rows}\n</tbody>\n</table>"


def _image(alt: str, src: str, base: Path | None) -> str:
    path = (base / src) if base is not None else Path(src)
    if path.is_file():
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        src = f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<p><img alt="{html.escape(alt)}" src="{html.escape(src)}"></p>'


def markdown_html(text: str, base: Path | str | None = None) -> str:
    """The report's Markdown ``text`` as an HTML fragment; images relative to ``base`` are embedded."""
    base = Path(base) if base is not None else None
    blocks: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            blocks.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
            i += 1
        elif line.lstrip().startswith("|"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            blocks.append(_table(lines[i:j]))
            i = j
        elif (m := _IMAGE.match(line.strip())) is not None:
            blocks.append(_image(m["alt"], m["src"], base))
            i += 1
        elif line.startswith("- "):
            j = i
            while j < len(lines) and lines[j].startswith("- "):
                j += 1
            blocks.append("<ul>" + "".join(f"<li>{_inline(x[2:])}</li>" for x in lines[i:j]) + "</ul>")
            i = j
        else:
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].lstrip().startswith(("|", "#", "![")):
                j += 1
            blocks.append(f"<p>{_inline(' '.join(x.strip() for x in lines[i:j]))}</p>")
            i = j
    return "\n".join(blocks) + "\n"


def html_page(title: str, markdown: str, base: Path | str | None = None, headline: str = "") -> str:
    """A standalone HTML page (UTF-8, its own style sheet) of the report's ``markdown``; ``headline`` (Markdown)
    opens it, in a box under the page's first heading (at the top when it has none)."""
    body = markdown_html(markdown, base)
    if headline:
        box = f'<div class="headline">\n{markdown_html(headline)}</div>\n'
        head, sep, rest = body.partition("</h1>\n")
        body = head + sep + box + rest if sep else box + body
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"{body}</body>\n</html>\n"
    )
