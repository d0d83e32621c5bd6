"""compute.tracker: TensorBoard event files written by the local trainer, read back offline; verl gets the same
choice as trainer.logger; a finished run's curves written after the fact (``acerl report training
--tensorboard``); the tracker decides nothing about a run."""

from __future__ import annotations

import math
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer_fixtures import DigitVerifier, make_config

from acerl.config import Run
from acerl.config.settings import resolve, run_spec
from acerl.pipeline import paths
from acerl.pipeline.stages import param_values, study_jobs
from acerl.report.training import main as report_training
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
    train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    got = _scalars(paths.tracker_dir(tiny_root, run))
    records = read_metrics(paths.train_metrics_file(tiny_root, run))
    assert [s for s, _ in got["ace/multiplier_mean_neg"]] == [1, 2]
    for step, value in got["train/pass_rate"]:
        assert math.isclose(value, records[step - 1]["train/pass_rate"], rel_tol=1e-6)
    # `tensorboard --logdir tracker` names the run by its id, not ".../seed2/tracker"
    assert paths.tracker_dir(tiny_root, run).relative_to(tiny_root / "tracker").as_posix() == run.id


def test_a_finished_run_s_curves_are_written_after_the_fact(tiny_root: Path, verifier: DigitVerifier, capsys):
    """A run trained without a tracker: ``acerl report training --tensorboard`` writes every finite scalar of
    its metrics.jsonl, each at its step; exporting again replaces the events instead of doubling them."""
    run = Run("tiny", "grpo", 1)
    train_run(
        resolve(make_config("models.tiny.train.total_steps=2"), run),
        tiny_root,
        verifier=verifier,
        progress=False,
    )
    assert not paths.tracker_dir(tiny_root, run).exists()
    metrics = paths.train_metrics_file(tiny_root, run)
    out = tiny_root / "tracker"
    for _ in range(2):
        assert report_training([str(metrics), "--tensorboard", str(out)]) == 0
    assert f"{metrics}: 2 steps -> {paths.tracker_dir(tiny_root, run)}" in capsys.readouterr().out
    got = _scalars(paths.tracker_dir(tiny_root, run))
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in read_metrics(metrics):
        for key, value in record.items():
            if key != "step" and isinstance(value, float | int) and math.isfinite(value):
                expected.setdefault(key, []).append((record["step"], value))
    assert set(got) == set(expected) and "train/reward_mean" in got
    for key, points in expected.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key
        assert all(
            math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
            for (_, a), (_, b) in zip(got[key], points, strict=True)
        )


def test_a_metrics_file_that_is_not_a_run_s_is_one_line(tmp_path: Path, capsys):
    missing = tmp_path / "runs" / "tiny" / "grpo" / "seed0" / "metrics.jsonl"
    assert report_training([str(missing), "--tensorboard", str(tmp_path / "tb")]) == 4
    assert (
        capsys.readouterr().err
        == f"acerl report training: {missing}: no such metrics file; train the run first\n"
    )


def test_the_tracker_decides_no_job() -> None:
    """Switching the tracker on changes no run spec and no job's deciding params (what reruns a job)."""
    off, on = make_config(), make_config("compute.tracker=tensorboard")
    jobs = study_jobs(off)
    assert jobs == study_jobs(on)
    assert [param_values(off, j) for j in jobs] == [param_values(on, j) for j in jobs]
    assert [run_spec(off, r) for r in off.runs()] == [run_spec(on, r) for r in on.runs()]


def test_verl_gets_the_same_choice(tmp_path):
    assert verl_loggers("none") == ["console", "file"]
    assert verl_loggers("tensorboard") == ["console", "file", "tensorboard"]
    assert verl_loggers("wandb") == ["console", "file", "wandb"]
    run = Run("tiny", "ace_grpo", 0)
    env = verl_env(make_config("compute.tracker=tensorboard"), run, tmp_path)
    assert env["TENSORBOARD_DIR"] == str(paths.tracker_dir(tmp_path.resolve(), run))
    assert "TENSORBOARD_DIR" not in verl_env(make_config(), run, tmp_path)
