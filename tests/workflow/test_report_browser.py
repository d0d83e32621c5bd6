"""Snakemake's HTML report of the CI-scale study, opened the way a user opens it: in a real headless browser.

``snakemake --report report.html --configfile=config/test.yaml`` (the README's command) must build without a
"Missing metadata" warning, under the study's own name, and the headline Pass@k table must be readable in the
page: each table is an HTML item the report shows inline (an iframe over its ``data:`` URI), so the browser
renders that item and the table's numbers must be in the text it shows. Skipped where no Chromium exists; under
``CI=true`` a missing browser is installed (``scripts/install_browser.sh``) or the test fails.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.study import REPO, TEST_CONFIG_ARG, TEST_CONFIG_FILES, run_snakemake

from acerl.config import load_config
from acerl.pipeline import paths

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
INSTALL = REPO / "scripts" / "install_browser.sh"


def browser() -> str:
    """A Chromium on PATH; under ``CI=true`` one is installed if absent (root with apt-get), else the test
    fails; elsewhere the test is skipped with the reason."""
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        proc = subprocess.run([str(INSTALL)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (
            f"CI has no Chromium and {INSTALL.name} could not install it: {proc.stderr}"
        )
        return proc.stdout.strip().splitlines()[-1]
    pytest.skip(
        f"no Chromium on PATH ({', '.join(BROWSERS)}): `scripts/install_browser.sh` installs it as root"
    )


def rendered_text(chromium: str, page: Path, profile: Path) -> str:
    """The text of ``page`` after the browser ran its scripts (``--dump-dom``), whitespace collapsed."""
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--virtual-time-budget=15000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    return _Text.of(proc.stdout)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)

    @classmethod
    def of(cls, html: str) -> str:
        p = cls()
        p.feed(html)
        return re.sub(r"\s+", " ", " ".join(p.parts))


def report_items(report_html: str) -> dict[str, dict[str, object]]:
    """The ``results`` object Snakemake's report embeds: every item by path, with its caption and data URI."""
    m = re.search(r"var results = (\{.*?\});\s*</script>", report_html, flags=re.S)
    assert m, "no results object in report.html"
    return json.loads(m.group(1))


def decode(uri: str) -> bytes:
    head, _, data = uri.partition(",")
    return base64.b64decode(data) if head.endswith(";base64") else urllib.parse.unquote_to_bytes(data)


def table_numbers(markdown: str) -> list[str]:
    """Every number shown in the body of a Markdown table (marks dropped)."""
    rows = [line for line in markdown.splitlines() if line.startswith("|") and not line.startswith("|:")][1:]
    return [n for row in rows for n in re.findall(r"\d+\.\d+", re.sub(r"\*\*|</?u>", "", row))]


def test_the_headline_table_reads_in_the_browser(ci_study: Path, tmp_path: Path) -> None:
    chromium = browser()
    study = shutil.copytree(ci_study, tmp_path / "study", symlinks=True)
    proc = run_snakemake(study, "--report", "report.html", TEST_CONFIG_ARG, log="snakemake-report.log")
    assert "Missing metadata" not in proc.stdout
    report = (study / "report.html").read_text(encoding="utf-8")
    cfg = load_config([study / f for f in TEST_CONFIG_FILES])
    assert f"Config: {cfg.name}" in report and "embedded-default" not in report

    shown = rendered_text(chromium, study / "report.html", tmp_path / "profile")
    for category in ("Pass@k", "Significance", "Training dynamics", "Summary"):
        assert category in shown, (category, shown[:2000])

    bench, _ = cfg.primary_endpoint
    items = report_items(report)
    (key,) = [k for k in items if k.endswith(f"tables/passk_{bench}.html")]
    assert items[key]["mime_type"] == "text/html"
    page = tmp_path / "item.html"
    page.write_bytes(decode(str(items[key]["data_uri"])))
    text = rendered_text(chromium, page, tmp_path / "profile")
    numbers = table_numbers(paths.tables_dir(study).joinpath(f"passk_{bench}.md").read_text(encoding="utf-8"))
    assert numbers and all(n in text for n in numbers), (numbers, text)

    landing = rendered_text(chromium, paths.report_page_file(study), tmp_path / "profile")
    assert all(n in landing for n in numbers)  # results/report.html: the same table on the summary page
