"""``make paper-canary`` end to end on the local SLURM cluster: the canary's targets submitted through the
installed ``slurm`` profile (one ACE-DAPO run, 3 steps, a checkpoint at each, asking SLURM for its GPUs with
``--gres`` as on a GPU cluster), trained by verl 0.9.1's own loop through the launcher inside the SLURM job
(with the CPU stand-ins of ``tests/fakes/verl_cpu_loop.py``: what a CPU cannot run), then ``acerl canary check``
on the metrics that job wrote. The checks are the ones a user reads before the grid (docs/cluster.md, "Canary");
every one must find its metric in the run's log under the name it looks for, and pass.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from support.slurm_helpers import (
    SNAKEMAKE,
    LocalCluster,
    copy_workflow,
    run_bounded,
    run_id_of,
    slurm_jobs,
    snakemake_env,
    tail,
)

from acerl.config import load_config
from acerl.pipeline import paths

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.verl]

if importlib.util.find_spec("verl") is None or importlib.util.find_spec("transfer_queue") is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("verl 0.9.1 and TransferQueue must be installed in CI (pip install -e .[verl])")
    pytest.skip("verl / TransferQueue not installed (pip install -e .[verl])", allow_module_level=True)

from fakes import verl_cpu_loop  # noqa: E402
from support.watchdog import run_watched  # noqa: E402

ACERL = Path(sys.executable).parent / "acerl"

# config/canary.yaml for the CI-scale model: one ACE-DAPO run, 3 steps, a checkpoint at each, a seed of no grid
CANARY = {
    "study": {
        "main": {"models": ["tiny"], "methods": ["ace_dapo"], "seeds": [9000], "include_base": False},
        "alpha_sweep": None,
        "ablation": None,
        "diagnostics": None,
    },
    "models": {"tiny": {"train": {"total_steps": 3, "save_every": 1}}},
}


def test_canary_trains_through_slurm_and_every_check_reads_its_metric(
    local_cluster: LocalCluster, prepared_inputs: Path, tmp_path: Path
) -> None:
    wf = copy_workflow(tmp_path / "wf")
    for folder in ("data", "models"):
        shutil.copytree(prepared_inputs / folder, wf / folder)
    shutil.copy2(verl_cpu_loop.write_overlay(tmp_path), wf / "config" / "verl_cpu.yaml")
    (wf / "config" / "canary_cpu.yaml").write_text(yaml.safe_dump(CANARY), encoding="utf-8")
    configs = ["config/test.yaml", "config/verl_cpu.yaml", "config/canary_cpu.yaml"]
    config_args = [a for c in configs for a in ("--config", c)]
    cfg = load_config([wf / "config" / "config.yaml", *(wf / c for c in configs)])
    (run,) = cfg.runs()
    assert cfg.resources("train_policy", run.model).gpus == verl_cpu_loop.RANKS

    env = snakemake_env(
        local_cluster.xdg_config_home, {**verl_cpu_loop.cpu_env(tmp_path), "HF_HUB_OFFLINE": "1"}
    )
    targets = run_bounded([str(ACERL), "canary", "targets", *config_args], cwd=wf, env=env, timeout_s=120)
    assert targets.returncode == 0, targets.stdout
    log = tmp_path / "snakemake.log"
    cmd = [str(SNAKEMAKE), "--profile", "slurm", *targets.stdout.split(), "--configfile", *configs]
    # no wall-clock limit: the verl data, then the 3-step training job (4-6 minutes on two quiet cores, 19 beside
    # a busy neighbour), stopped only if nothing it writes changes for the stall limit (support.watchdog)
    rollout_log = Path(verl_cpu_loop.cpu_env(tmp_path)[verl_cpu_loop.ROLLOUT_LOG_ENV])
    rc = run_watched(
        cmd, cwd=wf, env=env, log=log, watched=[wf / "logs", wf / "runs", wf / ".snakemake", rollout_log]
    )
    stdout = log.read_text(encoding="utf-8", errors="replace")
    train_log = wf / "logs" / "train_policy" / run.model / run.method / f"seed{run.seed}.log"
    assert rc == 0, (
        f"{tail(stdout)}\n--- training log:\n{tail(train_log.read_text()) if train_log.is_file() else ''}"
    )

    # the training ran as a SLURM job that asked for the config's GPUs, and completed
    jobs = [j for j in slurm_jobs(local_cluster, run_id_of(stdout)) if j.rule == "train_policy"]
    assert [j.state for j in jobs] == ["COMPLETED"], jobs
    detail = run_bounded(["scontrol", "show", "job", jobs[0].job_id], cwd=wf, env=env, timeout_s=30).stdout
    assert f"TresPerNode=gres:gpu:{verl_cpu_loop.RANKS}" in detail, detail

    check = run_bounded([str(ACERL), "canary", "check", *config_args], cwd=wf, env=env, timeout_s=120)
    lines = check.stdout.strip().splitlines()
    names = {
        "steps",
        "peak GPU memory",
        "response-length clip ratio, step 1",
        "ace/* every step",
        "c_i after step 1",
        "step time",
        "rollout/train probability gap, step 1",
        "rollout/train gap after weight syncs",
    }
    for name in names:
        assert any(f" {name} " in line for line in lines), (name, check.stdout)
    assert not [line for line in lines if "missing" in line], check.stdout
    assert check.returncode == 0 and lines[-1] == f"all {len(names)} checks passed", check.stdout
    assert sorted(int(s) for s in _steps(paths.train_metrics_file(wf, run))) == [1, 2, 3]


def _steps(metrics: Path) -> list[int]:
    import json

    return [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()]
