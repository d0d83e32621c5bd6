"""The power table and ``python -m acerl.report.power`` with too few seeds, and the equivalence columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as sps
from support.report_synthetic import NAMES, synthetic_problems

from acerl.pipeline.records import passk_record, write_passk_record
from acerl.report.power import main, power_frame, run_matrix
from acerl.report.stat_tables import power_table
from acerl.report.table_format import to_markdown

N, P = 8, 30
REPO = Path(__file__).resolve().parents[2]
COMPARISONS = {"ace_grpo": "grpo"}


def _problems(seeds) -> pd.DataFrame:
    return synthetic_problems(seeds, {"grpo": 0.0, "ace_grpo": 0.4}, n=N, problems=P)


def test_one_seed_prints_no_interval_that_reads_as_a_finding():
    pw = power_frame(_problems([0]), COMPARISONS, (1, 8))
    assert pw["sp_low"].isna().all() and pw["sp_high"].isna().all()
    md = to_markdown(power_table(pw, "bench_a", names=NAMES, models=["m_large"], comparisons=COMPARISONS,
                                 primary=("bench_a", 8)))  # fmt: skip
    row = next(line for line in md.splitlines() if "seeds and problems random) |" in line)
    assert row.count("n/a (needs >= 2 seeds)") == 2 and "[" not in row
    assert "(1 seed," in md and "no test" in md and "0 comparison(s)" not in md


def test_the_cli_says_why_instead_of_printing_nan(tmp_path, capsys):
    problems = _problems([0])
    paths = []
    for (method, seed), grp in problems.groupby(["method", "seed"]):
        rec = passk_record(
            "bench_a", "m_large", method, int(seed), list(grp["id"]), N, grp["c"].to_numpy(), [1, 8]
        )
        paths.append(write_passk_record(rec, tmp_path / f"{method}_{seed}.json"))
    assert main([str(p) for p in paths] + ["--comparisons", "ace_grpo:grpo"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "needs >= 2 seeds, the study has 1" in out
    assert "Not predicted" in out and "| bench_a | m_large | ace_grpo | grpo | 8 | 3 |" not in out


def test_standardized_effect_and_tost(tmp_path):
    problems = _problems(range(5))
    pw = power_frame(problems, COMPARISONS, (1, 8), margin=0.05)
    a, b = (run_matrix(problems, "bench_a", "m_large", m) for m in ("ace_grpo", "grpo"))
    for r in pw.itertuples():
        d = (a.passk(r.k) - b.passk(r.k)).mean(axis=1)
        assert r.dz == pytest.approx(d.mean() / d.std(ddof=1))
        lower = sps.ttest_1samp(d, -0.05, alternative="greater").pvalue
        upper = sps.ttest_1samp(d, 0.05, alternative="less").pvalue
        assert r.p_tost == pytest.approx(max(lower, upper))
    md = to_markdown(power_table(pw, "bench_a", names=NAMES, models=["m_large"], comparisons=COMPARISONS,
                                 margin=0.05))  # fmt: skip
    assert "TOST p (equivalence within ±5)" in md and "Standardized effect" in md
    assert "post hoc" not in md  # declared by default


def test_a_tost_added_after_the_data_is_labelled_post_hoc(capsys):
    """A study whose TOST was not declared before its data (``report.equivalence_declared: false``, the power
    study) shows its p as post hoc, in the power table and in the sequential tool's final look."""
    from acerl.config import load_config
    from acerl.report.sequential import main as sequential_main
    from acerl.report.study import report_spec

    pw = power_frame(_problems(range(5)), COMPARISONS, (1, 8), margin=0.05)
    md = to_markdown(power_table(pw, "bench_a", names=NAMES, models=["m_large"], comparisons=COMPARISONS,
                                 margin=0.05, tost_declared=False))  # fmt: skip
    assert "TOST p (equivalence within ±5, post hoc)" in md and "post hoc: not declared before" in md
    config = [str(REPO / "config" / "config.yaml"), str(REPO / "config" / "power.yaml")]
    assert report_spec(load_config(config)).equivalence_declared is False
    args = ["--counts", str(REPO / "docs" / "results" / "power" / "counts.csv"), "--benchmark", "synth_easy",
            "--k", "32", "--final", "--config", config[0], "--config", config[1]]  # fmt: skip
    assert sequential_main(args) == 0
    head = capsys.readouterr().out.split("\n## Every seed", 1)[0]
    assert "p_tost: equivalence within +-4 points (report.equivalence_margin), post hoc" in head
    assert sequential_main([*args[:-4], "--config", config[0]]) == 0
    assert "post hoc" not in capsys.readouterr().out.split("\n## Every seed", 1)[0]
