"""The rollout kernel: batched, KV-cached sampling and teacher-forced scoring on a transformers causal LM.

Tensor level, shared by the trainer (:mod:`acerl.train.rollouts`) and the HF sampler
(:class:`acerl.generate.hf.HFSampler`): :func:`sample_batch` (prompt token ids in, a :class:`RolloutBatch` out)
and :func:`response_logprobs` (teacher-forced per-token log-probs and entropies of given responses). Written for
small models on CPU / one GPU.

Conventions (those of :mod:`acerl.generate.base`, shared with verl):

- log-probs are taken under ``softmax(logits / temperature)`` *before* top-p truncation (verl's
  ``old_log_probs`` / ``ref_log_prob``); at temperature 0 (greedy) they are under the plain distribution;
- a response stops at ``eos_id`` (kept as its last token, counted in ``response_mask``) or after
  ``max_new_tokens`` tokens;
- sampling draws from one seeded ``torch.Generator``: same model, inputs, parameters and seed give the same
  tokens on CPU. Results do depend on how rows are batched (the batch composition changes the draws).
- common random numbers: :func:`sample_batch` draws all its uniforms up front, one per (row, response
  position), and token ``t`` of row ``r`` is the inverse-CDF image of uniform ``(r, t)``. Two policies sampled
  with the same seed therefore use the same uniform for the same token slot, whatever lengths their responses
  take, and a batch always consumes ``rows x max_new_tokens`` draws. Similar policies so give mostly identical
  samples (a coupling), which makes the difference between two methods evaluated or trained with the same
  seeds far less noisy than two independent draws (docs/reports.md, "Common random numbers").

Rows are laid out ``[left-padded prompt | right-padded response]``: prompts are left-padded to a common
length ``P`` so every response starts at column ``P``, and position ids count real tokens only, so a row's
result does not depend on its padding (up to float rounding).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from acerl.algos.losses import entropy_from_logits, token_logprobs
from acerl.generate.decoding import make_decoder, new_dynamic_cache
from acerl.pipeline.runtime import fast_paths

logger = logging.getLogger(__name__)

__all__ = [
    "RolloutBatch",
    "pack_rows",
    "position_ids_from_mask",
    "response_logprobs",
    "sample_batch",
    "sample_next_token",
]


@dataclass
class RolloutBatch:
    """``B`` sampled rows: prompts left-padded to ``P`` tokens, responses right-padded to ``T`` tokens.

    Attributes:
        input_ids: (B, P + T) prompt then response token ids (``pad_id`` in padding).
        attention_mask: (B, P + T) 1 for real prompt and response tokens (EOS included), 0 for padding.
        response_ids: (B, T) the response part of ``input_ids``.
        response_mask: (B, T) 1 for generated tokens (up to and including EOS).
        logprobs: (B, T) float32 log-probs of the sampled tokens at the sampling temperature; 0 on padding.
        stopped: (B,) bool, True where the response ended with EOS (``finish_reason == "stop"``).
    """

    input_ids: Tensor
    attention_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    logprobs: Tensor
    stopped: Tensor

    @property
    def prompt_length(self) -> int:
        """``P``: the padded prompt width."""
        return self.input_ids.shape[1] - self.response_ids.shape[1]

    @property
    def response_lengths(self) -> Tensor:
        """(B,) int64 number of response tokens per row."""
        return self.response_mask.sum(dim=-1)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def prompt_ids(self, row: int) -> list[int]:
        """The unpadded prompt of ``row``."""
        p = self.prompt_length
        return self.input_ids[row, :p][self.attention_mask[row, :p].bool()].tolist()

    def response(self, row: int) -> list[int]:
        """The unpadded response of ``row`` (EOS included if generated)."""
        return self.response_ids[row, : int(self.response_mask[row].sum())].tolist()

    def select(self, rows: Tensor | Sequence[int], pad_id: int) -> RolloutBatch:
        """The given rows, re-packed to their own (smaller or equal) ``P`` and ``T``."""
        return RolloutBatch.cat([self], pad_id, rows=[rows])

    @staticmethod
    def cat(batches: Sequence[RolloutBatch], pad_id: int, rows: Sequence[Any] | None = None) -> RolloutBatch:
        """Concatenate batches (optionally only ``rows[i]`` of batch ``i``), re-padding to a common layout."""
        prompts: list[list[int]] = []
        responses: list[list[int]] = []
        logps: list[Tensor] = []
        stopped: list[Tensor] = []
        for i, b in enumerate(batches):
            idx = range(len(b)) if rows is None else [int(r) for r in rows[i]]
            for r in idx:
                prompts.append(b.prompt_ids(r))
                responses.append(b.response(r))
                logps.append(b.logprobs[r, : len(responses[-1])])
                stopped.append(b.stopped[r])
        device = batches[0].input_ids.device if batches else torch.device("cpu")
        input_ids, attention_mask, response_mask = pack_rows(prompts, responses, pad_id, device=device)
        t = response_mask.shape[1]
        logprobs = torch.zeros(len(prompts), t, dtype=torch.float32, device=device)
        for r, lp in enumerate(logps):
            logprobs[r, : lp.numel()] = lp
        return RolloutBatch(
            input_ids=input_ids,
            attention_mask=attention_mask,
            response_ids=input_ids[:, input_ids.shape[1] - t :],
            response_mask=response_mask,
            logprobs=logprobs,
            stopped=torch.stack(stopped) if stopped else torch.zeros(0, dtype=torch.bool, device=device),
        )


def pack_rows(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor, Tensor]:
    """Lay out ``[left-padded prompt | right-padded response]`` rows.

    Args:
        prompts: B prompt token-id lists (non-empty); responses: B response token-id lists (may be empty).

    Returns:
        input_ids (B, P + T), attention_mask (B, P + T), response_mask (B, T); ``T`` is the longest response
        (at least 1, so a batch of empty responses still has a response column, fully masked).
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    b = len(prompts)
    p_len = max((len(p) for p in prompts), default=1)
    t_len = max(1, max((len(r) for r in responses), default=1))
    input_ids = torch.full((b, p_len + t_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((b, p_len + t_len), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        input_ids[i, p_len - len(p) : p_len] = torch.as_tensor(list(p), dtype=torch.long)
        attention_mask[i, p_len - len(p) : p_len + len(r)] = 1
        if r:
            input_ids[i, p_len : p_len + len(r)] = torch.as_tensor(list(r), dtype=torch.long)
    return input_ids.to(device), attention_mask.to(device), attention_mask[:, p_len:].to(device)


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """(B, L) position ids counting real tokens only (0 at the first real token; padding clamped to 0)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def _inverse_cdf(weights: Tensor, uniforms: Tensor) -> Tensor:
    """One index per row drawn with probability proportional to ``weights`` (B, V) (non-negative, each row
    with positive mass): the row's uniform ``uniforms`` (B,) in [0, 1) located in the row's cumulative sums
    (inverse-CDF sampling; one random number per row, several times cheaper than ``torch.multinomial`` on CPU).
    Sums are taken in float64 so rounding does not measurably shift the bins; a zero weight is an empty bin
    and is never drawn unless the uniform rounds onto the total (probability ~1e-16)."""
    cdf = weights.double().cumsum(dim=-1)
    u = uniforms.to(device=weights.device, dtype=torch.float64)[:, None]
    index = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return index.squeeze(-1).clamp_(max=weights.shape[-1] - 1)


def sample_next_token(
    logits: Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    uniforms: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Draw one token per row from ``softmax(logits / temperature)`` restricted to the top-p nucleus.

    The nucleus is the smallest set of most likely tokens whose mass reaches ``top_p`` (vLLM / HF
    semantics; the most likely token is always kept). ``temperature == 0`` is greedy decoding.

    Args:
        logits: (B, V) next-token scores.
        temperature: >= 0; top_p: in (0, 1]; generator: the seeded random source.
        uniforms: (B,) the rows' uniforms in [0, 1) (common random numbers, see the module docstring);
            ``None`` draws them from ``generator``.

    Returns:
        tokens (B,) int64 and their log-probs (B,) float32 under ``softmax(logits / temperature)`` (the plain
        distribution when greedy), before top-p truncation.
    """
    x = logits.float()
    if temperature == 0:
        logp = torch.log_softmax(x, dim=-1)
        tokens = x.argmax(dim=-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    if temperature != 1.0:
        x = x / temperature
    logp = torch.log_softmax(x, dim=-1)
    if uniforms is None:
        uniforms = torch.rand(x.shape[0], dtype=torch.float64, device=x.device, generator=generator)
    if top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        sorted_p = sorted_logp.exp()
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p
        choice = _inverse_cdf(sorted_p.masked_fill(mass_before >= top_p, 0.0), uniforms)
        tokens = order.gather(-1, choice[:, None]).squeeze(-1)
    else:
        tokens = _inverse_cdf(logp.exp(), uniforms)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def sample_batch(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    compact_below: int = 4,
    lean: bool | None = None,
) -> RolloutBatch:
    """Sample ``n`` responses per prompt with a KV cache (rows ordered prompt-major: row ``i * n + j``).

    Row ``r``'s token ``t`` is drawn with uniform ``(r, t)`` of a ``(B, max_new_tokens)`` block drawn from
    ``generator`` first (common random numbers; the module docstring). One prefill of the left-padded prompts
    (each prompt once; its KV cache is then copied to its ``n`` rows),
    then one single-token forward per step into a preallocated KV cache. Rows that emitted EOS are
    dropped from the KV cache once they make up ``1 / compact_below`` of it (dropping copies the cache, so it
    is done in few large steps); the loop ends when every row has stopped or after ``max_new_tokens`` tokens.
    The response width ``T`` is the longest response.

    Args:
        model: a causal LM (``AutoModelForCausalLM``) accepting ``past_key_values`` / ``position_ids``.
        prompt_ids: B0 prompt token-id lists.
        n: responses per prompt; temperature, top_p: as in :func:`sample_next_token`.
        max_new_tokens: response budget; eos_id: stop token; pad_id: padding id.
        generator: seeded random source (on the model's device); ``None`` uses torch's global one.
        compact_below: drop finished rows when they are at least ``1 / compact_below`` of the cache rows.
        lean: decode Llama-family models with :class:`acerl.generate.decoding.LlamaFamilyDecoder` (the model's
            own weights without a transformers forward call per token); ``False`` calls the forward per token
            (the plain path); ``None``: the job's ``compute.fast_paths`` (:func:`acerl.pipeline.runtime.fast_paths`).

    Returns:
        :class:`RolloutBatch` with B = B0 * n rows.
    """
    batch = _sample_batch(
        model,
        prompt_ids,
        n,
        temperature,
        top_p,
        max_new_tokens,
        eos_id,
        pad_id,
        generator,
        compact_below,
        fast_paths() if lean is None else lean,
    )
    # clone outside inference mode: inference tensors cannot take part in autograd (the trainer's loss)
    return RolloutBatch(*(getattr(batch, f.name).clone() for f in dataclasses.fields(batch)))


@torch.inference_mode()
def _sample_batch(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None,
    compact_below: int,
    lean: bool,
) -> RolloutBatch:
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"n and max_new_tokens must be >= 1, got n={n}, max_new_tokens={max_new_tokens}")
    device = next(model.parameters()).device
    input_ids, attention_mask, _ = pack_rows(prompt_ids, [[]] * len(prompt_ids), pad_id, device=device)
    input_ids, attention_mask = input_ids[:, :-1], attention_mask[:, :-1]  # drop the empty response column
    position_ids = position_ids_from_mask(attention_mask)
    p_len = input_ids.shape[1]

    # prefill each prompt once; its n rows then continue from its KV cache
    decoder = make_decoder(model, p_len + max_new_tokens, lean=lean)
    logits = decoder.prefill(input_ids, attention_mask, position_ids)
    decoder.expand(n)
    if n > 1:
        input_ids, attention_mask, position_ids, logits = (
            x.repeat_interleave(n, dim=0) for x in (input_ids, attention_mask, position_ids, logits)
        )
    b = input_ids.shape[0]
    response = torch.full((b, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((b, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.zeros(b, dtype=torch.long, device=device)
    stopped = torch.zeros(b, dtype=torch.bool, device=device)
    # one uniform per (row, position), drawn before any row can stop: common random numbers across policies
    uniforms = torch.rand(b, max_new_tokens, dtype=torch.float64, device=device, generator=generator)

    active = torch.arange(b, device=device)  # original row of each cache row
    finished = torch.zeros(b, dtype=torch.bool, device=device)  # cache rows that already emitted EOS
    next_pos = position_ids[:, -1] + 1
    for t in range(max_new_tokens):
        tokens, lp = sample_next_token(logits, temperature, top_p, None, uniforms[active, t])
        live = ~finished
        rows = active[live]
        response[rows, t] = tokens[live]
        logprobs[rows, t] = lp[live]
        lengths[rows] = t + 1
        done = live & (tokens == eos_id)
        stopped[active[done]] = True
        finished |= done
        if t == max_new_tokens - 1 or bool(finished.all()):
            break
        if int(finished.sum()) * compact_below >= finished.numel():  # enough dead rows: drop them
            keep = (~finished).nonzero().squeeze(-1)
            decoder.select(keep)
            active, tokens, next_pos, finished = active[keep], tokens[keep], next_pos[keep], finished[keep]
        logits = decoder.step(tokens, next_pos)
        next_pos = next_pos + 1

    t_len = int(lengths.max())
    response, logprobs = response[:, :t_len], logprobs[:, :t_len]
    response_mask = (torch.arange(t_len, device=device)[None, :] < lengths[:, None]).long()
    return RolloutBatch(
        input_ids=torch.cat([input_ids, response], dim=-1),
        attention_mask=torch.cat([attention_mask, response_mask], dim=-1),
        response_ids=response,
        response_mask=response_mask,
        logprobs=logprobs * response_mask,
        stopped=stopped,
    )


def _response_logits(
    model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, t_len: int, share_prompts: bool
) -> Tensor:
    """(B, T, V) logits predicting each of the last ``t_len`` tokens of every row.

    With ``share_prompts`` and repeated prompts (a group of rollouts), each distinct prompt is run once, its
    KV cache is gathered to its rows (differentiably) and only the responses are run on top: the same
    result up to float rounding, for far fewer tokens (G rollouts share one prompt).
    """
    b, width = input_ids.shape
    p_len = width - t_len
    if share_prompts and p_len > 0:
        key = torch.cat([input_ids[:, :p_len], attention_mask[:, :p_len].to(input_ids.dtype)], dim=1)
        unique, inverse = torch.unique(key, dim=0, return_inverse=True)
        if unique.shape[0] < b:
            p_ids, p_mask = unique[:, :p_len], unique[:, p_len:].to(attention_mask.dtype)
            cache = new_dynamic_cache(model)
            out = model(
                input_ids=p_ids,
                attention_mask=p_mask,
                position_ids=position_ids_from_mask(p_mask),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            first: Tensor = out.logits[:, -1:, :][inverse]  # predicts response token 0
            if t_len == 1:
                return first
            cache.batch_select_indices(inverse)
            mask = attention_mask[:, : width - 1]
            out = model(
                input_ids=input_ids[:, p_len : width - 1],
                attention_mask=mask,
                position_ids=position_ids_from_mask(mask)[:, p_len:],
                past_key_values=cache,
                use_cache=True,
            )
            return torch.cat([first, out.logits], dim=1)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        logits_to_keep=t_len + 1,
    )
    logits: Tensor = out.logits[:, :-1, :]  # position P-1+t predicts response token t
    return logits


def response_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_length: int,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Teacher-forced log-probs (and entropies) of the last ``response_length`` tokens of each row.

    Gradients flow when called outside ``torch.no_grad`` (the trainer's policy loss). Logits are divided by
    ``temperature`` as in verl's actor (temperature 0 is treated as 1). Rows sharing a prompt share its
    forward pass (``share_prompts``; see :func:`_response_logits`).

    Args:
        model: causal LM; input_ids, attention_mask: (B, P + T) rows as laid out by :func:`pack_rows`.
        response_length: ``T``.
        with_entropy: also return the full-vocabulary entropy of ``softmax(logits / temperature)`` (no grad).
        share_prompts: run each distinct prompt once.

    Returns:
        logprobs (B, T) float32 and entropy (B, T) float32 or ``None``; values on padding are meaningless
        (mask them with the response mask).
    """
    logits = _response_logits(model, input_ids, attention_mask, response_length, share_prompts)
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    labels = input_ids[:, -response_length:]
    logprobs = token_logprobs(logits, labels)
    entropy = entropy_from_logits(logits.detach()) if with_entropy else None
    return logprobs, entropy
