"""One trainer per run: an exclusive lock on ``<run>/train.lock`` held while ``acerl train`` works on the run.

Two ``acerl train`` of the same (model, method, seed) would write the same checkpoints and ``final/``; the second
one to start gets a :class:`RunLockedError` naming the run and the process that holds the lock. The lock is a
``flock`` on the open file, so the kernel releases it when its process ends, however it ends (SIGKILL
included): a stale lock file never blocks a rerun.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from acerl.config import Run
from acerl.errors import UserError
from acerl.pipeline import paths

__all__ = ["RunLockedError", "run_lock"]


class RunLockedError(UserError):
    """Another process is training the same run. Exit 75 (``EX_TEMPFAIL``): try again once it has stopped."""

    exit_code = 75
    kind = "run locked"


@contextmanager
def run_lock(root: Path | str, run: Run) -> Iterator[Path]:
    """Hold the run's lock for the block (creating the run folder); yields the lock file. Raises
    :class:`RunLockedError` at once when another process holds it."""
    file = paths.run_lock_file(root, run)
    file.parent.mkdir(parents=True, exist_ok=True)
    # written in place, not through acerl.pipeline.io's atomic rename: a new inode would not be the file that is locked
    fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunLockedError(
                f"run {run.id} is being trained by another process (pid {holder}, lock file {file}): wait for "
                f"it to finish, or stop it (kill {holder}) and rerun the same command, which resumes"
            ) from None
        mine = f"{os.getpid()}\n".encode()
        if os.pread(fd, 32, 0) != mine:  # the holder's pid, for the message another process prints
            os.ftruncate(fd, 0)
            os.pwrite(fd, mine, 0)
        yield file
    finally:
        os.close(fd)  # releases the lock
