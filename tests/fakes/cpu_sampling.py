"""Test infrastructure: the CPU rollout server's sampler (:mod:`fakes.verl_cpu_rollout`), apart from verl.

A vLLM server makes a request's tokens a function of the request, not of the batch it shares: under verl's
``rollout.full_determinism`` each row keeps its request id (``det-<row>``) and vLLM samples it with
batch-invariant kernels. This sampler does the same on a CPU: every request gets its own random stream, seeded by
:func:`request_seed` from the run's seed, the weights' version (the training step), the request id, the prompt
and how often that exact request came before; each token is drawn by inverting the row's cumulative
distribution at one uniform from that stream. So a row samples the same tokens whatever batch it lands in and
whenever it arrives: the rollouts, and so the number of dynamic-sampling refills, no longer depend on the load of
the machine. (Rows batched together can differ in their logits by float rounding, about 1e-7; a token changes
only if a uniform falls that close to a boundary of the cumulative distribution.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import torch

DETERMINISTIC_PREFIX = (
    "det-"  # verl's request ids under rollout.full_determinism (agent loop: det-<priority>)
)


def request_seed(
    base_seed: int, version: int | None, request_id: str, prompt_ids: Sequence[int], repeat: int
) -> int:
    """The random stream of one request: a 63-bit seed from everything that identifies it.

    ``request_id`` counts only when it is verl's deterministic ``det-<row>`` (otherwise a fresh uuid per call);
    ``repeat`` tells apart identical requests of one step (the rows of a group without deterministic ids)."""
    rid = request_id if request_id.startswith(DETERMINISTIC_PREFIX) else ""
    key = json.dumps([int(base_seed), version, rid, [int(t) for t in prompt_ids], int(repeat)])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") >> 1


def _pick(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: the first token whose cumulative probability exceeds ``u`` times the row's total.
    ``probs``: (B, V), ``uniforms``: (B,) in [0, 1); returns (B,) token ids."""
    cdf = probs.cumsum(-1)
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=probs.size(-1) - 1)


def sample_rows(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_tokens: Sequence[int],
    seeds: Sequence[int],
    *,
    temperature: float,
    top_p: float,
    eos_ids: set[int],
) -> list[tuple[list[int], list[float]]]:
    """Sample every prompt at once (left-padded, KV cache), row ``i`` from the stream seeded by ``seeds[i]``:
    each row's tokens and their log-probs under the policy (before temperature, as vLLM reports them)."""
    n = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.zeros(n, width, dtype=torch.long)
    mask = torch.zeros(n, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    limit = torch.tensor(list(max_tokens))
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    out_ids: list[list[int]] = [[] for _ in prompts]
    out_lp: list[list[float]] = [[] for _ in prompts]
    done = torch.zeros(n, dtype=torch.bool)
    eos = torch.tensor(sorted(eos_ids) or [-1])
    past = None
    step_ids = ids
    with torch.no_grad():
        for t in range(int(limit.max())):
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.size(1) :]
            res = model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=past,
                use_cache=True,
            )
            past = res.past_key_values
            logits = res.logits[:, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            if temperature <= 0:
                tok = logits.argmax(-1)
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                if top_p < 1.0:
                    sorted_p, order = torch.sort(probs, descending=True, dim=-1)
                    keep = torch.cumsum(sorted_p, -1) - sorted_p < top_p
                    probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
                uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
                tok = _pick(probs.double(), uniforms)
            for i in range(n):
                if not done[i]:
                    out_ids[i].append(int(tok[i]))
                    out_lp[i].append(float(logp[i, tok[i]]))
            done |= torch.isin(tok, eos) | (t + 1 >= limit)
            if bool(done.all()):
                break
            step_ids = tok.unsqueeze(-1)
            mask = torch.cat([mask, torch.ones(n, 1, dtype=torch.long)], dim=-1)
    return list(zip(out_ids, out_lp, strict=True))
