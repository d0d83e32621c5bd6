"""A partial report says what it lacks: captions count each row's runs, a run missing on one benchmark stays a
row of "-", and ``report.md`` opens with the list of missing result files."""

from __future__ import annotations

import pandas as pd
from support.report_synthetic import NAMES, REPO_ROOT

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.pipeline.records import passk_record, write_passk_record
from acerl.report.study import report_study
from acerl.report.table_format import to_markdown
from acerl.report.tables import passk_table


def _agg(rows: list[tuple[str, str, int]]) -> pd.DataFrame:
    """Aggregated Pass@1 / Pass@2 of ``(benchmark, method, n_seeds)`` on model m_small."""
    return pd.DataFrame(
        [
            {"benchmark": b, "model": "m_small", "method": m, "k": k, "mean": 0.5, "ci95": 0.1 if n > 1 else float("nan"),
             "std": 0.1, "n_seeds": n}
            for b, m, n in rows
            for k in (1, 2)
        ]
    )  # fmt: skip


def test_table_1_counts_each_row_s_runs_and_keeps_a_run_missing_on_one_benchmark():
    """Rows of 3 and 1 runs: the caption said "over 3 independent training runs"; a method without results on
    bench_b vanished from its table."""
    agg = _agg([("bench_a", "grpo", 3), ("bench_a", "ace_grpo", 1), ("bench_b", "grpo", 3)])
    kw = {"names": NAMES, "models": ["m_small"], "methods": ["grpo", "ace_grpo"]}
    a = passk_table(agg, "bench_a", **kw)
    assert "over 1-3 independent training runs" in a.caption
    assert "Training runs averaged per row: 3 (Small-1B + GRPO); 1 (Small-1B + ACE-GRPO)." in a.caption
    b = passk_table(agg, "bench_b", **kw)
    assert [row.label for group in b.groups for row in group] == ["Small-1B + GRPO", "Small-1B + ACE-GRPO"]
    assert "over 3 independent training runs" in b.caption
    assert "Not evaluated on Bench-B (shown as -): Small-1B + ACE-GRPO." in b.caption
    md = to_markdown(b)
    (line,) = [s for s in md.splitlines() if s.startswith("| Small-1B + ACE-GRPO")]
    assert "50.0" not in line and "-" in line
    full = passk_table(_agg([("bench_a", "grpo", 3), ("bench_a", "ace_grpo", 3)]), "bench_a", **kw)
    assert "over 3 independent training runs." in full.caption and "per row" not in full.caption


def test_a_partial_report_md_lists_what_is_missing(tmp_path):
    cfg = load_config(
        [REPO_ROOT / "config" / "config.yaml", REPO_ROOT / "config" / "test.yaml"],
        overrides=["report.formats=[png]"],
    )
    run, bench = cfg.base_runs()[0], cfg.evaluation.benchmarks[0]
    rec = passk_record(
        bench, run.model, run.method, None, ["q0", "q1"], cfg.evaluation.n, [1, 2], cfg.evaluation.ks
    )
    write_passk_record(rec, paths.passk_file(tmp_path, bench, run))
    report_study(cfg, tmp_path, partial=True)
    text = paths.report_file(tmp_path).read_text()
    total = len(cfg.evaluations()) + len(cfg.diagnostic_runs())
    title, blank, notice = text.splitlines()[:3]
    assert title.startswith("# ") and blank == ""
    assert notice == (
        f"> **Partial report** (`acerl report --partial`): {total - 1} of {total} result files are missing, so "
        "their runs are left out of every table and figure below:"
    )
    missing = paths.passk_file(".", bench, cfg.runs()[0]).as_posix()
    assert f"> - `{missing}`" in text and sum(s.startswith("> - `") for s in text.splitlines()) == total - 1
