"""Checkpoints: SIGKILL + resume == uninterrupted, SIGTERM / SIGUSR1 preemption, atomic writes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from trainer_fixtures import DigitVerifier, make_config, read_jsonl_records

from acerl.config import Run
from acerl.config.settings import resolve
from acerl.errors import BadInputError
from acerl.pipeline import paths
from acerl.train import PREEMPTED_EXIT_CODE, train_run
from acerl.train.checkpoint import LATEST_FILE, find_latest, list_checkpoints
from acerl.train.lock import RunLockedError
from acerl.train.signals import TrainingPreempted

STEPS, SAVE_EVERY = 4, 2


def _train_in_child(root: Path, method: str, delay: float) -> None:
    from train_worker import SlowVerifier

    cfg = make_config(f"models.tiny.train.total_steps={STEPS}", f"models.tiny.train.save_every={SAVE_EVERY}")
    train_run(resolve(cfg, Run("tiny", method, 0)), root, verifier=SlowVerifier(delay), progress=False)


def _start(root: Path, method: str, delay: float = 0.05) -> multiprocessing.Process:
    """A real child process (forked: no re-import cost) training the run; signals go to its pid."""
    proc = multiprocessing.get_context("fork").Process(target=_train_in_child, args=(root, method, delay))
    proc.start()
    return proc


def _wait_for(predicate, proc: multiprocessing.Process, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if not proc.is_alive():
            raise AssertionError(f"worker exited early with code {proc.exitcode}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the worker")
        time.sleep(0.02)


def _records(root: Path, run: Run) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in
            read_jsonl_records(paths.train_metrics_file(root, run))]  # fmt: skip


def _uninterrupted(tmp_path: Path, template: Path, method: str) -> tuple[dict, list[dict]]:
    root = tmp_path / "reference"
    shutil.copytree(template, root)
    cfg = make_config(f"models.tiny.train.total_steps={STEPS}", f"models.tiny.train.save_every={SAVE_EVERY}")
    final = train_run(resolve(cfg, Run("tiny", method, 0)), root, verifier=DigitVerifier(), progress=False)
    return load_file(str(final / "model.safetensors")), _records(root, Run("tiny", method, 0))


def _resume_in_process(root: Path, method: str) -> tuple[dict, list[dict]]:
    cfg = make_config(f"models.tiny.train.total_steps={STEPS}", f"models.tiny.train.save_every={SAVE_EVERY}")
    final = train_run(resolve(cfg, Run("tiny", method, 0)), root, verifier=DigitVerifier(), progress=False)
    return load_file(str(final / "model.safetensors")), _records(root, Run("tiny", method, 0))


def _assert_same(a: tuple[dict, list[dict]], b: tuple[dict, list[dict]]) -> None:
    (wa, ra), (wb, rb) = a, b
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert [r["step"] for r in rb] == list(range(1, STEPS + 1))
    assert ra == rb


def test_sigkill_then_resume_equals_uninterrupted(tiny_root: Path, tiny_root_template: Path, tmp_path: Path):
    method = "ace_dapo"  # reference log-probs, ACE, dynamic sampling and overlong shaping all on
    run = Run("tiny", method, 0)
    proc = _start(tiny_root, method)
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    _wait_for(lambda: (ckpt_dir / LATEST_FILE).is_file(), proc)
    # let it get into the next step (metrics written past the checkpoint) before killing it
    metrics = paths.train_metrics_file(tiny_root, run)
    _wait_for(lambda: len(metrics.read_text().splitlines()) > SAVE_EVERY, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL
    assert not paths.policy_dir(tiny_root, run).exists()
    steps_logged = len(read_jsonl_records(metrics))
    last_ckpt = list_checkpoints(ckpt_dir)[-1][0]
    assert steps_logged > last_ckpt  # the resumed run must cut metrics.jsonl back
    resumed = _resume_in_process(tiny_root, method)
    _assert_same(_uninterrupted(tmp_path, tiny_root_template, method), resumed)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_preemption_signal_checkpoints_and_exits_75(
    sig, tiny_root: Path, tiny_root_template: Path, tmp_path: Path
):
    """SIGTERM / SIGUSR1 checkpoint at the step boundary and exit 75; Ctrl-C (SIGINT) checkpoints the same way
    and exits 130 (it used to lose the steps since the last checkpoint)."""
    method = "grpo"
    run = Run("tiny", method, 0)
    # 0.5 s per grading call: the remaining steps outlast this process's polling even on a loaded machine (with
    # 0.05 s a busy CI box once let the child finish all steps before the signal was sent)
    proc = _start(tiny_root, method, delay=0.5)
    metrics = paths.train_metrics_file(tiny_root, run)
    _wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 1, proc)
    os.kill(proc.pid, sig)
    proc.join(timeout=120)
    assert proc.exitcode == (130 if sig == signal.SIGINT else PREEMPTED_EXIT_CODE)
    n = len(read_jsonl_records(metrics))
    assert 1 <= n < STEPS
    ckpt = find_latest(paths.checkpoints_dir(tiny_root, run))
    assert ckpt is not None and ckpt.name == f"step_{n:06d}"  # checkpoint at the step boundary it stopped at
    assert not paths.policy_dir(tiny_root, run).exists()
    if sig in (signal.SIGTERM, signal.SIGINT):
        _assert_same(
            _uninterrupted(tmp_path, tiny_root_template, method), _resume_in_process(tiny_root, method)
        )


class _SigtermAtCall(DigitVerifier):
    """Sends this process SIGTERM while grading its ``n``-th batch (one batch a step for GRPO-family runs)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def grade_many(self, items, *, progress=None):
        if self.calls + 1 == self.n:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().grade_many(items, progress=progress)


