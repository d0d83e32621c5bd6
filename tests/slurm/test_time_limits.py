"""Each rule's ``runtime`` against its partition's ``MaxTime`` before submitting (``acerl profile slurm --config``).

The parser and the comparison run on recorded ``scontrol show partition`` output; the CLI runs with a stand-in
``scontrol`` on PATH that prints such a record (as ``test_profile.py``'s stand-in ``sbatch``). The ``slurm``
test gives the local cluster a partition with a MaxTime and checks the refusal against the real ``scontrol``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.slurm_helpers import INSTALLER, REPO

from acerl.config import load_config
from acerl.pipeline.cluster import parse_slurm_time, partition_max_time, profile_partitions, time_limit_errors

ACERL = Path(sys.executable).parent / "acerl"
PAPER = [REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"]

# `scontrol show partition gpu` on Slurm 22.05 (recorded; the node names and counts of one site)
SHOW_PARTITION = """PartitionName=gpu
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=NO QoS=N/A
   DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=gpu[001-032]
   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO
   OverTimeLimit=NONE PreemptMode=OFF
   State=UP TotalCPUs=4096 TotalNodes=32 SelectTypeParameters=NONE
   JobDefaults=(null)
   DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED
   TRES=cpu=4096,mem=32000000M,node=32,billing=4096,gres/gpu=256
"""


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("2-00:00:00", 2880),
        ("7-00:00:00", 10080),
        ("1-12", 2160),
        ("1-12:30", 2190),
        ("48:00:00", 2880),
        ("30:00", 30),
        ("30:01", 31),
        ("90", 90),
        ("UNLIMITED", None),
        ("INFINITE", None),
    ],
)
def test_slurm_times(text: str, minutes: int | None) -> None:
    assert parse_slurm_time(text) == minutes


def test_max_time_from_scontrol() -> None:
    assert partition_max_time(SHOW_PARTITION) == 2880
    assert partition_max_time(SHOW_PARTITION.replace("MaxTime=2-00:00:00", "MaxTime=UNLIMITED")) is None


def test_the_longest_training_rule_over_the_limit_is_named_first() -> None:
    cfg = load_config(PAPER)
    limits = {"gpu": 2880, "long": None}
    errors = time_limit_errors(cfg, "gpu", {}, limits.__getitem__)
    longest = max(cfg.resources("train_policy", m).runtime for m in cfg.models)
    assert errors and errors[0].startswith(
        f"train_policy ({_model_with(cfg, longest)}) asks for {longest} min"
    )
    assert "partition gpu allows 2880 min (48 h) (MaxTime)" in errors[0]
    assert f"compute.model_resources.{_model_with(cfg, longest)}.train_policy.runtime <= 2880" in errors[0]
    assert all(e.startswith("train_policy") for e in errors)  # sampling and the rest fit 48 h
    assert time_limit_errors(cfg, "gpu", {"train_policy": "long"}, limits.__getitem__) == []
    assert time_limit_errors(cfg, "long", {}, limits.__getitem__) == []


def _model_with(cfg, runtime: int) -> str:
    return next(m for m in cfg.models if cfg.resources("train_policy", m).runtime == runtime)


def test_profile_partitions_default_and_per_rule(tmp_path: Path) -> None:
    profile = tmp_path / "config.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "default-resources": {"slurm_partition": "gpu", "slurm_account": "lab"},
                "set-resources": {
                    "train_policy": {"slurm_partition": "long", "slurm_extra": "'--signal=TERM@300'"}
                },
            }
        )
    )
    assert profile_partitions(profile) == ("gpu", {"train_policy": "long"})
    profile.write_text(yaml.safe_dump({"default-resources": ["slurm_partition=gpu", "mem_mb=1000"]}))
    assert profile_partitions(profile) == ("gpu", {})


def _install_profile(xdg: Path, partition: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACERL_SLURM_")}
    subprocess.run(
        ["bash", str(INSTALLER), "--partition", partition, "--no-account", "--status-command", "squeue"],
        env={**env, "XDG_CONFIG_HOME": str(xdg)},
        capture_output=True,
        check=True,
        timeout=60,
    )


def _acerl_profile(xdg: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(xdg)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [str(ACERL), "profile", "slurm", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_acerl_profile_refuses_a_runtime_over_the_partitions_max_time(tmp_path: Path) -> None:
    """``acerl profile slurm --config config/paper.yaml`` (``make paper``'s first step) with a stand-in
    ``scontrol`` answering the recorded 48-hour partition: one line naming the rule, the partition and the fix."""
    _install_profile(tmp_path / "xdg", "gpu")
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    record = tmp_path / "show_partition.txt"
    record.write_text(SHOW_PARTITION)
    scontrol = fakebin / "scontrol"
    scontrol.write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "show partition gpu" ] || exit 1\ncat {record}\n')
    scontrol.chmod(0o755)
    path = f"{fakebin}:{os.environ['PATH']}"
    proc = _acerl_profile(tmp_path / "xdg", "--config", "config/paper.yaml", path=path)
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("acerl ")]
    assert line.startswith("acerl profile: config error: train_policy (") and "partition gpu allows" in line
    assert "runtime <= 2880" in line and "install_slurm_profile.sh --partition" in line
    assert _acerl_profile(tmp_path / "xdg", path=path).returncode == 0  # no --config: the profile only
    record.write_text(SHOW_PARTITION.replace("MaxTime=2-00:00:00", "MaxTime=7-00:00:00"))
    ok = _acerl_profile(tmp_path / "xdg", "--config", "config/paper.yaml", path=path)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.slurm
def test_the_local_clusters_partition_limit_refuses_a_long_rule(local_cluster, tmp_path: Path) -> None:
    """A partition of the local cluster with MaxTime=60: the real ``scontrol`` answers, and a rule asking for
    more is refused before submission; the cluster's own partitions are left as they are."""
    if os.geteuid() != 0:
        pytest.skip("creating a partition needs root (scripts/slurm_local.sh runs as root)")
    name = f"acerl_short_{os.getpid()}"
    nodes = subprocess.run(
        ["timeout", "-k", "2", "10", "sinfo", "-h", "-N", "-o", "%N"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    created = subprocess.run(
        [
            "timeout",
            "-k",
            "2",
            "20",
            "scontrol",
            "create",
            f"PartitionName={name}",
            f"Nodes={nodes[0]}",
            "MaxTime=60",
        ],
        capture_output=True,
        text=True,
    )
    assert created.returncode == 0, created.stderr
    try:
        _install_profile(tmp_path / "xdg", name)
        fits = _acerl_profile(tmp_path / "xdg", "--config", "config/test.yaml")
        assert fits.returncode == 0, fits.stderr  # config/config.yaml's 30-minute jobs fit
        long = _acerl_profile(
            tmp_path / "xdg",
            "--config",
            "config/test.yaml",
            "--set",
            "compute.resources.train_policy.runtime=90",
        )
        assert long.returncode == 2, long.stderr
        (line,) = [ln for ln in long.stderr.splitlines() if ln.startswith("acerl ")]
        assert f"train_policy asks for 90 min (1.5 h) but partition {name} allows 60 min (1 h)" in line
        assert "compute.resources.train_policy.runtime <= 60" in line
    finally:
        subprocess.run(
            ["timeout", "-k", "2", "20", "scontrol", "delete", f"PartitionName={name}"], capture_output=True
        )
