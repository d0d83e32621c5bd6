"""Job logs show progress: with the progress bar off (the rules run ``--no-progress``), one line per step."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from trainer_fixtures import DigitVerifier, make_config

from acerl.config import Run
from acerl.config.settings import resolve
from acerl.pipeline import paths
from acerl.train import train_run
from acerl.train.metrics import read_metrics
from acerl.train.run import step_line


def test_one_log_line_per_step_without_the_bar(
    tiny_root: Path, verifier: DigitVerifier, caplog: pytest.LogCaptureFixture
):
    cfg = make_config("models.tiny.train.total_steps=2")
    run = Run("tiny", "grpo", 1)
    with caplog.at_level(logging.INFO, logger="acerl.train.run"):
        train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    records = read_metrics(paths.train_metrics_file(tiny_root, run))
    lines = [r.getMessage() for r in caplog.records if ": step " in r.getMessage()]
    assert lines == [step_line(run.id, r["step"], 2, r) for r in records]
    assert lines[0].startswith("tiny/grpo/seed1: step 1/2 reward ")
    assert f"acc {records[1]['train/pass_rate']:.3f} " in lines[1]


def test_step_line_marks_what_a_step_did_not_log():
    line = step_line("m/x/seed0", 3, 10, {"train/reward_mean": 0.5, "actor/entropy": math.nan})
    assert line == "m/x/seed0: step 3/10 reward 0.500 acc - entropy - kl - (- s)"
