"""``acerl report`` ends with the primary endpoint of each comparison, its paired interval, and the report's place."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats
from support.report_synthetic import REPO_ROOT

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.report.study import results_summary


def _cfg():
    files = [REPO_ROOT / "config" / "config.yaml", REPO_ROOT / "config" / "test.yaml"]
    if not all(p.is_file() for p in files):
        pytest.skip("config/config.yaml or config/test.yaml not present")
    return load_config(files, overrides=["study.main.seeds=[0,1,2]"])


def test_summary_gives_the_primary_endpoint_with_its_paired_interval(tmp_path):
    cfg = _cfg()
    bench, k = cfg.primary_endpoint
    grpo, ace = [0.50, 0.60, 0.55], [0.53, 0.61, 0.60]
    rows = [(bench, "tiny", "grpo", s, k, v) for s, v in enumerate(grpo)]
    rows += [(bench, "tiny", "ace_grpo", s, k, v) for s, v in enumerate(ace)]
    rows += [(bench, "tiny", "ace_grpo", s, 1, 0.0) for s in range(3)]  # another k: not the primary endpoint
    runs = pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "k", "pass_at_k"])
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
