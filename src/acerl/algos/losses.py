"""Policy-gradient losses, KL estimators and per-token log-prob / entropy helpers.

Each function matches its verl 0.9.1 counterpart in ``verl.trainer.ppo.core_algos`` (checked by
``tests/algos/test_losses.py``): :func:`agg_loss` = ``agg_loss``, :func:`vanilla_policy_loss` (the policy
loss; the config's ``policy_loss: vanilla``) = ``compute_policy_loss_vanilla``, :func:`kl_penalty` =
``kl_penalty``, :func:`entropy_from_logits` = ``verl.utils.torch_functional.entropy_from_logits``. Pure
functions: tensors and plain numbers in, tensors out; no config objects. Shapes: ``B`` sequences, ``T``
response tokens, ``V`` vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

import torch
from torch import Tensor

from acerl.algos.registry import Registry

__all__ = [
    "BatchCounts",
    "LOSS_AGG_MODES",
    "KL_KINDS",
    "LossAggMode",
    "POLICY_LOSS_FUNCTIONS",
    "PolicyLoss",
    "POLICY_LOSS_METRIC_KEYS",
    "PolicyLossOutput",
    "agg_loss",
    "entropy_from_logits",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "token_logprobs",
    "vanilla_policy_loss",
]

LossAggMode = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values * mask``; values outside the mask (even NaN/inf) contribute exactly 0.

    Args:
        values: any shape; mask: same shape, bool or 0/1 (float weights are multiplied in, as in verl).
    """
    valid = torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))
    prod = valid * mask
    return prod.sum() if dim is None else prod.sum(dim=dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """``masked_sum / (mask.sum() + 1e-8)`` -- verl's ``masked_mean`` (0 for an empty mask)."""
    denom = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (denom + 1e-8)


class BatchCounts(TypedDict):
    """The counts of the whole (mini-)batch that :func:`agg_loss` normalises a micro-batch's loss by, as its
    keywords: ``agg_loss(loss_mat, mask, mode, **counts)`` (verl's ``global_batch_info``)."""

    batch_num_tokens: Tensor
    global_batch_size: Tensor
    loss_scale_factor: int


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | Tensor | None = None,
    global_batch_size: int | Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> Tensor:
    """Aggregate a (B, T) per-token loss into a scalar, exactly as verl 0.9.1's ``agg_loss``.

    Modes (``n`` = number of sequences with at least one token, ``N`` = number of tokens):
      - ``token-mean``: ``sum(loss * mask) / N`` (DAPO; verl default);
      - ``token-sum``: ``sum(loss * mask)``;
      - ``seq-mean-token-sum``: mean over sequences of per-sequence token sums (``/ n``);
      - ``seq-mean-token-mean``: mean over sequences of per-sequence token means (GRPO's ``1/|o_i|``);
      - ``seq-mean-token-sum-norm``: ``seq-mean-token-sum / loss_scale_factor`` (default ``T``; Dr. GRPO).

    Single process: leave ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` at their defaults. With
    gradient accumulation over micro-batches, pass the mini-batch's token count (``batch_num_tokens``) or
    sequence count (``global_batch_size``) so the summed micro-batch losses equal the mini-batch loss; with
    ``dp_size`` data-parallel ranks these are global counts and each rank's loss is scaled by ``dp_size``.

    Args:
        loss_mat: (B, T) per-token loss.
        loss_mask: (B, T) 1 for tokens that count.
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.

    Returns:
        0-dim tensor.
    """
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("agg_loss: batch_num_tokens (global) is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        tokens_per_seq = loss_mask.sum(dim=-1)
        seq_losses = (loss_mat * loss_mask).sum(dim=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (tokens_per_seq + 1e-8)
        seq_mask = (tokens_per_seq > 0).float()  # fully masked sequences do not count
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("agg_loss: global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {', '.join(LOSS_AGG_MODES)}")


# --------------------------------------------------------------------------------------------------------------
# Policy losses
# --------------------------------------------------------------------------------------------------------------


POLICY_LOSS_METRIC_KEYS = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl")
"""The metrics a policy loss may report (each reports those verl's same loss reports; a test holds every
registered loss to this set)."""


@dataclass(frozen=True)
class PolicyLossOutput:
    """A policy loss and its metrics.

    Attributes:
        loss: 0-dim tensor to minimise (carries grad through ``log_prob``).
        metrics: floats keyed like verl's (``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``).
    """

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class PolicyLoss(Protocol):
    """Shared policy-loss signature: the family's clip ratios and aggregation as keywords (a loss ignores those
    it does not use), then the loss's own parameters (``acerl.config.PolicyLossParams.kwargs``). ``*args: Any,
    **params: Any`` is the typing spelling of "and any further arguments": each loss declares its own
    keywords."""

    def __call__(
        self,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        *args: Any,
        **params: Any,
    ) -> PolicyLossOutput: ...


POLICY_LOSS_FUNCTIONS: Registry[PolicyLoss] = Registry("policy loss")
"""Policy losses by the config's ``families.<f>.policy_loss`` name (verl's ``policy_loss.loss_mode``)."""


@POLICY_LOSS_FUNCTIONS.register("vanilla")
def vanilla_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    rollout_is_weights: Tensor | None = None,
    dp_size: int = 1,
    batch_num_tokens: int | Tensor | None = None,
    global_batch_size: int | Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate with decoupled clip range and dual clip (paper Eqs. 2,
    9 and 10); verl's ``compute_policy_loss_vanilla``.

    Per token, with ``rho = exp(clamp(log_prob - old_log_prob, -20, 20))``::

        L1 = max(-A * rho, -A * clip(rho, 1 - clip_ratio_low, 1 + clip_ratio_high))
        L  = min(L1, -A * clip_ratio_c) if A < 0 else L1            # dual clip (Ye et al. 2020)

    ``clip_ratio_low/high = None`` fall back to ``clip_ratio`` (symmetric GRPO clip); DAPO's clip-higher is
    ``clip_ratio_low=0.2, clip_ratio_high=0.28``. ``rollout_is_weights`` (B, T) multiply the per-token loss.
    The result is aggregated with :func:`agg_loss` (``dp_size`` ... ``loss_scale_factor`` forwarded).

    Args:
        old_log_prob: (B, T) log-probs under the policy that sampled the data (no grad).
        log_prob: (B, T) log-probs under the current policy (grad flows here).
        advantages: (B, T) per-token advantages, or (B,) broadcast over tokens.
        response_mask: (B, T) 1 for response tokens.
        loss_agg_mode: one of :data:`LOSS_AGG_MODES`.

    Returns:
        :class:`PolicyLossOutput` with metrics ``actor/pg_clipfrac`` (fraction of tokens where the ratio
        clip is active), ``actor/pg_clipfrac_lower`` (dual clip active), ``actor/ppo_kl`` (mean
        ``old_log_prob - log_prob``).
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual-clip lower bound) must be > 1.0, got {clip_ratio_c}")
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high

    neg_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_approx_kl)
    ppo_kl = masked_mean(-neg_approx_kl, response_mask)

    losses_unclipped = -advantages * ratio
    losses_clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    losses_ppo = torch.maximum(losses_unclipped, losses_clipped)
    clipfrac = masked_mean(torch.gt(losses_clipped, losses_unclipped).float(), response_mask)

    losses_dual = -advantages * clip_ratio_c
    negative = advantages < 0
    clipfrac_lower = masked_mean(torch.gt(losses_ppo, losses_dual) * negative.float(), response_mask)
    pg_losses = torch.where(negative, torch.minimum(losses_dual, losses_ppo), losses_ppo)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    loss = agg_loss(
        pg_losses,
        response_mask,
        loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
    metrics = {
        "actor/pg_clipfrac": clipfrac.detach().item(),
        "actor/ppo_kl": ppo_kl.detach().item(),
        "actor/pg_clipfrac_lower": clipfrac_lower.detach().item(),
    }
    return PolicyLossOutput(loss=loss, metrics=metrics)


# --------------------------------------------------------------------------------------------------------------
# KL estimators
# --------------------------------------------------------------------------------------------------------------

KL_KINDS: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def _kl_forward(logprob: Tensor, ref_logprob: Tensor, kind: str) -> Tensor:
    if kind in ("kl", "k1"):
        return logprob - ref_logprob
    if kind == "abs":
        return (logprob - ref_logprob).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kind in ("low_var_kl", "k3"):
        log_ratio = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
    valid = ", ".join(KL_KINDS + tuple(k + "+" for k in KL_KINDS))
    raise ValueError(f"unknown KL estimator {kind!r}; valid: {valid}")


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token KL(pi || pi_ref) estimate (the ``beta * KL`` term of Eq. 2), verl's ``kl_penalty``.

    Schulman's estimators with ``d = logprob - ref_logprob``:
      - ``kl``/``k1``: ``d``; ``abs``: ``|d|``; ``mse``/``k2``: ``d^2 / 2``;
      - ``low_var_kl``/``k3``: ``exp(-d) + d - 1`` with ``-d`` clamped to [-20, 20] and the result to
        [-10, 10] (verl's clamping; verl's actor default ``kl_loss_type``).
    A trailing ``+`` (e.g. ``k3+``) keeps the value but takes the gradient of ``k2`` (straight-through,
    unbiased KL gradient), as in verl.

    Args:
        logprob: (B, T) policy log-probs; ref_logprob: (B, T) reference log-probs.

    Returns:
        (B, T) per-token estimate (aggregate with :func:`agg_loss`).
    """
    base = kind[:-1] if kind.endswith("+") else kind
    forward = _kl_forward(logprob, ref_logprob, base)
    if not kind.endswith("+") or base in ("mse", "k2"):
        return forward
    backward = 0.5 * (logprob - ref_logprob).square()
    return backward - backward.detach() + forward.detach()


# --------------------------------------------------------------------------------------------------------------
# Log-probs and entropy from logits
# --------------------------------------------------------------------------------------------------------------


def _upcast(logits: Tensor) -> Tensor:
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def token_logprobs(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probability of each chosen token under ``softmax(logits / temperature)``.

    The one place the project turns logits into per-token log-probs (trainer, sampler, diagnostics). As in
    verl's actor, logits are divided by the rollout temperature so ``old_log_probs`` describe the sampling
    distribution. Half-precision logits are upcast to float32.

    Args:
        logits: (..., V) unnormalised scores (e.g. (B, T, V), already aligned so position t predicts
            ``tokens[..., t]``).
        tokens: (...) int64 token ids.
        temperature: > 0.

    Returns:
        (...) log-probs, float32 (or float64 for float64 logits); differentiable w.r.t. ``logits``.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits (..., V) {tuple(logits.shape)} and tokens {tuple(tokens.shape)} disagree")
    x = _upcast(logits)
    if temperature != 1.0:
        x = x / temperature
    # log_softmax subtracts the row max before anything else: exact for large logits, unlike x - logsumexp(x)
    return torch.log_softmax(x, dim=-1).gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Full-vocabulary entropy ``H = -sum_v p_v log p_v`` of ``softmax(logits)`` per position.

    Numerically stable (``log_softmax``, max-shifted); ``-inf`` logits (masked vocabulary) contribute 0
    instead of NaN. Equals verl's ``entropy_from_logits`` on finite logits. Half precision is upcast.

    Args:
        logits: (..., V), e.g. (B, T, V).

    Returns:
        (...) entropy in nats, e.g. (B, T).
    """
    x = _upcast(logits)
    logp = torch.log_softmax(x, dim=-1)
    p = logp.exp()
    # where p == 0 (incl. -inf logits) use log p := 0 so neither the value nor the gradient becomes NaN
    logp = torch.where(p > 0, logp, torch.zeros((), dtype=p.dtype, device=p.device))
    return -(p * logp).sum(dim=-1)
