"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617, Sec. 5), written as a plugin of one's own is written (docs/extending.md).

Both act on the tokens with the largest centred covariance ``cov_t = (A_t - mean A) (log pi_t - mean log pi)``
over the batch's response tokens, which the paper shows drive entropy collapse. Clip-Cov detaches the gradient of
``clip_cov_ratio`` of the tokens, drawn at random among those whose covariance lies in ``(clip_cov_lb,
clip_cov_ub)`` and that the PPO clip has not already clipped (arXiv 2505.22617 Eq. 11); KL-Cov adds ``ppo_kl_coef *
|log pi - log pi_old|`` to the loss of the top ``kl_cov_ratio`` tokens by covariance and drops the PPO clip (arXiv
2505.22617 Eq. 12). Both equal verl 0.9.1's ``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov``
(``verl/trainer/ppo/core_algos.py``; ``tests/algos/test_covariance.py``); defaults are verl's actor config.
Clip-Cov's random draw uses torch's global generator, as verl's does.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor

from acerl.algos.extension import register_policy_loss
from acerl.algos.losses import PolicyLossOutput, agg_loss, masked_mean
from acerl.config import PolicyLossParams

__all__ = ["ClipCovParams", "KlCovParams", "clip_cov_policy_loss", "kl_cov_policy_loss", "token_covariance"]


def token_covariance(advantages: Tensor, log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """(B, T) ``(A - masked_mean(A)) * (log pi - masked_mean(log pi))`` (arXiv 2505.22617 Eq. 10's summand, as
    verl's Clip-Cov computes it); no grad."""
    with torch.no_grad():
        return (advantages - masked_mean(advantages, response_mask)) * (
            log_prob.detach() - masked_mean(log_prob.detach(), response_mask)
        )


class ClipCovParams(PolicyLossParams):
    """``name: clip_cov``: Clip-Cov's keys (verl 0.9.1 ``actor.policy_loss`` defaults)."""

    name: Literal["clip_cov"] = "clip_cov"
    clip_cov_ratio: float = Field(
        0.0002,
        gt=0,
        le=1,
        description="fraction of response tokens whose gradient is detached (verl: 0.0002)",
    )
    clip_cov_lb: float = Field(1.0, description="lower covariance bound of the tokens drawn from (verl: 1.0)")
    clip_cov_ub: float = Field(5.0, description="upper covariance bound of the tokens drawn from (verl: 5.0)")

    @model_validator(mode="after")
    def _bounds(self) -> ClipCovParams:
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(
                f"clip_cov_lb ({self.clip_cov_lb}) must be below clip_cov_ub ({self.clip_cov_ub})"
            )
        return self


class KlCovParams(PolicyLossParams):
    """``name: kl_cov``: KL-Cov's keys (verl 0.9.1 ``actor.policy_loss`` defaults)."""

    name: Literal["kl_cov"] = "kl_cov"
    kl_cov_ratio: float = Field(
        0.0002, gt=0, le=1, description="fraction of response tokens given the KL penalty (verl: 0.0002)"
    )
    ppo_kl_coef: float = Field(
        0.1, ge=0, description="coefficient of |log pi - log pi_old| on those tokens (verl's config: 0.1)"
    )


@register_policy_loss(ClipCovParams)
def clip_cov_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    dp_size: int = 1,
    batch_num_tokens: int | Tensor | None = None,
    global_batch_size: int | Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> PolicyLossOutput:
    """Clip-Cov (arXiv 2505.22617 Eq. 11): the PPO clipped surrogate (no dual clip, ``clip_ratio_c`` unused)
    with the gradient of ``max(1, int(clip_cov_ratio * N))`` randomly drawn tokens of covariance in
    ``(clip_cov_lb, clip_cov_ub)``, not already clipped, set to zero.

    Args:
        old_log_prob, log_prob: (B, T); advantages: (B, T) or (B,); response_mask: (B, T).

    Returns:
        :class:`PolicyLossOutput` with ``actor/pg_clipfrac`` (the detached tokens' fraction, as verl) and
        ``actor/ppo_kl``.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(log_prob).contiguous()
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)

    cov = token_covariance(advantages, log_prob, response_mask)
    cov[response_mask == 0] = -torch.inf
    cov[clip_by_origin] = -torch.inf
    clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    candidates = torch.nonzero((cov < clip_cov_ub) & (cov > clip_cov_lb) & (response_mask > 0))
    if len(candidates) > 0:
        candidates = candidates[torch.randperm(len(candidates))[: min(clip_num, len(candidates))]]
    corr = torch.ones_like(advantages)
    corr[candidates[:, 0], candidates[:, 1]] = 0
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr
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
        "actor/pg_clipfrac": masked_mean((corr == 0).float(), response_mask).item(),
        "actor/ppo_kl": ppo_kl.detach().item(),
    }
    return PolicyLossOutput(loss=loss, metrics=metrics)


@register_policy_loss(KlCovParams)
def kl_cov_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
    dp_size: int = 1,
    batch_num_tokens: int | Tensor | None = None,
    global_batch_size: int | Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> PolicyLossOutput:
    """KL-Cov (arXiv 2505.22617 Eq. 12): ``-A * ratio`` (no clip; the clip ratios are unused) on every token,
    plus ``ppo_kl_coef * |log pi - log pi_old|`` on the top ``max(1, int(kl_cov_ratio * N))`` tokens by
    covariance (ties broken by ``torch.topk``, as verl).

    Args:
        old_log_prob, log_prob: (B, T); advantages: (B, T) or (B,); response_mask: (B, T).

    Returns:
        :class:`PolicyLossOutput` with ``actor/ppo_kl`` (mean ``|log pi - log pi_old|``, as verl).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(log_prob).contiguous()
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses = -advantages * ratio
    valid = response_mask > 0
    flat = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    if len(flat) > 0:
        adv = advantages[valid].detach().reshape(-1).cpu()
        logp = log_prob[valid].detach().reshape(-1).cpu()
        cov = (adv - adv.mean()) * (logp - logp.mean())
        top = flat[torch.topk(cov, max(1, int(len(cov) * kl_cov_ratio)), largest=True).indices]
        rows, cols = top // advantages.shape[1], top % advantages.shape[1]
        penalised = pg_losses + ppo_kl_coef * negative_approx_kl.abs()
        pg_losses = pg_losses.clone()
        pg_losses[rows, cols] = penalised[rows, cols]
    loss = agg_loss(
        pg_losses,
        response_mask,
        loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
    return PolicyLossOutput(
        loss=loss, metrics={"actor/ppo_kl": masked_mean(negative_approx_kl.abs(), response_mask).item()}
    )
