"""``make paper-canary``'s submission, without a cluster: the installed site profile, the canary's targets from
``acerl canary targets``, and Snakemake's dry run of them (the jobs and what each asks SLURM for)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.slurm_helpers import (
    INSTALLER,
    REPO,
    SNAKEMAKE,
    copy_workflow,
    parse_dry_run,
    run_bounded,
    snakemake_env,
    tail,
)

from acerl.config import load_config

ACERL = Path(sys.executable).parent / "acerl"
PAPER, CANARY = "config/paper.yaml", "config/canary.yaml"


def test_canary_submits_one_three_step_training_job_per_model(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACERL_SLURM_")}
    installed = subprocess.run(
        ["bash", str(INSTALLER), "--partition", "gpu", "--account", "lab", "--status-command", "sacct"],
        env={**env, "XDG_CONFIG_HOME": str(xdg)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    wf = copy_workflow(tmp_path / "wf")
    make = subprocess.run(
        ["make", "-n", "paper-canary"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "acerl canary check --config config/paper.yaml --config config/canary.yaml" in make.stdout
    targets = subprocess.run(
        [str(ACERL), "canary", "targets", "--config", PAPER, "--config", CANARY],
        cwd=wf,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    proc = run_bounded(
        [str(SNAKEMAKE), "--profile", "slurm", "-n", *targets, "--configfile", PAPER, CANARY],
        cwd=wf,
        env=snakemake_env(xdg),
        timeout_s=300,
    )
    assert proc.returncode == 0, tail(proc.stdout)
    jobs = parse_dry_run(proc.stdout)
    train = [j for j in jobs if j.rule == "train_policy"]
    cfg = load_config([REPO / "config" / "config.yaml", REPO / PAPER, REPO / CANARY])
    assert sorted(
        (j.wildcards["model"], j.wildcards["method"], j.wildcards["seed"]) for j in train
    ) == sorted((m, "ace_dapo", "9000") for m in cfg.study.main.models)
    assert {j.rule for j in jobs} <= {"train_policy", "prepare_data", "prepare_base", "prepare_verl_data"}
    for job in train:
        want = cfg.resources("train_policy", job.wildcards["model"])
        assert int(job.resources["runtime"]) == want.runtime == 240
        assert int(job.resources["nodes"]) == want.nodes and int(job.resources["gpus"]) == 8
        assert (
            job.resources["slurm_extra"] == "--signal=TERM@300" and job.resources["slurm_partition"] == "gpu"
        )
