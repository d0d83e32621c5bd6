"""The power table from per-problem counts: the frame, the table in both formats, the render wiring, the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.report_synthetic import NAMES

from acerl.evaluate.power import mde_paired
from acerl.pipeline.records import passk_record, write_passk_record
from acerl.report.aggregate import MissingData
from acerl.report.power import main, power_frame, run_matrix
from acerl.report.stat_tables import power_table
from acerl.report.table_format import to_latex, to_markdown

N, P, SEEDS = 8, 30, (0, 1, 2, 3)
COMPARISONS = {"ace_grpo": "grpo"}


@pytest.fixture(scope="module")
def problems() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    theta = rng.normal(-1.0, 1.2, size=P)
    rows = []
    for method, shift in (("grpo", 0.0), ("ace_grpo", 0.4), ("base", 0.0)):
        for seed in [None] if method == "base" else SEEDS:
            p = 1 / (1 + np.exp(-(theta + shift + rng.normal(0, 0.2) + rng.normal(0, 0.3, size=P))))
            c = rng.binomial(N, p)
            rows += [("bench_a", "m_large", method, seed, f"q{i}", N, int(ci)) for i, ci in enumerate(c)]
    df = pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "id", "n", "c"])
    df["seed"] = df["seed"].astype("Int64")
    return df


def test_power_frame_matches_the_per_seed_paired_test(problems):
    pw = power_frame(problems, COMPARISONS, (1, 8))
    assert list(pw["k"]) == [1, 8] and set(pw["n_seeds"]) == {4} and set(pw["n_problems"]) == {P}
    a, b = (run_matrix(problems, "bench_a", "m_large", m) for m in ("ace_grpo", "grpo"))
    for r in pw.itertuples():
        d = (a.passk(r.k) - b.passk(r.k)).mean(axis=1)
        assert r.delta == pytest.approx(d.mean())
        assert r.sd_diff == pytest.approx(d.std(ddof=1))
        assert r.mde == pytest.approx(mde_paired(d.std(ddof=1), 4))
        assert r.ci_low < r.delta < r.ci_high and r.sp_low < r.delta < r.sp_high
        assert r.var_sampling > 0
    assert pw.loc[pw["k"] == 1, "delta"].item() > 0  # ACE's shift is positive here


def test_power_table_renders(problems):
    pw = power_frame(problems, COMPARISONS, (1, 2, 8))
    table = power_table(pw, "bench_a", names=NAMES, models=["m_large"], comparisons=COMPARISONS)
    assert table.header == ("Comparison", "Statistic", "@1", "@2", "@8")
    assert len(table.rows) == 5 and table.rows[0].label == "Large-7B: ACE-GRPO vs GRPO"
    md, tex = to_markdown(table), to_latex(table)
    r8 = pw[pw["k"] == 8].iloc[0]
    assert f"{100 * r8.mde:.1f}" in next(line for line in md.splitlines() if "| MDE" in line)
    assert "4 seeds, 30 problems, n = 8" in md and "MDE" in md and "seeds and problems" in md
    assert r"\tpm{" in tex and r"$\alpha$" in tex and r"\begin{tabular}{llccc}" in tex
    with pytest.raises(MissingData):
        power_table(pw, "other", names=NAMES, models=["m_large"], comparisons=COMPARISONS)


def test_run_matrix_rejects_mismatched_runs(problems):
    bad = problems.copy()
    bad.loc[(bad["method"] == "grpo") & (bad["seed"] == 1) & (bad["id"] == "q0"), "id"] = "q_other"
    with pytest.raises(ValueError, match="different problems"):
        run_matrix(bad, "bench_a", "m_large", "grpo")
    bad = problems.copy()
    bad.loc[(bad["method"] == "grpo") & (bad["seed"] == 1), "n"] = 16
    with pytest.raises(ValueError, match="samples per problem differ"):
        run_matrix(bad, "bench_a", "m_large", "grpo")


def test_cli_prints_decomposition_comparisons_and_designs(problems, tmp_path, capsys):
    paths = []
    for (method, seed), grp in problems.groupby(["method", "seed"], dropna=False):
        seed = None if pd.isna(seed) else int(seed)
        rec = passk_record(
            "bench_a", "m_large", method, seed, list(grp["id"]), N, grp["c"].to_numpy(), [1, 2, 8]
        )
        paths.append(write_passk_record(rec, tmp_path / f"{method}_{seed}.json"))
    assert main([str(p) for p in paths] + ["--comparisons", "ace_grpo:grpo", "--n", "8", "32"]) == 0
    out = capsys.readouterr().out
    assert "## Variance decomposition" in out and "## Designs at Pass@8" in out
    designs = [
        line for line in out.splitlines() if line.startswith("| bench_a | m_large | ace_grpo | grpo | 8 |")
    ]
    assert len(designs) == 3 * 2 + 1  # 3 seed counts x 2 n, plus the comparisons row at k = 8
