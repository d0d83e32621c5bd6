"""``make -n TARGET`` as a user types it: the recipe's command lines, whatever make the tests run under."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# what a parent make hands its children: under `make test` a nested make prints "make[1]: Entering directory ..."
PARENT_MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def dry_run(target: str, cwd: Path) -> list[str]:
    """The lines ``make -n TARGET`` prints in ``cwd``, run as a top-level make (no parent make's flags)."""
    env = {k: v for k, v in os.environ.items() if k not in PARENT_MAKE_VARIABLES}
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()
