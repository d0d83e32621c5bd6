"""The power study from committed files: the counts CSV round trip, the final table regenerated from it alone,
every seed's difference, the stages, the pilot seeds, the warning on seeds seen before the design."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from acerl.evaluate.sequential import SequentialDesign, final_calibration
from acerl.evaluate.stats import mean_ci, sign_flip_test
from acerl.passk import pass_at_k_array
from acerl.pipeline.records import passk_record, write_passk_record
from acerl.report.frames import load_passk_problems
from acerl.report.power import read_counts_csv, write_counts_csv
from acerl.report.sequential import look_frame, main, per_seed_frame, seen_warnings, stage_frame

N, P, SEEDS = 8, 30, tuple(range(10))
COMPARISONS = {"ace_grpo": "grpo", "ace_dapo": "dapo"}


FIXTURE = Path(__file__).parent / "fixtures" / "power_counts.csv"
"""The counts file :func:`write_counts_csv` writes for :func:`write_metrics`'s study (committed: the format)."""


@pytest.fixture(scope="module")
def metrics(tmp_path_factory) -> list:
    return write_metrics(tmp_path_factory.mktemp("study"))


def write_metrics(root: Path) -> list:
    """Metrics files of a small study: base, and four methods on seeds 0-9 (the layout of a study's folder)."""
    rng = np.random.default_rng(4)
    theta = rng.normal(-0.8, 1.2, size=P)
    paths = []
    for method, shift in (("base", 0.0), ("grpo", 0.0), ("ace_grpo", 0.1), ("dapo", 0.2), ("ace_dapo", 0.2)):
        for seed in [None] if method == "base" else SEEDS:
            p = 1 / (1 + np.exp(-(theta + shift + rng.normal(0, 0.2) + rng.normal(0, 0.3, size=P))))
            rec = passk_record("synth_easy", "tiny", method, seed, [f"q{i:03d}" for i in range(P)], N,
                               rng.binomial(N, p), [1, 2, 4, 8])  # fmt: skip
            name = "base.json" if seed is None else f"seed{seed}.json"
            paths.append(write_passk_record(rec, root / "metrics" / "synth_easy" / "tiny" / method / name))
    return paths


def _direct_d(paths, method: str, baseline: str, k: int) -> dict[int, float]:
    """Per-seed Pass@k difference computed straight from the metrics files' counts."""
    score = {}
    for p in paths:
        rec = json.loads(p.read_text())
        if rec["seed"] is not None:
            c = np.array([row["c"] for row in sorted(rec["problems"], key=lambda r: r["id"])])
            score[rec["method"], rec["seed"]] = float(pass_at_k_array(N, c, k).mean())
    return {s: score[method, s] - score[baseline, s] for s in SEEDS}


def test_counts_csv_round_trips_and_is_small(metrics, tmp_path):
    problems = load_passk_problems(metrics)
    counts, passk = write_counts_csv(problems, tmp_path, [1, 2, 4, 8])
    back = read_counts_csv(counts)
    key = ["benchmark", "model", "method", "seed", "id"]
    pd.testing.assert_frame_equal(
        back.sort_values(key, ignore_index=True),
        problems.sort_values(key, ignore_index=True),
        check_dtype=False,
    )
    table = pd.read_csv(passk)
    assert list(table.columns) == ["run", "method", "seed", "benchmark", "k", "pass@k"]
    row = table[(table["run"] == "tiny/grpo/seed3") & (table["k"] == 8)].iloc[0]
    rec = json.loads(metrics[1 + 3].read_text())
    assert rec["method"] == "grpo" and rec["seed"] == 3
    c = np.array([r["c"] for r in rec["problems"]])
    assert row["pass@k"] == pytest.approx(100 * pass_at_k_array(N, c, 8).mean(), abs=1e-6)
    assert len(table) == (1 + 4 * len(SEEDS)) * 4 and counts.stat().st_size < 10_000


