"""Training-batch diagnostics across seeds (``acerl.report.training``): each run's last steps averaged, ACE minus
its baseline paired by seed, with the t interval and Holm-adjusted p-values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from acerl.report.training import last_steps_frame, main, paired_diagnostics

OEF = "ace/overconfident_frac_neg"


def _write_run(root: Path, method: str, seed: int, oef: list[float]) -> Path:
    path = root / "runs" / "tiny" / method / f"seed{seed}" / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    lines = [json.dumps({"step": i + 1, OEF: v, "actor/entropy": 0.2}) for i, v in enumerate(oef)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_run_is_the_mean_of_its_last_steps_that_updated(tmp_path: Path):
    """Steps before the window do not count, and a step without an update (NaN) is skipped, not a zero."""
    path = _write_run(tmp_path, "grpo", 3, [9.0, 9.0, 0.2, math.nan, 0.4])
    frame = last_steps_frame([path], keys=[OEF, "train/pass_rate"], last=3)
    row = frame[frame["key"] == OEF].iloc[0]
    assert (row["model"], row["method"], row["seed"], row["steps"]) == ("tiny", "grpo", 3, 5)
    assert row["value"] == pytest.approx(0.3)
    assert math.isnan(frame[frame["key"] == "train/pass_rate"].iloc[0]["value"])  # never logged


def test_ace_minus_baseline_is_paired_by_seed(tmp_path: Path):
    """The difference, interval and p-value are the paired t-test's on the seeds both methods have; a seed of
    one method only is left out."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0.6, 0.8, size=6)
    ace = base - 0.05 + rng.normal(0.0, 0.01, size=6)
    paths = [_write_run(tmp_path, "grpo", s, [0.0, float(v)]) for s, v in enumerate(base)]
    paths += [_write_run(tmp_path, "ace_grpo", s, [0.0, float(v)]) for s, v in enumerate(ace)]
    paths.append(_write_run(tmp_path, "ace_grpo", 99, [0.0, 5.0]))  # no GRPO run of seed 99
    frame = last_steps_frame(paths, keys=[OEF, "actor/entropy"], last=1)
    table = paired_diagnostics(frame, {"ace_grpo": "grpo"})
    row = table[table["key"] == OEF].iloc[0]
    d = ace - base
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    assert row["n_seeds"] == 6 and row["mean_method"] == pytest.approx(ace.mean())
    assert row["delta"] == pytest.approx(d.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    assert row["p_paired"] == pytest.approx(stats.ttest_rel(ace, base).pvalue)
    entropy = table[table["key"] == "actor/entropy"].iloc[0]  # equal everywhere: no test possible
    assert entropy["delta"] == 0.0 and math.isnan(entropy["p_paired"])
    assert row["p_holm"] == pytest.approx(row["p_paired"])  # the only finite p of the table


def test_a_file_that_is_not_a_run_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    stray = tmp_path / "metrics.jsonl"
    stray.write_text('{"step": 1}\n')
    assert main([str(stray)]) == 4
    err = capsys.readouterr().err
    assert str(stray) in err and "runs/<model>/<method>/seed<s>/metrics.jsonl" in err


def test_the_table_regenerates_from_the_exported_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """``--export`` writes each run's values; ``--frame`` reads them back and prints the same table, so a study's
    diagnostics can be recomputed from a committed CSV without its runs. A CSV without a column is named."""
    rng = np.random.default_rng(1)
    paths = [
        _write_run(tmp_path, method, s, [float(v) for v in rng.uniform(0.5, 0.9, size=4)])
        for method in ("grpo", "ace_grpo")
        for s in range(5)
    ]
    csv = tmp_path / "out" / "training.csv"
    assert main([*map(str, paths), "--last", "2", "--export", str(csv)]) == 0
    from_runs = capsys.readouterr().out
    assert main(["--frame", str(csv), "--last", "2"]) == 0
    assert capsys.readouterr().out == from_runs and "ace_grpo" in from_runs
    assert main(["--frame", str(csv), "--last", "3"]) == 4  # the file was made with --last 2
    assert "made with --last 2, not 3" in capsys.readouterr().err
    csv.write_text(csv.read_text().replace("value", "val", 1))
    assert main(["--frame", str(csv)]) == 4
    assert f"{csv}: no column 'value'" in capsys.readouterr().err
