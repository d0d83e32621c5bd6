"""The training node before verl starts Ray (acerl.verl_backend.node): the NVIDIA driver against torch's CUDA, and
a one-node job's own Ray.

The driver is read from ``nvidia-smi``: a stand-in script on PATH plays the GPU node's (a CPU machine has none).
The Ray test starts a real local Ray with the launcher's ``ray_init`` settings, as verl's ``main_ppo`` passes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from acerl.config import Run
from acerl.verl_backend.launcher import merge_overrides, process_env, verl_overrides
from acerl.verl_backend.node import (
    RAY_TMPDIR_MAX,
    DriverTooOldError,
    check_driver,
    driver_version,
    ray_node_env,
    ray_temp_dir,
    remove_ray_temp_dir,
)


def _fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    """A node whose ``nvidia-smi`` reports ``version`` (None: a node without one)."""
    fakebin = tmp_path / "bin"
    fakebin.mkdir(exist_ok=True)
    if version is not None:
        smi = fakebin / "nvidia-smi"
        smi.write_text(
            '#!/bin/sh\n[ "$1 $2" = "--query-gpu=driver_version --format=csv,noheader" ] || exit 9\n'
            f'for i in 1 2; do echo "{version}"; done\n'
        )
        smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(fakebin))
    monkeypatch.delenv("ACERL_DRIVER_CHECK", raising=False)


def test_a_driver_older_than_cuda_13_needs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, "550.54.15")
    with pytest.raises(DriverTooOldError) as err:
        check_driver(cuda="13.0")
    msg = str(err.value)
    assert "\n" not in msg
    assert "550.54.15" in msg and ">= 580" in msg and "CUDA 12 GPU lock" in msg and "docs/cluster.md" in msg
    assert check_driver(cuda="12.8") == "550.54.15"  # a CUDA 12 lock runs on it
    monkeypatch.setenv("ACERL_DRIVER_CHECK", "0")  # a site with cuda-compat
    assert check_driver(cuda="13.0") is None


def test_a_new_enough_driver_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, "580.65.06")
    assert check_driver(cuda="13.0") == "580.65.06"
    _fake_nvidia_smi(tmp_path, monkeypatch, "590.10")
    assert check_driver(cuda="13.0") == "590.10"


def test_the_kernel_module_version_without_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvidia_smi(tmp_path, monkeypatch, None)
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert driver_version(proc) == "570.86.15"
    assert driver_version(tmp_path / "absent") is None
    assert check_driver(cuda="13.0") in (
        None,
        driver_version(),
    )  # no driver on this machine: nothing to check


def test_ray_folder_is_the_jobs_own_and_short(tmp_path: Path) -> None:
    short = ray_temp_dir({"SLURM_JOB_ID": "4242", "TMPDIR": "/tmp/job4242"})  # a node-local scratch folder
    assert short == Path("/tmp/job4242/ray-4242")
    deep = ray_temp_dir(
        {"SLURM_JOB_ID": "4242", "TMPDIR": "/tmp/very/long/node/local/scratch/slurm/job_4242"}
    )
    assert deep == Path(f"/tmp/acerl-ray-{os.getuid()}-4242")
    assert len(str(deep)) <= RAY_TMPDIR_MAX
    assert ray_temp_dir({"SLURM_JOB_ID": "1"}) != ray_temp_dir({"SLURM_JOB_ID": "2"})


def _ray_init_kwargs(hydra_compose, cfg, run: Run, root: Path) -> dict:
    """``ray.init``'s keyword arguments as verl's ``main_ppo`` builds them from the launcher's overrides."""
    overrides = merge_overrides(verl_overrides(cfg, run, root), ["ray_kwargs.ray_init.num_cpus=1"])
    composed = hydra_compose(overrides)
    kwargs = OmegaConf.to_container(composed.ray_kwargs.ray_init)
    assert isinstance(kwargs, dict)
    kwargs.pop("runtime_env")  # verl merges it with its own defaults; not what decides which Ray starts
    return kwargs


@pytest.mark.timeout(300)
def test_one_node_starts_its_own_ray_under_a_dead_ray_address(
    paper_cfg, hydra_compose, tmp_path: Path
) -> None:
    """``RAY_ADDRESS`` in the user's environment (sbatch forwards it) and a leftover ``ray_current_cluster``
    both name a dead cluster: ``ray.init`` with the launcher's settings still starts a local Ray (with
    ``num_cpus`` and no address, it tried to join and raised)."""
    kwargs = _ray_init_kwargs(hydra_compose, paper_cfg, Run("qwen25_math_7b", "grpo", 0), tmp_path)
    assert kwargs["address"] == "local" and kwargs["num_cpus"] == 1
    dead = "127.0.0.1:9"  # the discard port: nothing answers Ray there
    shared = tmp_path / "shared"  # the node's shared /tmp with another job's leftover
    (shared / "ray").mkdir(parents=True)
    (shared / "ray" / "ray_current_cluster").write_text(dead + "\n")
    job = {"SLURM_JOB_ID": str(os.getpid()), "TMPDIR": str(shared)}
    env = process_env(ray_node_env(job), {**os.environ, **job, "RAY_ADDRESS": dead})
    code = (
        "import json, sys, ray\n"
        "ray.init(**json.loads(sys.argv[1]), include_dashboard=False, logging_level='ERROR')\n"
        "print('nodes', len(ray.nodes()), ray.get_runtime_context().gcs_address)\n"
        "ray.shutdown()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kwargs)], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nodes 1" in proc.stdout and dead not in proc.stdout
    assert env["RAY_TMPDIR"].startswith(str(shared)) or env["RAY_TMPDIR"].startswith("/tmp/acerl-ray-")


def test_several_nodes_join_the_allocations_ray(paper_cfg, hydra_compose, tmp_path: Path) -> None:
    from acerl.config import load_config

    repo = Path(__file__).resolve().parents[2]
    two = load_config([repo / "config" / f for f in ("config.yaml", "paper.yaml", "paper_2node.yaml")])
    overrides = verl_overrides(two, Run("qwen3_8b_base", "grpo", 0), tmp_path)
    assert not any(
        o.startswith("+ray_kwargs.ray_init.address") for o in overrides
    )  # ray_on_slurm.sh's cluster


def test_the_jobs_ray_folder_is_removed_and_nothing_else(tmp_path: Path) -> None:
    """After main_ppo: the folder ray_temp_dir named goes (Ray's session logs and sockets); a RAY_TMPDIR of
    another naming (a user's own) and an environment without one are left alone."""
    ours = ray_temp_dir({"SLURM_JOB_ID": "77", "TMPDIR": str(tmp_path)})
    (ours / "ray" / "session_latest").mkdir(parents=True)
    remove_ray_temp_dir({"RAY_TMPDIR": str(ours)})
    assert not ours.exists()
    theirs = tmp_path / "my-ray"
    theirs.mkdir()
    remove_ray_temp_dir({"RAY_TMPDIR": str(theirs)})
    remove_ray_temp_dir({})
    assert theirs.is_dir()
