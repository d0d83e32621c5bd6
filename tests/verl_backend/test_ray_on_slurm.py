"""scripts/ray_on_slurm.sh: node list -> one head + one worker per other node (dry run, fake scontrol)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ray_on_slurm.sh"


def _run(tmp_path: Path, hosts: list[str], *cmd: str, **env: str) -> subprocess.CompletedProcess:
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    fakebin = tmp_path / "bin"
    fakebin.mkdir(exist_ok=True)
    scontrol = fakebin / "scontrol"
    listing = "\\n".join(hosts)
    scontrol.write_text(
        '#!/usr/bin/env bash\n[[ "$1 $2" == "show hostnames" ]] || exit 3\n'
        f'[[ "$3" == "$EXPECTED_NODELIST" ]] || exit 4\nprintf "{listing}\\n"\n'
    )
    scontrol.chmod(0o755)
    full_env = {
        "PATH": f"{fakebin}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "gpu[1-2],big7",
        "EXPECTED_NODELIST": "gpu[1-2],big7",
        "ACERL_DRY_RUN": "1",
        "RAY_NUM_CPUS": "64",
        "RAY_NUM_GPUS": "8",
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), "--", *cmd], capture_output=True, text=True, env=full_env, timeout=60
    )


def test_head_and_one_worker_per_other_node(tmp_path: Path) -> None:
    proc = _run(tmp_path, ["gpu1", "gpu2", "big7"], "python", "-m", "verl.trainer.main_ppo", "a=b c")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert len(lines) == 4
    head, w1, w2, train = lines
    assert (
        "-w gpu1 --gres=gpu:8 env -u ROCR_VISIBLE_DEVICES ray start --head --node-ip-address=gpu1 --port=6379 --num-cpus=64 --num-gpus=8 "
        "--block" in head
    )
    assert (
        "-w gpu2 --gres=gpu:8 env -u ROCR_VISIBLE_DEVICES ray start --address=gpu1:6379 --num-cpus=64 --num-gpus=8 --block"
        in w1
    )
    assert "-w big7 --gres=gpu:8 env -u ROCR_VISIBLE_DEVICES ray start --address=gpu1:6379" in w2
    assert all(line.startswith("+ srun --nodes=1 --ntasks=1") for line in lines)
    assert train.endswith(r"-w gpu1 --export=ALL python -m verl.trainer.main_ppo a=b\ c")
    assert "3 node(s): gpu1 gpu2 big7" in proc.stderr


def test_gpu_request_of_the_ray_steps(tmp_path: Path) -> None:
    """Each ``ray start`` step asks Slurm for its node's GPUs (a step without them sees none), or what
    ``RAY_SRUN_GPU_FLAG`` says; a CPU-only cluster asks for none."""
    site = _run(tmp_path, ["gpu1", "gpu2"], "true", RAY_SRUN_GPU_FLAG="--gpus-per-node=8")
    cpu = _run(tmp_path, ["gpu1", "gpu2"], "true", RAY_NUM_GPUS="0")
    assert site.returncode == 0 and cpu.returncode == 0, (site.stderr, cpu.stderr)
    starts = [line for line in site.stdout.splitlines() if "ray start" in line]
    assert len(starts) == 2 and all(
        "--overlap -w gpu" in s and "--gpus-per-node=8 env -u ROCR_VISIBLE_DEVICES ray start" in s
        for s in starts
    )
    assert not any("--gres" in line or "--gpus-per-node" in line for line in cpu.stdout.splitlines())


def test_single_node_allocation(tmp_path: Path) -> None:
    proc = _run(tmp_path, ["solo"], "true", SLURM_JOB_NODELIST="solo", EXPECTED_NODELIST="solo")
    assert proc.returncode == 0, proc.stderr
    assert len([line for line in proc.stdout.splitlines() if line.startswith("+ ")]) == 2


def test_errors(tmp_path: Path) -> None:
    no_slurm = _run(tmp_path, ["a"], "true", SLURM_JOB_NODELIST="")
    assert no_slurm.returncode != 0 and "SLURM_JOB_NODELIST" in no_slurm.stderr
    too_few = _run(tmp_path, ["a", "b"], "true", ACERL_EXPECT_NODES="3")
    assert too_few.returncode != 0 and "need 3 nodes but the allocation has 2" in too_few.stderr
    no_cmd = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert no_cmd.returncode == 2 and "usage" in no_cmd.stderr


def test_head_address_override(tmp_path: Path) -> None:
    """ACERL_RAY_HEAD_IP: the head listens and the workers join on the given address (the fast network's),
    not the first address of ``hostname --ip-address``."""
    proc = _run(tmp_path, ["gpu1", "gpu2"], "true", ACERL_RAY_HEAD_IP="10.40.0.7")
    assert proc.returncode == 0, proc.stderr
    head, worker, _ = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert "--head --node-ip-address=10.40.0.7 --port=6379" in head
    assert "ray start --address=10.40.0.7:6379" in worker
    assert "head gpu1 (10.40.0.7:6379)" in proc.stderr