def test_an_ema_reference_is_restored_on_resume(
    tiny_root: Path, tiny_root_template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """An ACE run with the EMA reference, preempted at step 2 and resumed, equals an unbroken run: the resumed
    reference is the checkpoint's moved EMA (ACE's confidences and the KL use it), not the base model again."""
    run = Run("tiny", "ace_grpo", 0)
    cfg = make_config(f"models.tiny.train.total_steps={STEPS}", f"models.tiny.train.save_every={STEPS}")
    settings = resolve(cfg, run, reference="ema", ref_ema_decay=0.5)
    with pytest.raises(TrainingPreempted) as preempted:
        train_run(settings, tiny_root, verifier=_SigtermAtCall(2), progress=False)
    assert (preempted.value.step, preempted.value.signum, preempted.value.code) == (2, signal.SIGTERM, 75)
    assert (
        str(preempted.value)
        == "training preempted by SIGTERM after step 2 (checkpoint written; exit code 75)"
    )
    assert [step for step, _ in list_checkpoints(paths.checkpoints_dir(tiny_root, run))] == [2]
    with caplog.at_level(logging.INFO, logger="acerl.train.run"):
        final = train_run(settings, tiny_root, verifier=DigitVerifier(), progress=False)
    ckpt = paths.checkpoints_dir(tiny_root, run) / "step_000002"
    assert f"resuming from {ckpt} (step 2)" in [r.getMessage() for r in caplog.records]
    resumed = load_file(str(final / "model.safetensors")), _records(tiny_root, run)
    reference = tmp_path / "reference"
    shutil.copytree(tiny_root_template, reference)
    final = train_run(settings, reference, verifier=DigitVerifier(), progress=False)
    _assert_same((load_file(str(final / "model.safetensors")), _records(reference, run)), resumed)


def test_a_signal_after_the_checkpoint_decision_stops_at_a_checkpoint(
    tiny_root: Path, monkeypatch: pytest.MonkeyPatch
):
    """SIGTERM landing after a step's checkpoint decision but before its stop decision (here: while the step's
    log line is written) stops the run at the next checkpointed step, never at one without a checkpoint (it used
    to exit 75 after step 1 with nothing saved: every step since the last checkpoint lost)."""
    import acerl.train.run as run_module

    run = Run("tiny", "grpo", 0)
    cfg = make_config(f"models.tiny.train.total_steps={STEPS}", f"models.tiny.train.save_every={STEPS}")
    line = run_module.step_line

    def signalling_line(run_id, step, total, metrics):
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return line(run_id, step, total, metrics)

    monkeypatch.setattr(run_module, "step_line", signalling_line)
    with pytest.raises(TrainingPreempted) as preempted:
        train_run(resolve(cfg, run), tiny_root, verifier=DigitVerifier(), progress=False)
    assert preempted.value.step == 2
    assert [step for step, _ in list_checkpoints(paths.checkpoints_dir(tiny_root, run))] == [2]


def test_checkpoints_and_diagnostic_snapshots_fall_on_their_steps(tiny_root: Path, verifier: DigitVerifier):
    """Checkpoints at multiples of ``save_every`` and at the last step whatever ``save_every`` says (a crash while
    the final policy is written then resumes at the end, not retrains the tail). The diagnostic snapshots at
    ``diagnostic_steps`` (here 0, 2 and 3: ``every=2``, the last step): step 0 is the base model, the last the
    final policy."""
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=3", "models.tiny.train.save_every=2")
    final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    assert [s for s, _ in list_checkpoints(paths.checkpoints_dir(tiny_root, run))] == [2, 3]
    steps = (0, 2, 3)
    assert sorted(p.name for p in paths.diag_dir(tiny_root, run).iterdir()) == [
        paths.diag_step_dir(tiny_root, run, s).name for s in steps
    ]
    snap = {s: load_file(str(paths.diag_step_dir(tiny_root, run, s) / "model.safetensors")) for s in steps}
    base = load_file(str(paths.base_model_dir(tiny_root, "tiny") / "model.safetensors"))
    trained = load_file(str(final / "model.safetensors"))
    k = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(snap[0][k], base[k]) and torch.equal(snap[3][k], trained[k])
    assert not torch.equal(snap[2][k], base[k]) and not torch.equal(snap[2][k], trained[k])


def test_a_preemption_signal_in_the_last_step_finishes_the_run(tiny_root: Path):
    """SIGTERM during the last step: there is nothing left to hand back, so the run checkpoints, writes its
    final policy and returns (no exit 75, which would make the scheduler requeue a finished run)."""
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=5")
    final = train_run(resolve(cfg, run), tiny_root, verifier=_SigtermAtCall(2), progress=False)
    assert (final / "model.safetensors").is_file()
    assert [r["step"] for r in read_jsonl_records(paths.train_metrics_file(tiny_root, run))] == [1, 2]
    assert [s for s, _ in list_checkpoints(paths.checkpoints_dir(tiny_root, run))] == [2]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("bad_file", ["model.safetensors", "trainer_state.pt", "optimizer.pt"])
def test_truncated_checkpoint_falls_back_to_the_previous_one(
    bad_file: str, tiny_root: Path, tiny_root_template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """A cut-short file in the newest checkpoint: training says so and resumes from the previous complete
    checkpoint, ending exactly where an uninterrupted run ends."""
    method = "grpo"
    run = Run("tiny", method, 0)
    _resume_in_process(tiny_root, method)  # the whole run: checkpoints at steps 2 and 4
    shutil.rmtree(paths.policy_dir(tiny_root, run))  # as if the job died before the final folder
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [2, 4]
    _truncate(ckpt_dir / "step_000004" / bad_file)
    with caplog.at_level("WARNING", logger="acerl.train.checkpoint"):
        resumed = _resume_in_process(tiny_root, method)
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(ckpt_dir / "step_000004" / bad_file) in warning
    assert f"previous complete checkpoint {ckpt_dir / 'step_000002'}" in warning
    _assert_same(_uninterrupted(tmp_path, tiny_root_template, method), resumed)


def test_no_usable_checkpoint_is_exit_4_naming_the_folder(tiny_root: Path, verifier: DigitVerifier):
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=2")
    train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    shutil.rmtree(paths.policy_dir(tiny_root, run))
    only = paths.checkpoints_dir(tiny_root, run) / "step_000002"
    _truncate(only / "trainer_state.pt")
    with pytest.raises(BadInputError) as e:
        train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    assert e.value.exit_code == 4
    assert str(only / "trainer_state.pt") in str(e.value) and f"delete {only} and rerun" in str(e.value)


def test_leftover_temp_dirs_are_ignored_and_removed(tiny_root: Path, verifier: DigitVerifier):
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=1")
    train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    shutil.rmtree(paths.policy_dir(tiny_root, run))  # pretend the job died before the final folder
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    junk = ckpt_dir / ".tmp-step_000003.abc"
    junk.mkdir()
    (junk / "model.safetensors").write_bytes(b"truncated")
    stale_final = paths.run_dir(tiny_root, run) / ".tmp-final.xyz"
    stale_final.mkdir()
    assert find_latest(ckpt_dir).name == "step_000002"
    (ckpt_dir / LATEST_FILE).write_text("step_000009\n")  # a stale pointer falls back to a folder scan
    assert find_latest(ckpt_dir).name == "step_000002"
    calls = verifier.calls
    final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    assert verifier.calls == calls  # resumed at step 2 of 2: only the final folder was written
    assert (final / "model.safetensors").is_file()
    assert not junk.exists() and not stale_final.exists()
    assert [r["step"] for r in read_jsonl_records(paths.train_metrics_file(tiny_root, run))] == [1, 2]
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [1, 2]


def test_keep_checkpoints_rotation(tiny_root: Path, verifier: DigitVerifier):
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=3", "models.tiny.train.save_every=1",
                      "models.tiny.train.keep_checkpoints=2")  # fmt: skip
    train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [2, 3]
    assert (ckpt_dir / LATEST_FILE).read_text().strip() == "step_000003"
    # the frozen initial reference is the base model, read again on resume: not saved with each checkpoint
    assert sorted(p.name for p in (ckpt_dir / "step_000003").iterdir()) == [
        "model.safetensors",
        "optimizer.pt",
        "trainer_state.pt",
    ]
    state = torch.load(ckpt_dir / "step_000003" / "trainer_state.pt", weights_only=True)
    assert state["step"] == 3 and set(state) >= {"scheduler", "data", "rng", "spec"}


def test_changed_settings_start_over_and_keep_the_old_state(
    tiny_root: Path, verifier: DigitVerifier, caplog: pytest.LogCaptureFixture
):
    """A rerun with other settings (what Snakemake or DVC do after a config change) trains from step 0; the
    checkpoints of the old settings are moved aside, not resumed and not deleted."""
    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=1")
    train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    shutil.rmtree(paths.policy_dir(tiny_root, run))
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    old_weights = (ckpt_dir / "step_000002" / "model.safetensors").read_bytes()
    changed = make_config(
        "models.tiny.train.total_steps=2", "models.tiny.train.save_every=1", "models.tiny.train.lr=0.5"
    )
    calls = verifier.calls
    with caplog.at_level(logging.WARNING, logger="acerl.train.checkpoint"):
        train_run(resolve(changed, run), tiny_root, verifier=verifier, progress=False)
    assert verifier.calls > calls  # trained again, not resumed at step 2 of 2
    assert [r["step"] for r in read_jsonl_records(paths.train_metrics_file(tiny_root, run))] == [1, 2]
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [1, 2]
    assert (ckpt_dir / "step_000002" / "model.safetensors").read_bytes() != old_weights
    (superseded,) = paths.run_dir(tiny_root, run).glob("checkpoints.superseded-*")
    assert (superseded / "step_000002" / "model.safetensors").read_bytes() == old_weights
    (diag,) = paths.run_dir(tiny_root, run).glob("diag.superseded-*")
    (warning,) = [r.getMessage() for r in caplog.records if "other settings" in r.getMessage()]
    assert warning.startswith(
        f"tiny/grpo/seed0: checkpoint {ckpt_dir / 'step_000002'} was written with other settings"
    )
    assert warning.endswith(f"moved to {superseded}, {diag}: delete it once you no longer need it")


@pytest.mark.slow
def test_cli_sigterm_exit_code(tiny_root: Path):
    """``python -m acerl.train`` (real grader) exits with PREEMPTED_EXIT_CODE on SIGTERM, then resumes."""
    from trainer_fixtures import REPO, TRAIN_OVERRIDES

    args = [
        sys.executable,
        "-m",
        "acerl.train",
        "--config",
        str(REPO / "config" / "config.yaml"),
        "--model",
        "tiny",
        "--method",
        "grpo",
        "--seed",
        "0",
        "--root",
        str(tiny_root),
        "--no-progress",
    ]
    for item in [*TRAIN_OVERRIDES, "models.tiny.train.total_steps=40", "grading.workers=0"]:
        args += ["--set", item]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = paths.train_metrics_file(tiny_root, Run("tiny", "grpo", 0))
    deadline = time.monotonic() + 240
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == PREEMPTED_EXIT_CODE, err[-3000:]
    n = len(read_jsonl_records(metrics))
    assert find_latest(paths.checkpoints_dir(tiny_root, Run("tiny", "grpo", 0))).name == f"step_{n:06d}"


@pytest.mark.parametrize(
    "later_launch", [False, True], ids=["last launch wrote it", "a later launch crashed"]
)
def test_resume_across_package_versions_warns_and_records_both(tiny_root: Path, caplog, later_launch: bool):
    """A checkpoint made by other versions of a deciding package (acerl.pipeline.provenance) resumes with one warning line;
    software.json then lists both launches, and the run spec (what decides the result) is unchanged. The
    checkpoint's own stamp decides, not the last launch recorded: a launch with today's packages that crashed
    before its first checkpoint did not make the state being continued."""
    from acerl.pipeline.provenance import software_stamp
    from acerl.train.checkpoint import STATE_FILE, read_trainer_state

    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=2")
    final = train_run(resolve(cfg, run), tiny_root, verifier=DigitVerifier(), progress=False)
    spec = paths.run_spec_file(tiny_root, run).read_text()
    ckpt = find_latest(paths.checkpoints_dir(tiny_root, run))
    state = read_trainer_state(ckpt)
    assert state["software"] == software_stamp()
    old = software_stamp()
    old["packages"]["transformers"] = "0.0.1"
    torch.save({**state, "software": old}, ckpt / STATE_FILE)
    software_file = paths.software_file(tiny_root, run)
    software_file.write_text(json.dumps({"launches": [old, software_stamp()] if later_launch else [old]}))
    shutil.rmtree(final)
    with caplog.at_level("WARNING"):
        train_run(resolve(cfg, run), tiny_root, verifier=DigitVerifier(), progress=False)
    lines = [r.getMessage() for r in caplog.records if "other package versions" in r.getMessage()]
    assert len(lines) == 1 and "transformers 0.0.1 ->" in lines[0]
    assert lines[0].startswith(f"tiny/grpo/seed0: checkpoint {ckpt} was made with other package versions")
    assert json.loads(software_file.read_text())["launches"] == [old, software_stamp()]
    assert paths.run_spec_file(tiny_root, run).read_text() == spec


def test_two_identical_runs_write_identical_checkpoints(tiny_root_template: Path, tmp_path: Path):
    """A checkpoint holds the run's state and nothing of its history (the sampling generator, reseeded from
    (seed, step, attempt) by every batch, is not saved; the global random states it records are seeded from
    the run seed at a fresh start): two identical runs write byte-identical files, whatever global random state
    their process holds (here the second starts where the first left it, as a new process would start
    anywhere)."""
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=1")
    run = Run("tiny", "ace_dapo", 1)  # not seed 0: derive_seed(stream, 0) == derive_seed(stream)
    written = []
    for i, name in enumerate(("first", "second")):
        root = tmp_path / name
        shutil.copytree(tiny_root_template, root)
        random.seed(i), np.random.seed(i), torch.manual_seed(i)  # as two processes would start
        train_run(resolve(cfg, run), root, verifier=DigitVerifier(), progress=False)
        ckpt_dir = paths.checkpoints_dir(root, run)
        written.append(
            {p.relative_to(ckpt_dir): p.read_bytes() for p in sorted(ckpt_dir.rglob("*")) if p.is_file()}
        )
    assert Path("step_000002", "trainer_state.pt") in written[0]
    assert written[0].keys() == written[1].keys()
    assert [f for f in written[0] if written[0][f] != written[1][f]] == []
    # The recorded global states are those of the run's own seed stream after building the model (which draws
    # its throw-away initial weights from torch's), untouched by the steps: the states of a fresh start seeded
    # with another seed or stream would be shared with other runs or other uses.
    from acerl.pipeline.seeds import GLOBAL_SEED_STREAM, derive_seed
    from acerl.train.checkpoint import get_rng_states, read_trainer_state, seed_rng_states
    from acerl.train.run import init_state

    seed_rng_states(derive_seed(GLOBAL_SEED_STREAM, run.seed))
    init_state(tmp_path / "second", run, resolve(cfg, run), torch.device("cpu"))
    want = get_rng_states()
    got = read_trainer_state(paths.checkpoints_dir(tmp_path / "second", run) / "step_000002")["rng"]
    assert got["python"] == want["python"] and torch.equal(got["torch"], want["torch"])
    assert torch.equal(got["numpy"]["keys"], want["numpy"]["keys"])
    assert {k: v for k, v in got["numpy"].items() if k != "keys"} == {
        k: v for k, v in want["numpy"].items() if k != "keys"
    }


def test_a_checkpoint_with_the_sampling_generator_state_still_resumes(
    tiny_root: Path, verifier: DigitVerifier
):
    """Checkpoints written before the generator's state was dropped hold it under ``rng.sampling``: ignored."""
    from acerl.train.checkpoint import STATE_FILE, read_trainer_state

    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=1")
    final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    weights = load_file(str(final / "model.safetensors"))
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    shutil.rmtree(final)
    shutil.rmtree(ckpt_dir / "step_000002")
    (ckpt_dir / LATEST_FILE).write_text("step_000001\n")
    state = read_trainer_state(ckpt_dir / "step_000001")
    state["rng"]["sampling"] = torch.Generator().manual_seed(5).get_state()
    torch.save(state, ckpt_dir / "step_000001" / STATE_FILE)
    calls = verifier.calls
    final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    assert 0 < verifier.calls - calls < calls  # resumed: only step 2 was trained again
    resumed = load_file(str(final / "model.safetensors"))
    assert all(torch.equal(weights[k], resumed[k]) for k in weights)
    assert [r["step"] for r in read_jsonl_records(paths.train_metrics_file(tiny_root, run))] == [1, 2]


def test_what_a_checkpoint_must_match_to_resume():
    """The comparable spec: the run spec less its diagnostic steps (which only add saved policies: a study that
    adds diagnostics resumes its runs) plus the trainer's result version under ``code_version`` (the stored
    format: a checkpoint of older trainer code is superseded, not resumed)."""
    from acerl.stage_versions import STAGE_VERSIONS
    from acerl.train.run import _comparable_spec

    spec = {"method": "ace_grpo", "seed": 0, "total_steps": 4, "diagnostic_steps": [0, 2]}
    text = _comparable_spec(spec)
    assert _comparable_spec({**spec, "diagnostic_steps": []}) == text
    assert _comparable_spec({**spec, "total_steps": 5}) != text
    assert json.loads(text) == {
        "method": "ace_grpo",
        "seed": 0,
        "total_steps": 4,
        "code_version": STAGE_VERSIONS["train_policy"],
    }


def test_a_second_trainer_of_the_same_run_is_refused_until_the_first_stops(tiny_root: Path):
    """Two trainers of one run at once both wrote its checkpoints and ``final/``; the second now gets a one-line
    error naming the run and the holder's pid (exit 75: try again), and the lock dies with its holder."""
    run = Run("tiny", "grpo", 0)
    proc = _start(tiny_root, "grpo", delay=0.5)
    metrics = paths.train_metrics_file(tiny_root, run)
    _wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 1, proc)
    cfg = make_config(f"models.tiny.train.total_steps={STEPS}", f"models.tiny.train.save_every={SAVE_EVERY}")
    try:
        with pytest.raises(RunLockedError) as e:
            train_run(resolve(cfg, run), tiny_root, verifier=DigitVerifier(), progress=False)
    finally:
        proc.kill()
        proc.join(timeout=60)
    lock = paths.run_lock_file(tiny_root, run)
    assert str(e.value) == (
        f"run tiny/grpo/seed0 is being trained by another process (pid {proc.pid}, lock file {lock}): wait for "
        f"it to finish, or stop it (kill {proc.pid}) and rerun the same command, which resumes"
    )
    assert e.value.exit_code == 75 and not paths.policy_dir(tiny_root, run).exists()
    # SIGKILL freed the lock
    final = train_run(resolve(cfg, run), tiny_root, verifier=DigitVerifier(), progress=False)
    assert (final / "model.safetensors").is_file()


