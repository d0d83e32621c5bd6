"""Running ``acerl`` as a user the file permissions bind: the tests of an unwritable work directory.

Root ignores permission bits (the capabilities ``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH`` and ``CAP_FOWNER``).
A test run as root drops them from the command's capability bounding set before it starts, so that the
permissions of a folder refuse it as they refuse any other user; a test run as a user needs nothing."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

PR_CAPBSET_DROP = 24  # <linux/prctl.h>
DAC_CAPABILITIES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER (<linux/capability.h>)


def _drop_dac_capabilities() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in DAC_CAPABILITIES:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def run_acerl_bound_by_permissions(
    *argv: str, cwd: Path, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m acerl <argv>`` in ``cwd``, bound by the permission bits even when the tests run as root."""
    return subprocess.run(
        [sys.executable, "-m", "acerl", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_drop_dac_capabilities if os.geteuid() == 0 else None,
    )
