"""Process-wide torch settings of a pipeline job (one home for them: the CLI, the trainer and the benchmarks)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

__all__ = ["PRECISIONS", "autocast", "configure_torch"]

PRECISIONS = ("fp32", "bf16")


def configure_torch(threads: int) -> None:
    """Use ``threads`` intra-op threads and flush denormal floats to zero on CPU.

    Denormals (|x| < 1.2e-38 in float32) appear in training, e.g. AdamW's second-moment estimates of
    parameters whose gradients are tiny, and every CPU operation touching them runs many times slower: in the
    embedded default an ACE-GRPO update, whose weights had drifted into that range, ran 3% slower than GRPO's
    on the same batch until they were flushed (``docs/benchmarks.md``). Flushing changes values only below
    1.2e-38, far under anything the losses or the reported metrics can resolve; GPUs flush them in most fast
    kernels anyway. The setting is per process and stays on.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)


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