def test_resource_keys_resume_and_keep_a_finished_run(tiny_root: Path, verifier: DigitVerifier):
    """A change of a resource key (checkpoint schedule, vLLM memory, token budget) resumes the run and returns
    its finished policy, also from a checkpoint and a final folder whose spec was recorded with those keys."""
    from acerl.config.settings import RESOURCE_KEYS
    from acerl.train.checkpoint import STATE_FILE, read_trainer_state
    from acerl.train.finished import FINAL_SPEC_FILE

    run = Run("tiny", "grpo", 0)
    cfg = make_config("models.tiny.train.total_steps=2", "models.tiny.train.save_every=1")
    final = train_run(resolve(cfg, run), tiny_root, verifier=verifier, progress=False)
    weights = load_file(str(final / "model.safetensors"))
    knobs = cfg.models["tiny"].train.model_dump(mode="json", include=set(RESOURCE_KEYS))

    def recorded_with_knobs(spec: dict) -> dict:  # the spec as code before this change wrote it
        return {**spec, "train": {**spec["train"], **knobs}}

    final_spec = json.loads((final / FINAL_SPEC_FILE).read_text())
    (final / FINAL_SPEC_FILE).write_text(json.dumps(recorded_with_knobs(final_spec)))
    changed = make_config(
        "models.tiny.train.total_steps=2",
        "models.tiny.train.save_every=2",
        "models.tiny.train.keep_checkpoints=3",
        "models.tiny.train.gpu_memory_utilization=0.5",
        "models.tiny.train.max_tokens_per_gpu=9000",
    )
    calls = verifier.calls
    assert train_run(resolve(changed, run), tiny_root, verifier=verifier, progress=False) == final
    assert verifier.calls == calls  # finished: not trained again

    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    shutil.rmtree(final)
    shutil.rmtree(ckpt_dir / "step_000002")
    (ckpt_dir / LATEST_FILE).write_text("step_000001\n")
    state = torch.load(ckpt_dir / "step_000001" / STATE_FILE, weights_only=True)
    old = recorded_with_knobs(json.loads(state["spec"]))
    state["spec"] = json.dumps(old, sort_keys=True, separators=(",", ":"))
    torch.save(state, ckpt_dir / "step_000001" / STATE_FILE)
    assert read_trainer_state(ckpt_dir / "step_000001")["spec"] != state["spec"]  # read without the knobs
    final = train_run(resolve(changed, run), tiny_root, verifier=verifier, progress=False)
    assert 0 < verifier.calls - calls < calls  # resumed: only step 2 was trained again
    assert not list(paths.run_dir(tiny_root, run).glob("checkpoints.superseded-*"))
    resumed = load_file(str(final / "model.safetensors"))
    assert all(torch.equal(weights[k], resumed[k]) for k in weights)
