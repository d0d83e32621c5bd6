"""HF transformers sampling backend: :class:`HFSampler`, the :class:`acerl.generate.base.Sampler` used by
evaluation and diagnostics on CPU or one GPU.

It runs the rollout kernel the trainer runs (:func:`acerl.generate.rollout.sample_batch`,
:func:`acerl.generate.rollout.response_logprobs`), so its conventions are that module's: log-probs under
``softmax(logits / temperature)`` before top-p truncation, a response stops at EOS (kept) or after
``max_new_tokens``, one seeded ``torch.Generator`` per :meth:`HFSampler.generate` call.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from acerl.generate.base import Completion, SamplingParams, encode_prompt, eos_pad_ids, response_text
from acerl.generate.rollout import pack_rows, response_logprobs, sample_batch
from acerl.models.loading import load_model_folder
from acerl.pipeline.runtime import autocast

logger = logging.getLogger(__name__)

__all__ = ["HFSampler"]


class HFSampler:
    """:class:`acerl.generate.base.Sampler` on a transformers causal LM (CPU or one GPU).

    Args:
        model: an ``AutoModelForCausalLM`` (put in eval mode); tokenizer: its tokenizer.
        batch_size: prompts per sampling batch (each expanded to ``n`` rows) and responses per scoring batch.
        precision: ``fp32`` or ``bf16`` autocast of the forward passes (:func:`acerl.pipeline.runtime.autocast`).
    """

    def __init__(
        self, model: torch.nn.Module, tokenizer: Any, *, batch_size: int = 64, precision: str = "fp32"
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        autocast("cpu", precision)  # fail early on a bad name
        self.precision = precision
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_id, self.pad_id = eos_pad_ids(tokenizer)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        dtype: torch.dtype = torch.float32,
        precision: str = "fp32",
    ) -> HFSampler:
        """Load a local HF model folder (safetensors + tokenizer); ``precision`` as in the constructor."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"not a HF model folder (no config.json): {path}")
        model, tokenizer = load_model_folder(path, device=device, dtype=dtype)
        return cls(model, tokenizer, batch_size=batch_size, precision=precision)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions per prompt, in prompt order (one generator seeded with ``params.seed``)."""
        generator = torch.Generator(device=self.device).manual_seed(params.seed)
        encoded = [encode_prompt(self.tokenizer, p) for p in prompts]
        results: list[list[Completion]] = []
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start : start + self.batch_size]
            with autocast(self.device, self.precision):
                batch = sample_batch(
                    self.model,
                    chunk,
                    n=params.n,
                    temperature=params.temperature,
                    top_p=params.top_p,
                    max_new_tokens=params.max_new_tokens,
                    eos_id=self.eos_id,
                    pad_id=self.pad_id,
                    generator=generator,
                )
            for i in range(len(chunk)):
                group = []
                for row in range(i * params.n, (i + 1) * params.n):
                    ids = batch.response(row)
                    stop = bool(batch.stopped[row])
                    group.append(
                        Completion(
                            text=response_text(self.tokenizer, ids, stop),
                            token_ids=ids,
                            finish_reason="stop" if stop else "length",
                            logprobs=batch.logprobs[row, : len(ids)].tolist()
                            if params.return_logprobs
                            else None,
                        )
                    )
                results.append(group)
        return results

    @torch.no_grad()
    def _teacher_forced(
        self, prompts: list[str], responses: list[list[int]], temperature: float, with_entropy: bool
    ) -> list[tuple[Tensor, Tensor | None]]:
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        encoded = [encode_prompt(self.tokenizer, p) for p in prompts]
        out: list[tuple[Tensor, Tensor | None]] = []
        for start in range(0, len(encoded), self.batch_size):
            ps, rs = encoded[start : start + self.batch_size], responses[start : start + self.batch_size]
            input_ids, attention_mask, response_mask = pack_rows(ps, rs, self.pad_id, device=self.device)
            with autocast(self.device, self.precision):
                lp, ent = response_logprobs(
                    self.model,
                    input_ids,
                    attention_mask,
                    response_mask.shape[1],
                    temperature=temperature,
                    with_entropy=with_entropy,
                )
            for i, r in enumerate(rs):
                out.append((lp[i, : len(r)].cpu(), None if ent is None else ent[i, : len(r)].cpu()))
        return out

    def score(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> list[list[float]]:
        """Per-token log-probs of each response after its prompt under ``softmax(logits / temperature)``."""
        return [lp.tolist() for lp, _ in self._teacher_forced(prompts, responses, temperature, False)]

    def mean_token_entropy(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> list[float]:
        """Mean over each response's tokens of the full-vocabulary entropy (nats) of the next-token
        distribution ``softmax(logits / temperature)`` (paper Sec. 6.2 entropy); NaN for an empty response."""
        return self.score_with_entropy(prompts, responses, temperature)[1]

    def score_with_entropy(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> tuple[list[list[float]], list[float]]:
        """:meth:`score` and :meth:`mean_token_entropy` from one teacher-forced pass (the same values)."""
        rows = self._teacher_forced(prompts, responses, temperature, True)
        logprobs = [lp.tolist() for lp, _ in rows]
        return logprobs, [
            float(ent.mean()) if ent is not None and ent.numel() else math.nan for _, ent in rows
        ]
