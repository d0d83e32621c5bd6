"""compute.tracker: TensorBoard event files written by the local trainer, read back offline; verl gets the same
choice as trainer.logger."""

from __future__ import annotations

import math
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_fixtures import DigitVerifier, make_config

from acerl.config import Run
from acerl.pipeline import paths
from acerl.train import train_run
from acerl.train.metrics import MetricsLog, read_metrics
from acerl.train.tracker import open_tracker, verl_loggers
from acerl.verl_backend.launcher import verl_env


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_metrics_log_mirrors_every_finite_metric_to_tensorboard(tmp_path):
    tracker = open_tracker("tensorboard", tmp_path / "tb", project="p", name="m/x/seed0")
    with MetricsLog(tmp_path / "metrics.jsonl", 0, None, tracker) as log:
        log.log(1, {"train/reward_mean": 0.25, "actor/kl_loss": math.nan, "note": "text"})
        log.log(2, {"train/reward_mean": 0.5, "actor/kl_loss": 0.125})
    got = _scalars(tmp_path / "tb")
    assert got == {"train/reward_mean": [(1, 0.25), (2, 0.5)], "actor/kl_loss": [(2, 0.125)]}
    assert open_tracker("none", tmp_path / "none", project="p", name="n") is None
    assert not (tmp_path / "none").exists()


def test_a_training_run_writes_event_files_when_asked(tiny_root: Path, verifier: DigitVerifier):
    cfg = make_config("models.tiny.train.total_steps=2", "compute.tracker=tensorboard")
    run = Run("tiny", "ace_grpo", 2)
    train_run(cfg, run, tiny_root, verifier=verifier, progress=False)
    got = _scalars(paths.tracker_dir(tiny_root, run))
    records = read_metrics(paths.train_metrics_file(tiny_root, run))
    assert [s for s, _ in got["ace/multiplier_mean_neg"]] == [1, 2]
    for step, value in got["train/pass_rate"]:
        assert math.isclose(value, records[step - 1]["train/pass_rate"], rel_tol=1e-6)


def test_verl_gets_the_same_choice(tmp_path):
    assert verl_loggers("none") == ["console", "file"]
    assert verl_loggers("tensorboard") == ["console", "file", "tensorboard"]
    assert verl_loggers("wandb") == ["console", "file", "wandb"]
    run = Run("tiny", "ace_grpo", 0)
    env = verl_env(make_config("compute.tracker=tensorboard"), run, tmp_path)
    assert env["TENSORBOARD_DIR"] == str(paths.tracker_dir(tmp_path.resolve(), run))
    assert "TENSORBOARD_DIR" not in verl_env(make_config(), run, tmp_path)
