"""``acerl report`` ends with the primary endpoint of each comparison, its paired interval, and the report's place;
``results/headline.txt`` holds those lines (``make run`` prints it) and the HTML report opens with them."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats
from support.make import dry_run
from support.report_synthetic import REPO_ROOT

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.report.study import add_compute_accounting, headline_markdown, results_headline, results_summary


def _cfg():
    files = [REPO_ROOT / "config" / "config.yaml", REPO_ROOT / "config" / "test.yaml"]
    if not all(p.is_file() for p in files):
        pytest.skip("config/config.yaml or config/test.yaml not present")
    return load_config(files, overrides=["study.main.seeds=[0,1,2]"])


GRPO, ACE = [0.50, 0.60, 0.55], [0.53, 0.61, 0.60]


def _runs(cfg) -> pd.DataFrame:
    bench, k = cfg.primary_endpoint
    rows = [(bench, "tiny", "grpo", s, k, v) for s, v in enumerate(GRPO)]
    rows += [(bench, "tiny", "ace_grpo", s, k, v) for s, v in enumerate(ACE)]
    rows += [(bench, "tiny", "ace_grpo", s, 1, 0.0) for s in range(3)]  # another k: not the primary endpoint
    return pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "k", "pass_at_k"])


def test_summary_gives_the_primary_endpoint_with_its_paired_interval(tmp_path):
    cfg = _cfg()
    bench, k = cfg.primary_endpoint
    grpo, ace, runs = GRPO, ACE, _runs(cfg)
    text = results_summary(cfg, runs, tmp_path)
    d = [a - b for a, b in zip(ace, grpo, strict=True)]
    mean = sum(d) / 3
    half = stats.t.ppf(0.975, 2) * pd.Series(d).std() / math.sqrt(3)
    lines = text.splitlines()
    assert lines[0] == f"Results: {cfg.name}; primary endpoint Pass@{k} on {bench}, ACE minus baseline:"
    assert lines[1] == (
        f"  Tiny-Llama: ACE-GRPO - GRPO = {100 * mean:+.1f} points "
        f"(95% CI {100 * (mean - half):+.1f} to {100 * (mean + half):+.1f}; 3 seeds paired)"
    )
    assert (
        lines[-1] == f"Report: {paths.report_page_file(tmp_path)} (Markdown: {paths.report_file(tmp_path)})"
    )
    assert len(lines) == 3  # ACE-DAPO has no runs here: no line


def test_summary_without_pairs_says_so(tmp_path):
    text = results_summary(_cfg(), None, tmp_path)
    assert "no ACE method shares a seed with its baseline at the primary endpoint" in text


def test_html_report_opens_with_the_headline_under_its_title(tmp_path):
    cfg = _cfg()
    runs = _runs(cfg)
    intro, lines = results_headline(cfg, runs)
    report = paths.report_file(tmp_path)
    report.parent.mkdir(parents=True)
    report.write_text(f"# Results: {cfg.name}\n\nThe tables.\n", encoding="utf-8")
    add_compute_accounting(cfg, tmp_path, headline=headline_markdown(cfg, runs))
    page = paths.report_page_file(tmp_path).read_text(encoding="utf-8")
    title = f"<h1>Results: {cfg.name}</h1>\n"
    assert page.index(title) + len(title) == page.index('<div class="headline">')  # first, under the title
    box = page.split('<div class="headline">')[1].split("</div>")[0]
    assert f"<strong>{intro[0].upper()}{intro[1:]}</strong>" in box
    assert lines == [results_summary(cfg, runs, tmp_path).splitlines()[1].strip()]  # the comparison's line
    assert f"<li>{lines[0]}</li>" in box
    assert page.index("</div>") < page.index("The tables.")
    assert "headline" not in report.read_text(encoding="utf-8")  # report.md is unchanged by it


def test_make_run_prints_the_headline_file_after_the_study():
    recipe = dry_run("run", REPO_ROOT)
    study = next(i for i, line in enumerate(recipe) if line.endswith("snakemake -c2 all"))
    assert recipe[study + 1 :] == [f"echo; cat {paths.headline_file('.').as_posix()}"]
