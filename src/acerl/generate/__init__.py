"""Sampling: one :class:`~acerl.generate.base.Sampler` interface, two backends, one factory.

- ``hf`` (:class:`acerl.generate.hf.HFSampler`): HF transformers, CPU or one GPU; exact, deterministic on CPU.
- ``vllm`` (:class:`acerl.generate.vllm_backend.VLLMSampler`): vLLM on GPUs (tensor parallel); needs the ``gpu``
  extra (``pip install 'acerl[gpu]'``).

Callers never branch on the backend name: they call :func:`make_sampler` (or :func:`sampler_from_config`, which
reads ``evaluation.backend``, ``evaluation.batch_size`` and the rule's GPU count from the config). Backends are
imported lazily, so importing this package loads neither torch nor vLLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from acerl.generate.base import Completion, Sampler, SamplingParams

if TYPE_CHECKING:
    from acerl.config import Config

__all__ = [
    "BACKENDS",
    "Completion",
    "Sampler",
    "SamplingParams",
    "make_sampler",
    "resolve_device",
    "sampler_from_config",
]

Backend = Literal["hf", "vllm"]
BACKENDS: tuple[str, ...] = ("hf", "vllm")


def resolve_device(device: str) -> str:
    """``'auto'`` -> ``'cuda'`` when a CUDA GPU is visible, else ``'cpu'``; other values are returned unchanged.

    Raises:
        acerl.config.ConfigError: a ``cuda`` device where torch sees no CUDA GPU (the message names
            ``compute.device``; the CLI prints it as a one-line error).
    """
    if device != "auto" and not device.startswith("cuda"):
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        from acerl.config import ConfigError

        raise ConfigError(
            f"device {device!r} (compute.device) but torch sees no CUDA GPU (torch {torch.__version__}); "
            "set compute.device to 'auto' or 'cpu', or run on a machine with a GPU"
        )
    return device


def make_sampler(
    backend: str,
    model_dir: Path | str,
    *,
    device: str = "cpu",
    batch_size: int = 64,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.75,
    seed: int = 0,
    precision: str = "fp32",
) -> Sampler:
    """Load the model in ``model_dir`` (an HF folder) with the named backend.

    Args:
        backend: ``'hf'`` or ``'vllm'``.
        model_dir: HF model folder (weights + tokenizer).
        device: ``'cpu'``, ``'cuda'`` or ``'auto'`` (HF backend; vLLM always uses the visible GPUs).
        batch_size: prompts per forward batch (HF backend; vLLM schedules its own batches).
        tensor_parallel_size: GPUs per model (vLLM backend).
        gpu_memory_utilization: share of GPU memory vLLM may take (vLLM backend; Table 5 uses 0.75).
        seed: engine seed (vLLM backend; every request also carries its own seed).
        precision: ``fp32`` or ``bf16`` autocast of the forward passes (HF backend; ``compute.precision``).

    Raises:
        ValueError: unknown backend (the message lists the valid ones).
        FileNotFoundError: ``model_dir`` does not exist.
        ImportError: ``'vllm'`` without vLLM installed (install the ``gpu`` extra).
    """
    model_dir = Path(model_dir)
    if backend not in BACKENDS:
        raise ValueError(f"unknown sampling backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"model folder not found: {model_dir} (was the base model prepared / the run trained?)"
        )
    if backend == "vllm":
        from acerl.generate.vllm_backend import VLLMSampler

        return VLLMSampler.from_pretrained(
            model_dir,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
        )
    from acerl.generate.hf import HFSampler

    return HFSampler.from_pretrained(
        model_dir, device=resolve_device(device), batch_size=batch_size, precision=precision
    )


def sampler_from_config(
    cfg: Config, model_dir: Path | str, *, model: str, rule: str = "sample", device: str | None = None
) -> Sampler:
    """:func:`make_sampler` with the config's settings: ``evaluation.backend``, ``evaluation.batch_size``,
    ``compute.device`` (unless ``device`` is given), ``compute.precision``, the model's
    ``train.gpu_memory_utilization`` and, as the vLLM tensor-parallel size, the GPU count of ``rule``'s
    resources for ``model`` (at least 1)."""
    return make_sampler(
        cfg.evaluation.backend,
        model_dir,
        device=device or cfg.compute.device,
        batch_size=cfg.evaluation.batch_size,
        tensor_parallel_size=max(1, cfg.resources(rule, model).gpus),
        gpu_memory_utilization=cfg.models[model].train.gpu_memory_utilization,
        precision=cfg.compute.precision,
    )
