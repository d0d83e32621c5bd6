"""The figures show what a researcher reads from them: training curves from both backends' metrics files, ACE
minus its baseline with a paired interval, bands clipped and drawn only where informative, axes that show the
change, and baselines visible above the ACE lines they coincide with."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from scipy import stats
from support.report_synthetic import NAMES

from acerl.errors import BadInputError
from acerl.pipeline.records import diagnostics_record
from acerl.report import figures
from acerl.report.frames import diagnostics_frames
from acerl.report.training import CURVE_COLUMNS, curves_frame

METHODS = ("grpo", "ace_grpo")


def _write_run(root: Path, method: str, seed: int, records: list[dict[str, object]]) -> Path:
    path = root / "runs" / "m_small" / method / f"seed{seed}" / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _bands(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def _lines(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def test_curves_frame_reads_the_local_and_the_verl_metric_names(tmp_path):
    local = _write_run(tmp_path, "grpo", 0, [
        {"step": 1, "train/pass_rate": 0.25, "train/reward_mean": 0.25, "actor/entropy": 0.7,
         "train/response_length_mean": 30.0, "ace/overconfident_frac_neg": 0.5, "actor/kl_loss": None},
        {"step": 2, "train/pass_rate": 0.5, "actor/entropy": 0.6},
    ])  # fmt: skip
    verl = _write_run(tmp_path, "ace_grpo", 0, [  # verl's names, as collect_metrics merges them
        {"step": 1, "critic/score/mean": 0.75, "response_length/mean": 120.0, "actor/entropy": 0.4,
         "ace/multiplier_mean_neg": 1.6, "actor/kl_loss": 0.01},
    ])  # fmt: skip
    frame = curves_frame([local, verl])
    assert list(frame.columns) == list(CURVE_COLUMNS)
    got = {(r.method, r.step, r.curve): r.value for r in frame.itertuples()}
    assert got == {
        ("grpo", 1, "pass_rate"): 0.25,
        ("grpo", 1, "entropy"): 0.7,
        ("grpo", 1, "length"): 30.0,
        ("grpo", 1, "oef"): 0.5,
        ("grpo", 2, "pass_rate"): 0.5,
        ("grpo", 2, "entropy"): 0.6,
        ("ace_grpo", 1, "length"): 120.0,
        ("ace_grpo", 1, "entropy"): 0.4,
        ("ace_grpo", 1, "multiplier"): 1.6,
        ("ace_grpo", 1, "kl"): 0.01,
    }  # a null (no update that step) is no point; verl's reward (critic/score/mean) is no pass rate
    with pytest.raises(BadInputError, match="not a training run's metrics file"):
        curves_frame([tmp_path / "metrics.jsonl"])


def test_first_panel_is_the_pass_rate_on_one_scale_for_binary_and_signed_rewards(tmp_path):
    """GRPO's rewards are 0/1 and DAPO's +1/-1: the panel plots the fraction correct that both log, so the same
    accuracy is the same height whatever the reward scale."""
    runs = [
        _write_run(tmp_path, method, seed, [
            {"step": t, "train/pass_rate": acc, "train/reward_mean": acc if method == "grpo" else 2 * acc - 1}
            for t, acc in ((1, 0.25), (2, 0.5))
        ])
        for method in ("grpo", "dapo") for seed in (0, 1)
    ]  # fmt: skip
    fig = figures.training_dynamics_figure(curves_frame(runs), names=NAMES, methods=("grpo", "dapo"))
    (ax,) = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert ax.get_ylabel() == "training pass rate\n(fraction correct)"
    lines = _lines(ax)
    for label in ("GRPO", "DAPO"):
        np.testing.assert_allclose(lines[label].get_ydata(), [0.25, 0.5], rtol=0, atol=1e-12)


def _curves(seeds: int, steps: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        ("m_small", method, seed, step, curve, float(value))
        for method in METHODS
        for seed in range(seeds)
        for step in range(1, steps + 1)
        for curve, value in (("oef", rng.uniform(0.0, 0.05)), ("entropy", 0.245 - 0.004 * step))
    ]
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def test_training_dynamics_lines_are_the_seed_means_and_bands_stay_in_range():
    curves = _curves(seeds=3)
    fig = figures.training_dynamics_figure(curves, names=NAMES, methods=("base", *METHODS))
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert [ax.get_ylabel().split("\n")[0] for ax in panels] == [
        "token entropy (nats)",
        "overconfident-error",
    ]
    oef_ax = panels[1]
    ace = _lines(oef_ax)["ACE-GRPO"]
    expect = (
        curves[(curves["curve"] == "oef") & (curves["method"] == "ace_grpo")].groupby("step")["value"].mean()
    )
    np.testing.assert_allclose(ace.get_ydata(), expect.to_numpy(), rtol=0, atol=1e-12)
    (band, *_) = _bands(oef_ax)
    ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
    assert ys.min() >= 0.0  # the t band of values near 0 would reach below 0 unclipped
    sd = curves[(curves["curve"] == "oef") & (curves["method"] == "ace_grpo")].groupby("step")["value"].std()
    assert (expect - stats.t.ppf(0.975, 2) * sd / math.sqrt(3)).min() < 0  # ... which it does here


def test_two_seed_bands_are_not_drawn():
    fig = figures.training_dynamics_figure(_curves(seeds=2), names=NAMES, methods=METHODS)
    assert all(not _bands(ax) for ax in fig.axes)
    assert figures.MIN_BAND_SEEDS == 3


def test_baselines_are_drawn_above_the_ace_line_they_share_a_hue_with():
    fig = figures.training_dynamics_figure(_curves(seeds=3), names=NAMES, methods=METHODS)
    lines = _lines(fig.axes[0])
    assert lines["GRPO"].get_linestyle() == "--"
    assert lines["GRPO"].get_zorder() > lines["ACE-GRPO"].get_zorder()


def test_entropy_axis_shows_the_change():
    rows = [
        {"step": t, "entropy": 0.245 - 0.001 * t} for t in range(21)
    ]  # 0.245 -> 0.225, as in the paper's Fig. 4
    recs = [(diagnostics_record("m_small", m, s, [], rows), f"<{m}/{s}>") for m in METHODS for s in (0, 1, 2)]
    entropy = diagnostics_frames(recs).entropy_early
    fig = figures.entropy_figure(entropy, names=NAMES, methods=METHODS)
    low, high = fig.axes[0].get_ylim()
    assert 0.2 < low < 0.225 and 0.245 < high < 0.27  # the change fills the axis (it is not flat at 0.24)


def test_oef_panels_say_what_they_show_and_span_training():
    rows = [
        {"step": 4, "oef": 0.5, "overconf_magnitude": 0.2, "entropy": 0.3, "n_incorrect": 4, "n_total": 8}
    ]  # one checkpoint, as at CI scale
    recs = [(diagnostics_record("m_small", m, s, rows, []), f"<{m}/{s}>") for m in METHODS for s in (0, 1)]
    fig = figures.oef_figure(diagnostics_frames(recs).records, names=NAMES, methods=METHODS)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "Overconfident-error fraction · Small-1B",
        "Overconfidence magnitude · Small-1B",
    ]
    assert all(ax.get_xlim()[0] == 0 for ax in fig.axes)  # not 3.8-4.2 around the one step
    assert all(not _bands(ax) for ax in fig.axes)  # two seeds: no 0-150% band on a fraction


def _runs() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for seed in range(4):
        for k in (1, 2, 4):
            base = 0.3 + 0.1 * k / 4 + rng.normal(0, 0.02)
            rows.append(("bench_a", "m_small", "grpo", seed, k, base))
            rows.append(("bench_a", "m_small", "ace_grpo", seed, k, base + 0.02 + rng.normal(0, 0.01)))
    rows.append(("bench_a", "m_small", "ace_grpo", 9, 1, 0.9))  # an unpaired seed: left out
    return pd.DataFrame(rows, columns=["benchmark", "model", "method", "seed", "k", "pass_at_k"])


def test_paired_difference_equals_the_paired_t_interval():
    runs = _runs()
    diffs = figures.paired_difference_frame(runs, {"ace_grpo": "grpo"})
    assert list(diffs["k"]) == [1, 2, 4] and set(diffs["n_seeds"]) == {4}
    for row in diffs.itertuples():
        sub = runs[(runs["k"] == row.k) & (runs["seed"] < 9)]
        d = (
            sub[sub["method"] == "ace_grpo"].set_index("seed")["pass_at_k"]
            - sub[sub["method"] == "grpo"].set_index("seed")["pass_at_k"]
        ).to_numpy()
        half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
        assert row.delta == pytest.approx(d.mean(), abs=1e-12)
        assert (row.ci_low, row.ci_high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-9)


def test_passk_difference_figure_shows_the_difference_its_interval_and_the_seed_count():
    diffs = figures.paired_difference_frame(_runs(), {"ace_grpo": "grpo"})
    fig = figures.passk_difference_figure(diffs, names=NAMES, models=["m_small"], benchmarks=["bench_a"])
    ax = fig.axes[0]
    (line,) = _lines(ax).values()
    np.testing.assert_allclose(line.get_ydata(), diffs["delta"].to_numpy() * 100, atol=1e-12)
    assert "ACE-GRPO − GRPO (4 seeds)" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(line.get_ydata()[0] == 0.0 for line in ax.get_lines() if line.get_label().startswith("_"))
    segments = [seg for c in ax.collections for seg in c.get_segments()]  # the error bars
    tops = sorted(float(seg[:, 1].max()) for seg in segments)
    np.testing.assert_allclose(tops, np.sort(diffs["ci_high"].to_numpy() * 100), atol=1e-9)
    with pytest.raises(figures.MissingData):
        figures.passk_difference_figure(diffs, names=NAMES, models=["m_large"], benchmarks=["bench_a"])
