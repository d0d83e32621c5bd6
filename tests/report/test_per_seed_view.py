"""The report's per-seed view of the primary endpoint: every seed's paired difference (table and strip plot) and,
for a staged or piloted design, the estimate of each stage; the numbers are the sequential tool's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.report_synthetic import NAMES, synthetic_problems

from acerl.passk import pass_at_k_array
from acerl.report.aggregate import MissingData
from acerl.report.per_seed import per_seed_table, stage_table, strip_figure
from acerl.report.render import render_all
from acerl.report.sequential import per_seed_frame, stage_frame
from acerl.report.spec import ReportSpec
from acerl.report.table_format import to_markdown

N, P, SEEDS, KS = 8, 20, tuple(range(10)), (1, 4, 8)
COMPARISONS = {"ace_grpo": "grpo"}


@pytest.fixture(scope="module")
def problems() -> pd.DataFrame:
    return synthetic_problems(SEEDS, {"grpo": 0.0, "ace_grpo": 0.3}, n=N, problems=P, rng_seed=1)


def _runs(problems: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (bench, model, method, seed), grp in problems.groupby(["benchmark", "model", "method", "seed"]):
        for k in KS:
            value = float(np.mean(pass_at_k_array(N, grp["c"].to_numpy(), k)))
            rows.append((bench, model, method, seed, k, value))
    df = pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "k", "pass_at_k"])
    df["seed"] = df["seed"].astype("Int64")
    return df


def _spec(**kw) -> ReportSpec:
    return ReportSpec(
        names=NAMES, models=("m_large",), benchmarks=("bench_a",), main_methods=("grpo", "ace_grpo"),
        comparisons=COMPARISONS, ks=KS, primary=("bench_a", 8), **kw,
    )  # fmt: skip


def test_the_table_holds_every_seed_s_difference(problems):
    seeds = per_seed_frame(problems, COMPARISONS, "bench_a", 8, stage1=4, pilot_seeds=(0, 1))
    table = per_seed_table(seeds, names=NAMES, benchmark="bench_a", k=8, staged=True)
    assert [r.label for r in table.rows] == [
        "0 (stage 1) pilot", "1 (stage 1) pilot", "2 (stage 1)", "3 (stage 1)",
        *(f"{s} (stage 2)" for s in range(4, 10)),
    ]  # fmt: skip
    for row, d in zip(table.rows, seeds["d"], strict=True):
        method, baseline, diff = (c.value for c in row.cells)
        assert diff == pytest.approx(100 * d) and diff == pytest.approx(method - baseline)
    assert "Pilot: a seed whose results were seen" in to_markdown(table)
    unstaged = per_seed_table(seeds.assign(pilot=False), names=NAMES, benchmark="bench_a", k=8, staged=False)
    assert unstaged.rows[0].label == "0"
    with pytest.raises(MissingData):
        per_seed_table(seeds.head(1), names=NAMES, benchmark="bench_a", k=8, staged=False)


def test_the_stage_table_is_the_sequential_tools_numbers(problems):
    seeds = per_seed_frame(problems, COMPARISONS, "bench_a", 8, stage1=4, pilot_seeds=(0, 1))
    frame = stage_frame(seeds)
    table = stage_table(frame, names=NAMES, benchmark="bench_a", k=8)
    labels = [r.label.rsplit(", ", 1)[1] for r in table.rows]
    assert labels == ["all", "stage 1", "stage 2", "without pilot", "stage 2 - stage 1"]
    for row, r in zip(table.rows, frame.itertuples(index=False), strict=True):
        assert row.cells[0].raw == str(r.n_seeds)
        assert row.cells[1].value == pytest.approx(100 * r.delta)
        assert row.cells[3].pvalue == pytest.approx(r.p_t)
    assert frame.loc[frame["seeds"] == "all", "delta"].item() == pytest.approx(seeds["d"].mean())


def test_render_writes_the_view_for_the_primary_endpoint(problems, tmp_path):
    written = render_all(
        tmp_path, spec=_spec(stage1_seeds=4, pilot_seeds=(0,)), runs=_runs(problems), problems=problems,
        formats=("png",),
    )  # fmt: skip
    names = {p.name for p in written}
    assert {"per_seed_bench_a.md", "stages_bench_a.md", "per_seed_bench_a.png"} <= names
    report = (tmp_path / "report.md").read_text()
    assert "Every seed's Pass@8" in report and "figures/per_seed_bench_a.png" in report
    # one stage and no pilot: the per-seed table and plot, no stage table
    plain = render_all(
        tmp_path / "plain", spec=_spec(), runs=_runs(problems), problems=problems, formats=("png",)
    )
    plain_names = {p.name for p in plain}
    assert "per_seed_bench_a.md" in plain_names and "stages_bench_a.md" not in plain_names
    # no primary endpoint: no view
    nothing = render_all(
        tmp_path / "none", spec=_spec().__class__(names=NAMES, comparisons=COMPARISONS, ks=KS),
        runs=_runs(problems), problems=problems, formats=("png",),
    )  # fmt: skip
    assert not {p.name for p in nothing} & {"per_seed_bench_a.md", "per_seed_bench_a.png"}


def test_the_strip_plot_draws_every_seed(problems):
    seeds = per_seed_frame(problems, COMPARISONS, "bench_a", 8, stage1=4, pilot_seeds=(0,))
    fig = strip_figure(seeds, k=8, benchmark="bench_a", names=NAMES)
    ax = fig.axes[0]
    drawn = sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
    assert drawn >= len(seeds)  # every seed a point (the mean bar and zero line are lines)
    assert ax.get_xticklabels()[0].get_text() == "ACE-GRPO - GRPO"
