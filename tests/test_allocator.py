"""The C allocator's settings of a job (acerl.pipeline.allocator): 16 MiB blocks come from the heap once tuned."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from acerl.pipeline.allocator import _libc

# In a fresh interpreter: tune (or not), then malloc a 16 MiB block and read glibc's count of mmapped blocks
# (mallinfo2().hblks) before and after, and whether the CLI entry point tuned too.
PROBE = """
import ctypes, json, os, sys
from acerl.pipeline.allocator import tune_allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
tuned = tune_allocator()
before = libc.mallinfo2().hblks
block = libc.malloc(16 << 20)
during = libc.mallinfo2().hblks
libc.free(block)
print(json.dumps({"tuned": tuned, "mmapped_blocks_added": during - before}))
"""


def _probe(mode: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "ACERL_MALLOC"}
    if mode is not None:
        env["ACERL_MALLOC"] = mode
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


glibc = pytest.mark.skipif(
    _libc() is None or not hasattr(_libc(), "mallinfo2"),
    reason="needs glibc >= 2.33 (mallopt, mallinfo2); elsewhere tune_allocator sets nothing",
)


@glibc
def test_tuned_allocator_serves_16_mib_from_the_heap():
    assert _probe(None) == {"tuned": True, "mmapped_blocks_added": 0}
    assert _probe("tuned") == {"tuned": True, "mmapped_blocks_added": 0}


@glibc
def test_system_allocator_maps_16_mib_blocks():
    # glibc's own settings: a 16 MiB block is above the starting mmap threshold, so it is mapped on its own
    assert _probe("system") == {"tuned": False, "mmapped_blocks_added": 1}


def test_bad_setting_is_a_one_line_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "acerl", "config", "show"],
        capture_output=True,
        text=True,
        env={**os.environ, "ACERL_MALLOC": "jemalloc"},
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode != 0
    assert "ACERL_MALLOC='jemalloc': expected 'tuned' (the default) or 'system'" in out.stderr
    assert "Traceback" not in out.stderr
