"""The C allocator's settings of a pipeline job (glibc ``malloc``), set once at the start of every ``acerl`` command.

A CPU job allocates and frees tensors of a few hundred KiB to tens of MiB on every forward, decode step and
optimizer step. glibc serves a block above its mmap threshold (128 KiB at start, raised dynamically up to
32 MiB) with a fresh ``mmap`` and returns it with ``munmap`` on free, and it gives the top of the heap back to
the kernel once more than the trim threshold is free there: either way the next allocation of the same size
starts from new pages, which the kernel zeroes on first touch. In the embedded default part of every job's CPU
time went to the kernel for this (the measured share: docs/benchmarks.md, "Allocator"). With a fixed mmap
threshold of :data:`MMAP_THRESHOLD` and a trim threshold of :data:`TRIM_THRESHOLD`,
blocks up to 64 MiB come from the heap and are reused after ``free`` (docs/benchmarks.md, "Allocator").

Nothing the job computes changes (same operations, same inputs, different addresses). What it costs: up to
:data:`TRIM_THRESHOLD` of freed memory stays mapped in the process, and blocks above :data:`MMAP_THRESHOLD`
(a large model's weights on the host) are still mapped and unmapped one by one, so a paper-scale job's host
memory stays what it was. ``ACERL_MALLOC=system`` leaves glibc's defaults (for comparisons); on a C library
without ``mallopt`` (musl, macOS) nothing is set.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

from acerl.errors import BadInputError

__all__ = ["ENV", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_allocator"]

ENV = "ACERL_MALLOC"
MMAP_THRESHOLD = 64 << 20  # blocks up to this size come from the heap and are reused
TRIM_THRESHOLD = 256 << 20  # free memory kept at the top of the heap before it is returned to the kernel
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    """The C library's symbols as this process has them loaded (no ``find_library``: it may run ``ldconfig``)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def tune_allocator(environ: Mapping[str, str] | None = None) -> bool:
    """Set glibc's mmap and trim thresholds for this process (see the module docstring); True when both were set.

    ``ACERL_MALLOC`` in ``environ`` (default ``os.environ``): ``tuned`` (default) or ``system`` (change
    nothing). Any other value raises :class:`acerl.errors.BadInputError` naming the variable and its values.
    """
    mode = (os.environ if environ is None else environ).get(ENV, "tuned")
    if mode not in ("tuned", "system"):
        raise BadInputError(
            f"{ENV}={mode!r}: expected 'tuned' (the default) or 'system' (glibc's own settings)"
        )
    if mode == "system":
        return False
    libc = _libc()
    if libc is None:
        return False
    # mmap threshold first: setting either turns off glibc's dynamic adjustment of both
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
