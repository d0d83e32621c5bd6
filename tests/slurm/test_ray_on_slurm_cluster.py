"""scripts/ray_on_slurm.sh on the local SLURM cluster with a CPU-only Ray: the verl launcher's multi-node path
(head started through ``srun``, nodes waited for, the command run on the head with ``RAY_ADDRESS``, background
steps stopped) as far as it goes without GPUs. The GPU request of the ``ray start`` steps is covered by the
dry-run tests (tests/verl_backend/test_ray_on_slurm.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm
pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]


def test_ray_cluster_over_slurm_runs_the_command(local_cluster, tmp_path: Path) -> None:
    ray_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        _run_probe(ray_dir, tmp_path)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def _run_probe(ray_dir: Path, tmp_path: Path) -> None:
    probe = (
        "import ray; ray.init(address='auto', logging_level='ERROR'); "
        "r = ray.cluster_resources(); print('RAY', int(r.get('CPU', 0)), int(r.get('GPU', 0)), len(ray.nodes())); "
        "import os; print('AUTH', os.environ.get('RAY_AUTH_MODE'), len(os.environ.get('RAY_AUTH_TOKEN', '')))"
    )
    # A ~/.ray/auth_token left by an earlier local ray.init() (Ray 2.60 writes one): the head then turns token
    # authentication on by itself while a driver connecting with address='auto' does not, and nothing joins.
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("0" * 64)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")},
        "HOME": str(home),
        "RAY_NUM_CPUS": "1",
        "RAY_NUM_GPUS": "0",
        "RAY_PORT": "6391",
        "ACERL_RAY_WAIT": "120",
        "RAY_TMPDIR": str(ray_dir),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    cmd = ["salloc", "-N1", "-n1", "-c2", "--time=5", "bash", str(REPO / "scripts" / "ray_on_slurm.sh"), "--"]
    log = tmp_path / "ray_on_slurm.log"  # a file, not a pipe: Ray's daemons inherit the step's stdout
    with log.open("w") as fh:
        proc = subprocess.run(
            [*cmd, sys.executable, "-c", probe], stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=300
        )
    out = log.read_text()
    assert proc.returncode == 0, out[-4000:]
    assert "ray_on_slurm: 1 node(s) alive" in out
    assert re.search(r"^RAY 1 0 1$", out, re.M), out[-4000:]  # the command ran against the cluster
    # the script gives head, probe and command one fresh token of the job's own
    assert re.search(r"^AUTH token 64$", out, re.M), out[-4000:]
    leftover = subprocess.run(["pgrep", "-f", str(ray_dir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "ray processes survived the allocation"
