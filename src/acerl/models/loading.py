"""Load a causal-LM folder for sampling, training and diagnostics: the lean Llama where it is exact, else transformers.

:func:`load_model_folder` returns :class:`acerl.models.lean.LeanLlamaForCausalLM` and
:class:`acerl.models.tokenizer.LeanTokenizer` for the folders they reproduce bit for bit (the embedded default's
tiny Llama and character tokenizer: a float32 ``LlamaForCausalLM`` with the default RoPE and no biases; a
``tokenizers`` tokenizer without chat template), so those jobs never import transformers' modelling code; any
other folder (the paper's Qwen and Llama checkpoints, a model in bf16) loads with ``AutoModelForCausalLM`` and
``AutoTokenizer`` as before. With the fast paths off (``compute.fast_paths: false``, or ``ACERL_LEAN_MODEL=0`` in
the environment: :func:`acerl.pipeline.runtime.fast_paths`) everything loads with transformers (same results,
slower start).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from acerl.errors import fix_command, reading
from acerl.pipeline import paths
from acerl.pipeline.runtime import FAST_PATHS_ENV, fast_paths

logger = logging.getLogger(__name__)

__all__ = ["LEAN_ENV", "lean_enabled", "lean_model_reason", "load_model_folder", "load_tokenizer"]

LEAN_ENV = FAST_PATHS_ENV


def lean_enabled() -> bool:
    """Whether the lean loader may be used: this job's fast paths are on (:func:`acerl.pipeline.runtime.fast_paths`)."""
    return fast_paths()


def lean_model_reason(folder: Path, dtype: torch.dtype = torch.float32) -> str | None:
    """Why the lean Llama would not load ``folder`` exactly (None: it does)."""
    from acerl.models.lean import WEIGHTS, lean_config

    if dtype != torch.float32:
        return f"dtype {dtype} (the lean model runs float32 checkpoints as float32)"
    if not (folder / WEIGHTS).is_file():
        return f"no {WEIGHTS} (sharded or pickled weights)"
    config = lean_config(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    return config if isinstance(config, str) else None


def load_tokenizer(folder: Path | str) -> Any:
    """The tokenizer saved in ``folder``: :class:`~acerl.models.tokenizer.LeanTokenizer` where it reproduces
    ``AutoTokenizer``, else ``AutoTokenizer.from_pretrained``."""
    from acerl.models.tokenizer import LeanTokenizer, lean_tokenizer_reason

    folder = Path(folder)
    if lean_enabled() and lean_tokenizer_reason(folder) is None:
        return LeanTokenizer(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def load_model_folder(
    folder: Path | str, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[torch.nn.Module, Any]:
    """``(model, tokenizer)`` of a local model folder, the model on ``device`` in eval mode."""
    folder = Path(folder)
    reason = lean_model_reason(folder, dtype) if lean_enabled() else "fast paths off"
    tokenizer = load_tokenizer(folder)
    from safetensors import SafetensorError

    from acerl.models.lean import WEIGHTS

    if reason is None:
        from acerl.models.lean import LeanLlamaForCausalLM

        with reading(folder / WEIGHTS, weights_remake(folder), (SafetensorError,), delete=folder):
            lean = LeanLlamaForCausalLM.from_folder(folder, device)
        return lean, tokenizer
    logger.debug("%s: loading with transformers (%s)", folder, reason)
    from transformers import AutoModelForCausalLM

    with reading(folder / WEIGHTS, weights_remake(folder), (SafetensorError,), delete=folder):
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return model.to(device).eval(), tokenizer


def weights_remake(folder: Path) -> str:
    """The fix for an unreadable model folder: the command that writes it again (``acerl prepare-base`` for a
    base model, ``acerl train`` for a final policy, with the invocation's ``--config``/``--root``)."""
    command = paths.model_folder_command(folder)
    if command is None:
        return "rerun the step that wrote it"
    return f"rerun {fix_command(*command)}"
