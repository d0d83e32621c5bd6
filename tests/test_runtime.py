"""Process-wide torch settings of a job: threads and flushed denormals."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def test_configure_torch_sets_threads_and_flushes_denormals():
    code = (
        "import torch\n"
        "from acerl.pipeline.runtime import configure_torch\n"
        "tiny = torch.tensor([1e-39], dtype=torch.float32)\n"
        "assert tiny.item() != 0.0  # a denormal before\n"
        "configure_torch(2)\n"
        "assert torch.get_num_threads() == 2\n"
        "assert (tiny * 1.0).item() == 0.0  # flushed by arithmetic after\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_configure_torch_rejects_zero_threads():
    from acerl.pipeline.runtime import configure_torch

    with pytest.raises(ValueError, match="threads must be >= 1"):
        configure_torch(0)


def test_flushing_denormals_leaves_numpy_s_float_limits_without_warnings() -> None:
    """numpy computed its finfo after the flush and warned "smallest subnormal ... is zero" eight times at the
    start of every training log; the limits are now computed first (and the flush still happens)."""
    code = (
        "import warnings, torch\n"
        "warnings.simplefilter('error')\n"
        "from acerl.pipeline.runtime import configure_torch\n"
        "configure_torch(1)\n"
        "import numpy as np\n"
        "for t in (np.float16, np.float32, np.float64, np.longdouble, float, np.dtype('float32')):\n"
        "    str(np.finfo(t)); np.finfo(t).smallest_subnormal\n"
        "print(torch.tensor([1e-40], dtype=torch.float32).mul(1.0).item())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "0.0"  # denormals are flushed


@pytest.mark.parametrize(
    ("device", "expected"),
    [("cpu", 1), ("cuda", 4), ("cuda:1", 4), ("auto", 4 if torch.cuda.is_available() else 1)],
)
def test_a_cpu_job_computes_with_one_thread_whatever_it_asks(device, expected) -> None:
    """On CPU the thread count must not decide a result (docs/training.md, "Threads"); on a GPU it is a speed knob."""
    from acerl.pipeline.runtime import RESULT_THREADS, job_threads

    assert RESULT_THREADS == 1
    assert job_threads(4, device) == expected
