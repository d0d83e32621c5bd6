"""Teacher-forced log-probs of a rollout batch's response tokens, in micro-batches (Alg. 1 line 8's inputs).

:func:`micro_batches` cuts rows by a row count and an optional padded-token budget (verl's
``ppo_max_token_len_per_gpu``); :func:`micro_inputs` cuts a micro-batch's all-padding columns; :func:`batch_logprobs`
runs a model over the whole batch without gradients. The update's forward with gradients is
:func:`acerl.train.algorithm.policy_forward`, over the same cuts.
"""

from __future__ import annotations

import torch
from torch import Tensor

from acerl.generate.rollout import RolloutBatch, response_logprobs

__all__ = ["batch_logprobs", "micro_batches", "micro_inputs"]


def micro_inputs(batch: RolloutBatch, rows: Tensor) -> tuple[Tensor, Tensor, int]:
    """Input ids / attention mask of ``rows`` with all-padding columns cut off, and their response width."""
    p = batch.prompt_length
    attn = batch.attention_mask[rows]
    first = int(attn[:, :p].any(dim=0).nonzero().min())
    t = int(batch.response_mask[rows].sum(dim=-1).max())
    return batch.input_ids[rows, first : p + t], attn[:, first : p + t], t


def micro_batches(
    batch: RolloutBatch, rows: Tensor, max_rows: int, max_tokens: int | None = None
) -> list[Tensor]:
    """``rows`` in order, split into consecutive micro-batches of at most ``max_rows`` rows and, with
    ``max_tokens``, at most ``max_tokens`` padded tokens: ``rows x width``, the width being the longest prompt
    plus the longest response of the micro-batch (the layout :func:`micro_inputs` cuts). Long responses then
    go in small micro-batches and short ones in large ones (verl's ``ppo_max_token_len_per_gpu``); a row wider
    than the budget forms a micro-batch of its own. The gradient accumulated over micro-batches is the same
    however they are cut (the losses are aggregated with mini-batch counts), so this is a memory setting."""
    if max_tokens is None:
        return list(torch.split(rows, max_rows))
    p = batch.prompt_length
    prompt_len = batch.attention_mask[rows, :p].sum(dim=-1).tolist()
    response_len = batch.response_mask[rows].sum(dim=-1).tolist()
    out: list[Tensor] = []
    start, longest_p, longest_r = 0, 0, 0
    for i, (lp, lr) in enumerate(zip(prompt_len, response_len, strict=True)):
        wide_p, wide_r = max(longest_p, lp), max(longest_r, lr)
        n = i - start
        if n > 0 and (n + 1 > max_rows or (n + 1) * (wide_p + wide_r) > max_tokens):
            out.append(rows[start:i])
            start, wide_p, wide_r = i, lp, lr
        longest_p, longest_r = wide_p, wide_r
    out.append(rows[start:])
    return out


@torch.no_grad()
def batch_logprobs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    temperature: float,
    micro_batch_size: int,
    with_entropy: bool = False,
    max_tokens: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """(B, T) log-probs (and entropies) of every response token under ``model``, in the micro-batches of
    :func:`micro_batches` (``micro_batch_size`` rows, ``max_tokens`` padded tokens); zeros on padding."""
    b, t = batch.response_ids.shape
    logprobs = torch.zeros(b, t, dtype=torch.float32, device=batch.input_ids.device)
    entropy = torch.zeros_like(logprobs) if with_entropy else None
    for rows in micro_batches(batch, torch.arange(b, device=logprobs.device), micro_batch_size, max_tokens):
        ids, attn, tm = micro_inputs(batch, rows)
        lp, ent = response_logprobs(model, ids, attn, tm, temperature=temperature, with_entropy=with_entropy)
        logprobs[rows, :tm] = lp
        if entropy is not None and ent is not None:
            entropy[rows, :tm] = ent
    mask = batch.response_mask.bool()
    logprobs = logprobs.masked_fill(~mask, 0.0)
    return logprobs, None if entropy is None else entropy.masked_fill(~mask, 0.0)
