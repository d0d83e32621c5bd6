"""Process-wide torch settings of a pipeline job and its device (one home for them: the CLI, the trainer, the
samplers and the benchmarks)."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import torch

from acerl.errors import BadInputError

__all__ = [
    "FAST_PATHS_ENV",
    "PRECISIONS",
    "RESULT_THREADS",
    "autocast",
    "configure_torch",
    "fast_paths",
    "job_threads",
    "resolve_device",
    "set_fast_paths",
]

PRECISIONS = ("fp32", "bf16")

RESULT_THREADS = 1
"""torch's intra-op threads wherever a job computes a result on the CPU (the SFT of a tiny base, training,
sampling, diagnostics): one, whatever cores the job holds (docs/training.md, "Threads")."""


FAST_PATHS_ENV = "ACERL_LEAN_MODEL"
"""``0`` in the environment turns the fast paths off for every job of the process tree, whatever the config says
(``benchmarks/bench_run.py`` runs whole studies both ways with it; ``1`` or unset leaves ``compute.fast_paths``)."""

_fast_paths = True


def set_fast_paths(on: bool) -> None:
    """This job's ``compute.fast_paths`` (the CLI sets it from the config before a job loads a model)."""
    global _fast_paths
    _fast_paths = bool(on)


def fast_paths() -> bool:
    """Whether this job takes the fast paths (``compute.fast_paths``, on unless set off; ``ACERL_LEAN_MODEL=0``
    turns them off): the lean Llama and tokenizer (:mod:`acerl.models.loading`), :class:`acerl.optim.AdamW`
    and the Llama-family decode step (:mod:`acerl.generate.decoding`). Off, a job runs the plain path they
    optimise: transformers' ``AutoModelForCausalLM``/``AutoTokenizer``, ``torch.optim.AdamW`` with ``LambdaLR``,
    and the model's forward per sampled token (docs/training.md, "Fast paths")."""
    value = os.environ.get(FAST_PATHS_ENV, "1").strip()
    if value not in ("0", "1"):
        raise BadInputError(
            f"{FAST_PATHS_ENV}={value!r}: set it to 1 (compute.fast_paths decides) or 0 (the plain path)"
        )
    return _fast_paths and value == "1"


def job_threads(requested: int, device: str) -> int:
    """The intra-op threads a job on ``device`` (``cpu``, ``cuda...`` or ``auto``) computes its result with.

    On CPU, :data:`RESULT_THREADS`: torch's CPU kernels may split a sum by thread count, and the thread count
    came from the tool (Snakemake sets ``OMP_NUM_THREADS`` to the rule's threads, DVC sets nothing), so
    ``dvc repro`` and ``snakemake`` built different base models. On CUDA the GPU's kernels compute the result
    and ``requested`` (``compute.torch_threads``) only sets how fast the host side feeds them.
    """
    on_gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return requested if on_gpu else RESULT_THREADS


def configure_torch(threads: int) -> None:
    """Use ``threads`` intra-op threads and flush denormal floats to zero on CPU.

    Denormals (|x| < 1.2e-38 in float32) appear in training, e.g. AdamW's second-moment estimates of
    parameters whose gradients are tiny, and every CPU operation touching them runs many times slower: in the
    embedded default an ACE-GRPO update, whose weights had drifted into that range, ran slower than GRPO's on
    the same batch until they were flushed (by how much: ``docs/benchmarks.md``, "Where a local training step
    goes"). Flushing changes values only below
    1.2e-38, far under anything the losses or the reported metrics can resolve; GPUs flush them in most fast
    kernels anyway. The setting is per process and stays on.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    _cache_float_limits()
    torch.set_flush_denormal(True)


def _cache_float_limits() -> None:
    """Compute numpy's ``finfo`` of every float type now, while denormals still exist: numpy caches them, and
    computed after the flush each one warns "The value of the smallest subnormal ... is zero" (eight warnings
    at the start of every training log, from pandas and sklearn imports)."""
    import numpy as np

    for dtype in (np.float16, np.float32, np.float64, np.longdouble):
        np.finfo(dtype)


def autocast(device: torch.device | str, precision: str) -> AbstractContextManager[object]:
    """The forward-pass precision of the local backend (``compute.precision``): ``fp32`` runs everything in
    float32; ``bf16`` runs matrix multiplications under ``torch.autocast(dtype=bfloat16)`` on ``device``'s type
    (CUDA or CPU) while the weights, gradients and AdamW state stay float32 ("fp32 master weights"); log-probs,
    entropies and losses are taken in float32 from the upcast logits. Wrap forwards only, not ``backward()``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)


def resolve_device(device: str) -> str:
    """``'auto'`` -> ``'cuda'`` when a CUDA GPU is visible, else ``'cpu'``; other values are returned unchanged.

    Raises:
        acerl.config.ConfigError: a ``cuda`` device where torch sees no CUDA GPU (the message names
            ``compute.device``; the CLI prints it as a one-line error).
    """
    if device != "auto" and not device.startswith("cuda"):
        return device
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        from acerl.config import ConfigError

        raise ConfigError(
            f"device {device!r} (compute.device) but torch sees no CUDA GPU (torch {torch.__version__}); "
            "set compute.device to 'auto' or 'cpu', or run on a machine with a GPU"
        )
    return device