def test_the_final_table_from_the_committed_file_alone(metrics, tmp_path, capsys):
    assert main([*map(str, metrics), "--benchmark", "synth_easy", "--k", "8", "--export", str(tmp_path)]) == 0
    capsys.readouterr()
    args = ["--benchmark", "synth_easy", "--k", "8", "--final", "--stage1", "4", "--pilot-seeds", "0", "1"]
    assert main(["--counts", str(tmp_path / "counts.csv"), *args]) == 0
    from_csv = capsys.readouterr().out
    assert main([*map(str, metrics), *args]) == 0
    assert capsys.readouterr().out == from_csv
    design = SequentialDesign(stage1=4)
    look = look_frame(read_counts_csv(tmp_path / "counts.csv"), COMPARISONS, "synth_easy", 8, design, final=True,
                      margin=0.04)  # fmt: skip
    for r in look.itertuples():
        d = np.array(list(_direct_d(metrics, r.method, r.baseline, 8).values()))
        assert r.delta == pytest.approx(d.mean(), abs=1e-12)
        assert f"{100 * r.delta:.3f}" in from_csv
        ci = mean_ci(d, level=r.level)
        assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high))
        cal = final_calibration(design, r.sd_floor)
        assert r.level == pytest.approx(1 - cal.level(0.049)) and r.level > 0.951
        assert r.p_final == pytest.approx(float(cal.pvalue(r.p_paired))) and r.p_final >= r.p_paired
        assert r.sim_low < r.ci_low and r.sim_high > r.ci_high  # simultaneous over the two comparisons
        assert r.p_signflip == pytest.approx(sign_flip_test(d).pvalue) and 0 <= r.p_tost <= 1
        assert r.dz == pytest.approx(d.mean() / d.std(ddof=1))
    assert "## Every seed's paired difference" in from_csv and "without pilot" in from_csv


def test_interim_interval_is_at_the_interims_level(metrics):
    look = look_frame(load_passk_problems(metrics), COMPARISONS, "synth_easy", 8, SequentialDesign())
    for r in look.itertuples():
        d = np.array(list(_direct_d(metrics, r.method, r.baseline, 8).values()))
        ci = mean_ci(d, level=0.999)
        assert r.level == pytest.approx(0.999) and (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high))


def test_stages_pilot_seeds_and_every_seed(metrics, tmp_path):
    per_seed = per_seed_frame(load_passk_problems(metrics), {"ace_grpo": "grpo"}, "synth_easy", 8, stage1=4,
                              pilot_seeds=[0, 1, 2])  # fmt: skip
    d = _direct_d(metrics, "ace_grpo", "grpo", 8)
    assert list(per_seed["seed"]) == list(SEEDS) and per_seed["d"].to_numpy() == pytest.approx(
        list(d.values())
    )
    assert list(per_seed["stage"]) == [1] * 4 + [2] * 6 and per_seed["pilot"].sum() == 3
    stages = stage_frame(per_seed).set_index("seeds")
    subsets = {"all": SEEDS, "stage 1": SEEDS[:4], "stage 2": SEEDS[4:], "without pilot": SEEDS[3:]}
    for name, seeds in subsets.items():
        x = np.array([d[s] for s in seeds])
        assert stages.loc[name, "n_seeds"] == len(seeds)
        assert stages.loc[name, "delta"] == pytest.approx(x.mean())
        assert stages.loc[name, "p_signflip"] == pytest.approx(sign_flip_test(x).pvalue)
    s1, s2 = np.array([d[s] for s in SEEDS[:4]]), np.array([d[s] for s in SEEDS[4:]])
    assert stages.loc["stage 2 - stage 1", "delta"] == pytest.approx(s2.mean() - s1.mean())
    assert math.isnan(stages.loc["stage 2 - stage 1", "p_signflip"])
    from acerl.report.sequential import strip_plot

    assert strip_plot(per_seed, tmp_path / "strip.png", k=8, benchmark="synth_easy").stat().st_size > 1000


