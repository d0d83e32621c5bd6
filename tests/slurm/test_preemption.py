"""Preemption on SLURM: a training job stopped by SLURM is resubmitted by Snakemake (`retries` in the profile)
and the new attempt resumes from the checkpoint under ``runs/<model>/<method>/seed<s>/checkpoints/`` instead of
starting again from step 0.

- ``signal``: ``scancel --signal=TERM`` (what SLURM sends at ``--signal=TERM@300`` before the time limit); the
  trainer checkpoints at the next step boundary and exits with 75. No periodic checkpoint exists (``save_every``
  is larger than the run), so the resumed step is the one the SIGTERM checkpoint saved.
- ``cancel``: ``scancel`` (an operator's cancel): SIGTERM, then SIGKILL after ``KillWait``; the job ends
  CANCELLED and the retry resumes from the newest checkpoint (a periodic one, or the SIGTERM one if the signal
  reached the trainer). Needs the squeue status command (see the skip reason).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from support.slurm_helpers import (
    KILL_GRACE_S,
    SNAKEMAKE,
    LocalCluster,
    copy_workflow,
    run_id_of,
    slurm_jobs,
    snakemake_env,
    tail,
)

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.train.checkpoint import list_checkpoints
from acerl.train.metrics import read_metrics

pytestmark = pytest.mark.slurm

TOTAL_STEPS = 24
RESUME = re.compile(r"resuming from (\S+) \(step (\d+)\)")
WAIT_S = 300  # for the training job to reach the point where the test interrupts it
RUN_S = 900  # for the whole Snakemake run


def _prepared_workflow(dst: Path, reference: Path, model: str, save_every: int) -> Path:
    """The workflow with prepared data and base models, and a longer training run."""
    wf = copy_workflow(dst)
    for folder in ("data", "models"):
        shutil.copytree(reference / folder, wf / folder)
    override = {"models": {model: {"train": {"total_steps": TOTAL_STEPS, "save_every": save_every}}}}
    (wf / "config" / "preempt.yaml").write_text(yaml.safe_dump(override))
    return wf


def _wait(predicate, proc: subprocess.Popen, log: Path, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(
                f"Snakemake exited ({proc.returncode}) before {what}:\n{tail(log.read_text())}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what}:\n{tail(log.read_text())}"
            )
        time.sleep(0.5)


def _running_train_job(log: Path) -> str | None:
    match = re.search(r"SLURM run ID: (\S+)", log.read_text())
    if not match:
        return None
    out = subprocess.run(
        [
            "timeout",
            "-k",
            "2",
            "10",
            "squeue",
            "-h",
            "-t",
            "running",
            "--name",
            match.group(1),
            "-o",
            "%A|%k",
        ],
        capture_output=True,
        text=True,
    ).stdout
    ids = [line.split("|")[0] for line in out.splitlines() if "rule_train_policy" in line]
    return ids[0] if ids else None


@pytest.mark.parametrize("mode", ["signal", "cancel"])
def test_preempted_training_resumes_from_its_checkpoint(
    mode: str, local_cluster: LocalCluster, prepared_inputs: Path, tmp_path: Path
) -> None:
    if mode == "signal" and local_cluster.proctrack == "cgroup":
        pytest.skip(
            "proctrack/cgroup signals only a job step's task process (the inner `python -m snakemake`), never "
            "the trainer under it: SIGTERM checkpoints cannot happen there (docs/cluster.md, 'Preemption')"
        )
    if mode == "cancel" and local_cluster.status_command == "sacct":
        pytest.skip(
            "snakemake-executor-plugin-slurm (2.6.1 locked, 2.8 alike) reads sacct's 'CANCELLED by <uid>' as a running job, so "
            "Snakemake would wait forever for a cancelled job (docs/cluster.md, 'Known problems'); run with "
            "the squeue status command (ACERL_SLURM_ACCOUNTING=0 scripts/slurm_local.sh start)"
        )
    configs = ["config/test.yaml", "config/preempt.yaml"]
    cfg0 = load_config([prepared_inputs / "config" / "config.yaml", prepared_inputs / configs[0]])
    run = cfg0.runs()[0]
    save_every = 1000 if mode == "signal" else 2
    wf = _prepared_workflow(tmp_path / "wf", prepared_inputs, run.model, save_every)
    cfg = load_config([wf / "config" / "config.yaml", *(wf / c for c in configs)])
    assert cfg.models[run.model].train.total_steps == TOTAL_STEPS

    log = tmp_path / "snakemake.log"
    train_log_file = wf / "logs" / "train_policy" / run.model / run.method / f"seed{run.seed}.log"
    cmd = [
        str(SNAKEMAKE),
        "--profile",
        "slurm",
        "--retries",
        "1",
        str(paths.policy_dir(".", run)),
        "--configfile",
        *configs,
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["timeout", "-k", str(KILL_GRACE_S), str(RUN_S), *cmd],
            cwd=wf,
            env=snakemake_env(local_cluster.xdg_config_home),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        metrics = paths.train_metrics_file(wf, run)
        ckpts = paths.checkpoints_dir(wf, run)
        if mode == "signal":
            _wait(lambda: len(read_metrics(metrics)) >= 2, proc, log, "two training steps")
        else:
            _wait(lambda: list_checkpoints(ckpts), proc, log, "a periodic checkpoint")
        steps_before = len(read_metrics(metrics))
        saved_before = max((step for step, _ in list_checkpoints(ckpts)), default=0)
        job_id = _wait(lambda: _running_train_job(log), proc, log, "the running train_policy job")
        scancel = ["scancel", "--signal=TERM", job_id] if mode == "signal" else ["scancel", job_id]
        subprocess.run(["timeout", "-k", "2", "20", *scancel], check=True)
        first_log = _keep_log_while_queued(job_id, train_log_file, tmp_path)
        rc = proc.wait(timeout=RUN_S + 2 * KILL_GRACE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert rc == 0, tail(text)
    assert steps_before < TOTAL_STEPS, "training finished before the test interrupted it: raise TOTAL_STEPS"

    # SLURM: the first job was stopped, the retry completed
    jobs = [j for j in slurm_jobs(local_cluster, run_id_of(text)) if j.rule == "train_policy"]
    assert [j.job_id for j in jobs] == sorted((j.job_id for j in jobs), key=int)
    assert [j.state for j in jobs] == (
        ["FAILED", "COMPLETED"] if mode == "signal" else ["CANCELLED", "COMPLETED"]
    )

    # the retry resumed from a checkpoint, not from step 0
    train_log = train_log_file.read_text()
    resumed = RESUME.search(train_log)
    assert resumed, (
        f"no resume message in the training log of the retry:\n{tail(train_log, 30)}\n"
        f"the interrupted attempt's training log ended:\n{tail(first_log.read_text(), 30)}"
    )
    step = int(resumed.group(2))
    # (with proctrack/cgroup the trainer never sees the SIGTERM and trains on until SIGKILL after KillWait,
    # possibly to its last checkpoint: then the retry only writes the final policy)
    assert 1 <= step <= TOTAL_STEPS
    if mode == "signal":
        assert saved_before == 0 and steps_before <= step < TOTAL_STEPS  # no periodic one: written on SIGTERM
        first = _slurm_log(wf, jobs[0].job_id)
        assert "died with <Signals.SIGTERM" not in first, (
            "SIGTERM killed the rule's shell instead of reaching only the trainer: start the trainer with "
            f"`exec` in workflow/rules/train.smk (docs/cluster.md, 'Preemption'):\n{tail(first, 30)}"
        )
    else:
        assert step >= saved_before >= 2
    # metrics: every step exactly once (records after the checkpoint were dropped on resume)
    assert [r["step"] for r in read_metrics(paths.train_metrics_file(wf, run))] == list(
        range(1, TOTAL_STEPS + 1)
    )
    assert (paths.policy_dir(wf, run) / "config.json").is_file()


def _keep_log_while_queued(job_id: str, log: Path, tmp_path: Path) -> Path:
    """Copy ``log`` until job ``job_id`` has left the queue; the retry's job then rewrites it.

    The copy is the interrupted attempt's training log, for the failure message.
    """
    kept = tmp_path / "interrupted_attempt.log"
    kept.write_text("")
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["timeout", "-k", "2", "10", "squeue", "-h", "-j", job_id, "-o", "%T"],
            capture_output=True,
            text=True,
        )
        if log.is_file():
            shutil.copyfile(log, kept)
        gone = (out.returncode == 0 and not out.stdout.strip()) or "Invalid job id" in out.stderr
        if gone:  # (a squeue that failed or timed out under load says nothing: ask again)
            break
        time.sleep(0.2)
    return kept


def _slurm_log(wf: Path, job_id: str) -> str:
    """The SLURM log of the interrupted attempt (kept: failed jobs' logs always are)."""
    found = list((wf / ".snakemake" / "slurm_logs" / "rule_train_policy").rglob(f"{job_id}.log"))
    assert found, f"no SLURM log of job {job_id}"
    return found[0].read_text()
