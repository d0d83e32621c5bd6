"""One sampling interface, two backends (HF transformers on CPU / one GPU, vLLM at scale).

Conventions shared by every backend and by the trainer:
- ``logprobs`` are per-token log-probabilities of the sampled tokens under the model's
  distribution at the *sampling temperature* (logits / temperature, before top-p truncation),
  which is what verl uses for ``old_log_probs`` and ``ref_log_prob``. With temperature 1.0 (the
  paper's training temperature) this is the plain model distribution.
- Completions stop at the tokenizer's EOS token (EOS is kept in ``token_ids`` but not in ``text``)
  or at ``max_new_tokens`` (``finish_reason == "length"``).
- Same seed, same prompts, same params -> same completions (on CPU).
- Prompts are tokenized by :func:`encode_prompt` (BOS never doubled) and responses decoded by
  :func:`response_text`, in both backends and the trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` completions per prompt (the paper's evaluation: n=32, T=0.7, top-p 0.95)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0
    return_logprobs: bool = False

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Completion:
    """One sampled response."""

    text: str
    token_ids: list[int]
    finish_reason: Literal["stop", "length"]
    logprobs: list[float] | None = field(default=None)


@runtime_checkable
class Sampler(Protocol):
    """A text-in, completions-out sampler. Backends: ``acerl.generate.hf``, ``acerl.generate.vllm_backend``."""

    tokenizer: Any  # the model's Hugging Face tokenizer (prompt templates and token counts use it)

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Return ``params.n`` completions for each prompt, in prompt order."""
        ...

    def score(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> list[list[float]]:
        """Per-token log-probs of the given response token ids after each prompt (teacher forcing)."""
        ...


# ------------------------------------------------------------------------------------------- prompt tokens
def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt: the tokenizer's special tokens are added (e.g. BOS) unless the text
    already starts with the BOS token (chat templates render it), so BOS is never doubled."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and text.startswith(bos))
    ids = tokenizer(text, add_special_tokens=add_special)["input_ids"]
    if not ids:
        raise ValueError(f"prompt {text[:60]!r} encodes to no tokens")
    return list(ids)


def response_text(tokenizer: Any, token_ids: Sequence[int], stopped: bool) -> str:
    """Decoded text of a response: the final EOS (when ``stopped``) and special tokens are left out."""
    ids = list(token_ids[:-1]) if stopped else list(token_ids)
    text: str = tokenizer.decode(ids, skip_special_tokens=True)
    return text


def eos_pad_ids(tokenizer: Any) -> tuple[int, int]:
    """``(eos_id, pad_id)`` of a tokenizer (pad falls back to EOS)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id; sampling needs a stop token")
    pad = tokenizer.pad_token_id
    return int(eos), int(eos if pad is None else pad)