def test_warns_when_the_designs_seeds_were_seen_before(metrics, tmp_path, capsys):
    per_seed = per_seed_frame(load_passk_problems(metrics), {"ace_grpo": "grpo"}, "synth_easy", 8, stage1=4)
    seen = tmp_path / "default-study"
    for seed in (0, 1, 2):
        (seen / "metrics" / "synth_easy" / "tiny" / "grpo").mkdir(parents=True, exist_ok=True)
        (seen / "metrics" / "synth_easy" / "tiny" / "grpo" / f"seed{seed}.json").write_text("{}")
    (warning,) = seen_warnings([seen], per_seed, "synth_easy", [])
    assert "seeds [0, 1, 2]" in warning and "report.pilot_seeds" in warning
    assert seen_warnings([seen], per_seed, "synth_easy", [0, 1, 2]) == []
    assert main([*map(str, metrics), "--benchmark", "synth_easy", "--k", "8", "--seen", str(seen)]) == 0
    assert "warning: seeds [0, 1, 2]" in capsys.readouterr().err


def test_the_committed_fixture_is_what_the_exporter_writes_and_gives_the_direct_numbers(metrics, tmp_path):
    """The committed counts file: the exporter's format today, and the final table from it alone equals the
    per-seed differences computed straight from the metrics files."""
    counts, _ = write_counts_csv(load_passk_problems(metrics), tmp_path, [1, 2, 4, 8])
    assert counts.read_text() == FIXTURE.read_text()
    look = look_frame(
        read_counts_csv(FIXTURE), COMPARISONS, "synth_easy", 8, SequentialDesign(stage1=4), final=True
    )
    for r in look.itertuples():
        d = np.array(list(_direct_d(metrics, r.method, r.baseline, 8).values()))
        assert r.n_seeds == len(SEEDS) and r.delta == pytest.approx(d.mean(), abs=1e-12)
        assert r.sd_diff == pytest.approx(d.std(ddof=1)) and r.p_paired == pytest.approx(
            sps.ttest_1samp(d, 0).pvalue
        )


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    args = ["--benchmark", "synth_easy", "--k", "8"]
    assert main(["--counts", str(tmp_path / "absent.csv"), *args]) == 2
    assert "absent.csv" in capsys.readouterr().err
    overlay = Path(__file__).resolve().parents[2] / "config" / "power.yaml"
    assert main(["--counts", str(FIXTURE), *args, "--config", str(overlay)]) == 2
    err = capsys.readouterr().err
    assert (
        "--config config/config.yaml --config config/power.yaml" in err and len(err.strip().splitlines()) == 1
    )
    assert main(args) == 2 and "give metrics files or --counts FILE" in capsys.readouterr().err


REPO = Path(__file__).resolve().parents[2]
POWER = REPO / "docs" / "results" / "power"


def test_the_committed_power_study_regenerates_its_published_tables(capsys):
    """docs/results.md's power-study tables come from the committed per-seed files by the commands it prints:
    the final look (every seed, the stages, without the pilot seeds) from counts.csv, the training diagnostics
    from training.csv; their output is the committed final.md and training.md, byte for byte."""
    from acerl.report.training import main as training_main

    config = [
        "--config",
        str(REPO / "config" / "config.yaml"),
        "--config",
        str(REPO / "config" / "power.yaml"),
    ]
    code = main(["--counts", str(POWER / "counts.csv"), "--benchmark", "synth_easy", "--k", "32", "--final",
                 *config])  # fmt: skip
    assert code == 0
    assert capsys.readouterr().out == (POWER / "final.md").read_text()
    assert training_main(["--frame", str(POWER / "training.csv"), "--last", "5"]) == 0
    assert capsys.readouterr().out == (POWER / "training.md").read_text()
    counts = read_counts_csv(POWER / "counts.csv")
    trained = counts[counts["method"] != "base"]
    assert sorted(set(trained["seed"].astype(int))) == list(range(23)) and counts["n"].min() == 32
    assert set(trained["method"]) == {"grpo", "dapo", "ace_grpo", "ace_dapo"}
    results = (REPO / "docs" / "results.md").read_text()
    for published in ("| -0.8 | -3.4 to +1.8 |", "| -1.6 | -4.2 to +1.0 |", "0.008 |", "0.036 |"):
        assert published in results, published
