"""Evaluation noise measured by re-evaluating trained policies with other evaluation seeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from acerl.cli import main
from acerl.config import Run
from acerl.errors import MissingInputError
from acerl.pipeline import paths
from acerl.report.resample import evaluation_root, noise_frame

REPO = Path(__file__).resolve().parents[2]


def test_noise_frame_separates_coupled_from_independent_noise():
    rng = np.random.default_rng(0)
    base = 0.5 + 0.05 * rng.standard_normal(8)  # one run's score under 8 evaluation seeds
    rows = [
        {"method": m, "seed": 0, "eval_seed": e, "k": 32, "pass": float(v)}
        for m, scores in (("grpo", base), ("ace_grpo", base + 0.1))  # perfectly coupled, +10 points
        for e, v in enumerate(scores)
    ]
    (row,) = noise_frame(pd.DataFrame(rows), {"ace_grpo": "grpo"}).to_dict("records")
    assert row["delta"] == pytest.approx(0.1)
    assert row["sd_paired"] == pytest.approx(0.0, abs=1e-12)
    assert row["sd_run"] == pytest.approx(np.std(base, ddof=1))
    assert row["sd_independent"] == pytest.approx(np.std(base - np.roll(base, -1), ddof=1))
    assert row["n_eval_seeds"] == 8


def test_evaluation_root_refuses_a_study_that_has_not_run(tmp_path: Path):
    with pytest.raises(MissingInputError, match="make run"):
        evaluation_root(tmp_path / "empty", tmp_path / "out", 1)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_resampling_with_the_study_seed_reproduces_the_study(
    ci_study: Path, tmp_path: Path, capsys, monkeypatch
):
    """Re-evaluating with the study's own evaluation seed gives the study's Pass@k exactly (the same code path);
    another seed gives other samples."""
    monkeypatch.chdir(REPO)  # acerl resample stacks config/config.yaml under --config, as every acerl command
    out = tmp_path / "resample"
    args = ["resample", "--config", str(REPO / "config/test.yaml"), "--root", str(ci_study),
            "--out", str(out), "--benchmark", "synth_easy", "--seed", "0", "--comparisons", "ace_grpo:grpo"]  # fmt: skip
    assert main([*args, "--eval-seeds", "1234", "7"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"\|\s*ace_grpo\s*\|\s*grpo\s*\|", printed) and "sd_paired" in printed
    for method in ("grpo", "ace_grpo"):
        run = Run("tiny", method, 0)
        study = json.loads(paths.passk_file(ci_study, "synth_easy", run).read_text())
        same = json.loads(paths.passk_file(out / "eval1234", "synth_easy", run).read_text())
        other = paths.generations_file(out / "eval7", "synth_easy", run).read_bytes()
        assert same["pass_at_k"] == study["pass_at_k"] and same["problems"] == study["problems"]
        assert other != paths.generations_file(out / "eval1234", "synth_easy", run).read_bytes()
    assert not (ci_study / "resample").exists()  # the study's directory is only read
