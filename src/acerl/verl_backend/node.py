"""The training node before verl starts Ray: its NVIDIA driver against the CUDA of the installed torch, and the
environment of a one-node Ray of the job's own (docs/cluster.md, "The training node").

- :func:`check_driver`: torch's CUDA 13 wheels (the GPU lock) need an NVIDIA driver >= 580, CUDA 12 wheels >= 525
  (NVIDIA's minimum for each major version). An older driver stops every verl worker at its first CUDA call, after
  the model load; this refuses it at once with a one-line error.
- :func:`ray_node_env`: a one-node job starts its own Ray (``ray_init.address=local``, so neither ``RAY_ADDRESS``
  nor a leftover ``<tmp>/ray/ray_current_cluster`` makes it join another cluster) in a temporary folder of the job
  (``RAY_TMPDIR``), short enough for Ray's sockets; :func:`remove_ray_temp_dir` removes that folder after the job.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from acerl.errors import UserError

logger = logging.getLogger(__name__)

__all__ = [
    "DRIVER_CHECK_ENV",
    "MIN_DRIVER",
    "RAY_TMPDIR_MAX",
    "DriverTooOldError",
    "check_driver",
    "driver_version",
    "ray_node_env",
    "ray_temp_dir",
    "remove_ray_temp_dir",
]

MIN_DRIVER = {13: 580, 12: 525}
"""The oldest NVIDIA driver (major version) each CUDA major version runs on (NVIDIA's CUDA compatibility table)."""
DRIVER_CHECK_ENV = (
    "ACERL_DRIVER_CHECK"  # "0" skips the check (a site with CUDA forward compatibility, cuda-compat)
)
PROC_VERSION = Path("/proc/driver/nvidia/version")

RAY_TMPDIR_MAX = 36
"""Longest ``RAY_TMPDIR``: Ray's sockets live at ``<RAY_TMPDIR>/ray/session_<date>_<time>_<pid>/sockets/plasma_store``,
about 70 characters more, and a Unix socket path holds at most 107."""


class DriverTooOldError(UserError):
    """The node's NVIDIA driver is older than the installed torch's CUDA needs."""


def driver_version(proc_version: Path = PROC_VERSION) -> str | None:
    """The NVIDIA driver version of this node (``580.65.06``): ``nvidia-smi``'s, else the kernel module's; None
    when neither is there (no NVIDIA driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        found = re.search(r"\d+(\.\d+)+", out)
        if found:
            return found.group(0)
    if proc_version.is_file():
        found = re.search(
            r"Kernel Module\s+(?:for \S+\s+)?(\d+(\.\d+)+)", proc_version.read_text(errors="replace")
        )
        if found:
            return found.group(1)
    return None


def check_driver(cuda: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """Refuse a node whose NVIDIA driver is older than ``cuda`` (default: the installed torch's CUDA) needs.

    Returns the driver version found (None: no driver, or a torch without CUDA; nothing to check).
    ``ACERL_DRIVER_CHECK=0`` skips the check."""
    env = os.environ if environ is None else environ
    if env.get(DRIVER_CHECK_ENV) == "0":
        return None
    if cuda is None:
        import torch

        cuda = torch.version.cuda
    if not cuda:
        return None
    major = int(cuda.split(".")[0])
    need = MIN_DRIVER.get(major)
    found = driver_version()
    if need is None or found is None:
        if found is None:
            logger.warning(
                "no NVIDIA driver found (nvidia-smi, %s): the driver check is skipped", PROC_VERSION
            )
        return found
    if int(found.split(".")[0]) < need:
        raise DriverTooOldError(
            f"NVIDIA driver {found} on this node is older than {need}, the minimum for the installed torch's "
            f"CUDA {cuda}: run on nodes with driver >= {need}, or install a CUDA 12 GPU lock (docs/cluster.md, "
            f'"The training node"); {DRIVER_CHECK_ENV}=0 skips this check where cuda-compat provides CUDA {major}'
        )
    return found


def ray_temp_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This job's own Ray folder: ``<job scratch>/ray-<job>`` where the job's ``TMPDIR`` leaves it short enough
    (:data:`RAY_TMPDIR_MAX`), else ``/tmp/acerl-ray-<uid>-<job>``. ``<job>`` is ``SLURM_JOB_ID`` (the launcher's
    pid outside SLURM), so two jobs or two users on one node never share a Ray folder."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or str(os.getpid())
    scratch = env.get("TMPDIR")
    if scratch and len(os.path.join(scratch, f"ray-{job}")) <= RAY_TMPDIR_MAX:
        return Path(scratch) / f"ray-{job}"
    return Path("/tmp") / f"acerl-ray-{os.getuid()}-{job}"


def remove_ray_temp_dir(env: Mapping[str, str]) -> None:
    """Remove the job's own Ray folder (``env["RAY_TMPDIR"]``, made by :func:`ray_node_env`) once ``main_ppo`` has
    exited: Ray leaves its session logs and sockets there (about 2 MB a launch), and a node's ``/tmp`` would fill
    with one folder per job. Only a folder of :func:`ray_temp_dir`'s naming is removed, never a user's own."""
    folder = env.get("RAY_TMPDIR")
    if not folder:
        return
    path = Path(folder)
    if path.name.startswith(("acerl-ray-", "ray-")):
        shutil.rmtree(path, ignore_errors=True)


def ray_node_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of a one-node verl job: ``RAY_TMPDIR`` its own folder (:func:`ray_temp_dir`; Ray makes it)."""
    return {"RAY_TMPDIR": str(ray_temp_dir(environ))}
