"""Limits that fail a stuck program, not a slow one: run a command while watching that it makes progress.

A fixed wall-clock limit fails a correct run on a busy machine (a CI runner, a shared node): the same verl CPU loop
that takes 10 minutes on a quiet 2-core machine took over 25 beside a CPU-bound neighbour. :func:`run_watched`
instead stops a command only when nothing it writes has changed for ``stall_s`` seconds: its own output, or any
file under the folders it names (a run's metrics, checkpoints, logs). A slow program keeps writing and is never
stopped; a stuck one (a deadlock, a worker waiting forever) is stopped, and the error says where it stood. The
lane-level pytest limit of ``scripts/run_tests.sh`` stays as the backstop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

STALL_ENV = "ACERL_TEST_STALL_S"  # seconds without progress before a watched command is stopped
STALL_S = 600.0  # no output and no file written for 10 minutes: the longest quiet stretch seen is ~2 minutes
KILL_GRACE_S = 10.0  # SIGKILL this long after SIGTERM


class Stalled(AssertionError):
    """A watched command made no progress for its stall limit (it was stopped)."""


def stall_limit() -> float:
    """The stall limit in seconds: ``$ACERL_TEST_STALL_S`` or :data:`STALL_S`."""
    value = os.environ.get(STALL_ENV)
    return float(value) if value else STALL_S


def progress_signature(paths: Sequence[Path]) -> tuple[int, int]:
    """(newest mtime in ns, total size) over ``paths`` and every file below the folders among them: changes
    whenever the watched command writes anything there. The command writes while this walks: a folder it removes
    or renames meanwhile (a checkpoint rotated, a step's scratch folder) is skipped, not an error."""
    newest = total = 0
    for path in paths:
        files = [path]
        if path.is_dir():  # os.walk skips a folder that vanishes under it (onerror=None); Path.rglob raised
            files = [Path(top, name) for top, dirs, names in os.walk(path) for name in (*dirs, *names)]
        for f in files:
            with contextlib.suppress(OSError):
                st = f.stat()
                newest = max(newest, st.st_mtime_ns)
                total += st.st_size
    return newest, total


def stop_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the command's process group, then SIGKILL what is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
            return


def _tail(log: Path, chars: int = 3000) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(encoding="utf-8", errors="replace")[-chars:]
    return ""


def watch(
    proc: subprocess.Popen,
    log: Path,
    *,
    watched: Sequence[Path] = (),
    stall_s: float | None = None,
    where: Callable[[], str] | None = None,
    until: Callable[[], bool] | None = None,
    poll_s: float = 1.0,
) -> int | None:
    """Wait for ``proc`` while it makes progress (``log`` or anything under ``watched`` changes). Returns its
    exit code, or ``None`` as soon as ``until()`` holds with the command still running. Raises :class:`Stalled`
    (after stopping the command's process group) when nothing changed for ``stall_s`` seconds; the message
    says how long, ``where()`` the command stood (e.g. its last logged step), and ends with the log's tail."""
    limit = stall_limit() if stall_s is None else stall_s
    paths = [log, *watched]
    last = progress_signature(paths)
    since = time.monotonic()
    while True:
        rc = proc.poll()
        if rc is not None:
            return rc
        if until is not None and until():
            return None
        time.sleep(poll_s)
        now = progress_signature(paths)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > limit:
            stop_group(proc)
            at = f" {where()};" if where is not None else ""
            raise Stalled(
                f"no progress for {limit:.0f} s (nothing written to {log.name} or under "
                f"{', '.join(p.name for p in watched) or 'nothing else'}):{at} stopped "
                f"(raise ${STALL_ENV} if this machine is this slow)\n{_tail(log)}"
            )


def run_watched(
    cmd: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log: Path,
    watched: Sequence[Path] = (),
    stall_s: float | None = None,
    where: Callable[[], str] | None = None,
) -> int:
    """Run ``cmd`` (its own session, stdout+stderr appended to ``log``) under :func:`watch`; its exit code."""
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = watch(proc, log, watched=watched, stall_s=stall_s, where=where)
        except BaseException:
            stop_group(proc)
            raise
    assert rc is not None
    return rc
