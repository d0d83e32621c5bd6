"""Process-wide torch settings of a pipeline job (one home for them: the CLI, the trainer and the benchmarks)."""

from __future__ import annotations

import torch

__all__ = ["configure_torch"]


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
