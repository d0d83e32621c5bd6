"""Group-relative advantages: GRPO (paper Sec. 3) and ACE (paper Sec. 4, Eq. 5, Alg. 1).

All functions are pure: tensors in, tensors out, no config objects. Shapes: ``B`` rollouts (all groups
concatenated, in any order), ``T`` response tokens (right-padded, ``response_mask`` marks real tokens).

Which rollouts ACE amplifies (``amplify``): ``"incorrect"`` (default; Def. 2: "for an incorrect rollout",
Alg. 1: "for each incorrect rollout y_i with r_i = 0"): rollouts the grader marked wrong (``correct``, the verdict
before any overlong penalty) whose GRPO advantage is negative; ``"negative_advantage"``: every rollout with
``A_i < 0`` (Def. 2's remark that ACE "extends to continuous rewards" by differentiating "among below-average
rollouts"). With 0/1 or +1/-1 rewards the two agree exactly; they differ under DAPO's overlong shaping, where a
correct but overlong response can fall below its group's mean. Rollouts at the group mean have ``A_i = 0`` and
are unchanged by any multiplier. See ``docs/algorithms.md``.

Trainers select an estimator by name through :data:`ADVANTAGE_ESTIMATORS` (one shared signature)::

    estimator = ADVANTAGE_ESTIMATORS.get("ace")
    out = estimator(rewards, group_ids, old_log_probs, ref_log_probs, response_mask, alpha=1.0, correct=correct)
    token_adv = out.token_level(response_mask)  # (B, T), what a token-level policy loss consumes
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from acerl.algos.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AMPLIFY_RULES",
    "MODULATIONS",
    "Amplify",
    "AdvantageEstimator",
    "AdvantageOutput",
    "Granularity",
    "ace_estimator",
    "ACE_METRIC_NAMES",
    "ace_metric_keys",
    "ace_metrics",
    "as_group_ids",
    "confidence_scores",
    "grpo_advantages",
    "grpo_estimator",
    "group_mean_std",
    "token_confidence",
]

Granularity = Literal["sequence", "token"]
Amplify = Literal["incorrect", "negative_advantage"]
AMPLIFY_RULES: tuple[str, ...] = ("incorrect", "negative_advantage")

# --------------------------------------------------------------------------------------------------------------
# Group statistics and GRPO
# --------------------------------------------------------------------------------------------------------------


def as_group_ids(index: Tensor | np.ndarray | Sequence[Any]) -> Tensor:
    """Turn any per-rollout prompt key (verl's ``uid`` strings, ints, ...) into integer group ids.

    Args:
        index: (B,) integer tensor (returned as ``long``), or an array/sequence of hashable, sortable keys
            (e.g. verl's ``non_tensor_batch["uid"]`` of ``str``). Equal keys = same group.

    Returns:
        group_ids: (B,) ``torch.long``; ids are ranks of the sorted unique keys (contiguity not required
        by the functions here, which accept any integer ids).
    """
    if isinstance(index, Tensor):
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
            raise TypeError(f"group ids must be an integer tensor, got dtype {index.dtype}")
        return index.long()
    keys = np.asarray(index, dtype=object) if not isinstance(index, np.ndarray) else index
    if keys.ndim != 1:
        raise ValueError(f"group index must be 1-D, got shape {keys.shape}")
    _, inverse = np.unique(keys, return_inverse=True)
    return torch.as_tensor(inverse.reshape(-1), dtype=torch.long)


def _check_group_inputs(rewards: Tensor, group_ids: Tensor) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B,), got shape {tuple(rewards.shape)}")
    if group_ids.dim() != 1 or group_ids.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"group_ids must have shape (B,) = ({rewards.shape[0]},), got {tuple(group_ids.shape)}"
        )
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise TypeError(f"group_ids must be an integer tensor, got dtype {group_ids.dtype}")


def group_mean_std(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-rollout group mean, unbiased std and group size, broadcast back to rollouts (vectorised).

    Matches verl's ``compute_grpo_outcome_advantage`` statistics: ``torch.std`` (unbiased, divisor G-1);
    a one-rollout group gets mean 0 and std 1 (so its GRPO advantage is ``r / (1 + eps)``). Computed in
    float64 with a two-pass variance, so the result is the correctly rounded value of the exact statistics.

    Args:
        rewards: (B,) scalar reward per rollout (any real dtype).
        group_ids: (B,) integer prompt/group id per rollout; any values, any order.

    Returns:
        mean: (B,) float64, std: (B,) float64, count: (B,) int64 -- each rollout's group statistics.
    """
    _check_group_inputs(rewards, group_ids)
    r = rewards.detach().to(torch.float64)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    count = torch.bincount(inverse, minlength=n_groups)
    n = count.to(torch.float64)
    mean_g = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, r) / n
    dev = r - mean_g[inverse]
    ss_g = torch.zeros_like(mean_g).index_add_(0, inverse, dev * dev)
    single = count == 1
    std_g = torch.sqrt(ss_g / torch.where(single, 1.0, n - 1.0))
    mean_g = torch.where(single, 0.0, mean_g)
    std_g = torch.where(single, 1.0, std_g)
    return mean_g[inverse], std_g[inverse], count[inverse]


def _result_dtype(rewards: Tensor) -> torch.dtype:
    return rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()


def grpo_advantages(
    rewards: Tensor, group_ids: Tensor, eps: float = 1e-6, norm_by_std: bool = True
) -> Tensor:
    """GRPO outcome advantage ``A_i = (r_i - mean_x) / (std_x + eps)`` (paper Sec. 3, used in Eq. 2).

    Equal to verl's ``compute_grpo_outcome_advantage`` (its per-token output is this value times the
    response mask): unbiased std, ``eps`` added to the std, one-rollout groups use mean 0 / std 1;
    ``norm_by_std=False`` is verl's ``norm_adv_by_std_in_grpo=False`` (Dr. GRPO: ``r_i - mean_x``).
    All-equal groups give ``A_i = 0`` (up to rounding of the mean for non-binary rewards).

    Args:
        rewards: (B,) scalar reward per rollout.
        group_ids: (B,) integer group (prompt) id per rollout; unsorted / non-contiguous ids are fine.
        eps: added to the std (verl's ``epsilon``; the paper's App. C sketch uses 1e-8).
        norm_by_std: divide by ``std + eps`` (GRPO) or not (Dr. GRPO).

    Returns:
        advantages: (B,), dtype of ``rewards`` (default float dtype for integer rewards), no grad.
    """
    mean, std, _ = group_mean_std(rewards, group_ids)
    adv = rewards.detach().to(torch.float64) - mean
    if norm_by_std:
        adv = adv / (std + eps)
    return adv.to(_result_dtype(rewards))


# --------------------------------------------------------------------------------------------------------------
# Confidence scores and ACE
# --------------------------------------------------------------------------------------------------------------


def _check_token_inputs(logprobs: Tensor, ref_logprobs: Tensor, response_mask: Tensor) -> None:
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be 2-D (B, T), got shape {tuple(logprobs.shape)}")
    if ref_logprobs.shape != logprobs.shape or response_mask.shape != logprobs.shape:
        raise ValueError(
            "logprobs, ref_logprobs and response_mask must share shape (B, T); got "
            f"{tuple(logprobs.shape)}, {tuple(ref_logprobs.shape)}, {tuple(response_mask.shape)}"
        )


def token_confidence(logprobs: Tensor, ref_logprobs: Tensor, response_mask: Tensor) -> Tensor:
    """Per-token confidence shift ``c_i^(t) = log pi(y_t|.) - log pi_ref(y_t|.)`` (Def. 1 summand, App. C).

    Args:
        logprobs: (B, T) log-probs of the sampled tokens under the policy.
        ref_logprobs: (B, T) log-probs of the same tokens under the reference policy.
        response_mask: (B, T) 1 for response tokens, 0 for padding (any dtype).

    Returns:
        (B, T) log-ratio, exactly 0 at masked positions (NaN/inf in padding does not leak); at least float32;
        differentiable (callers that need a stop-gradient detach it).
    """
    _check_token_inputs(logprobs, ref_logprobs, response_mask)
    dtype = torch.promote_types(torch.promote_types(logprobs.dtype, ref_logprobs.dtype), torch.float32)
    diff = logprobs.to(dtype) - ref_logprobs.to(dtype)
    return torch.where(response_mask.bool(), diff, torch.zeros((), dtype=dtype, device=diff.device))


# Row chunk size (elements) for the CPU pass over (B, T) log-probs: temporaries stay in cache, which makes the
# pass several times faster than whole-tensor temporaries of B x T floats.
_CHUNK_ELEMENTS = 1 << 17


def _masked_log_ratio_sums(
    logprobs: Tensor, ref_logprobs: Tensor, response_mask: Tensor, chunk_elements: int = _CHUNK_ELEMENTS
) -> tuple[Tensor, Tensor]:
    """Per-row ``sum_t mask * (logprobs - ref_logprobs)`` and token counts, both (B,).

    Equal to ``token_confidence(...).sum(-1)`` (bit for bit): the fast path multiplies by the 0/1 mask; a
    row whose sum is not finite (NaN/inf in its padding) is recomputed ignoring padding entirely.
    """
    _check_token_inputs(logprobs, ref_logprobs, response_mask)
    dtype = torch.promote_types(torch.promote_types(logprobs.dtype, ref_logprobs.dtype), torch.float32)
    B, T = logprobs.shape
    if B == 0:
        empty = torch.zeros(0, dtype=dtype, device=logprobs.device)
        return empty, empty.clone()
    rows = B if logprobs.device.type != "cpu" else max(1, chunk_elements // max(T, 1))
    sums, counts = [], []
    for start in range(0, B, rows):
        keep = response_mask[start : start + rows] != 0
        weight = keep.to(dtype)
        diff = logprobs[start : start + rows].to(dtype) - ref_logprobs[start : start + rows].to(dtype)
        row_sum = (diff * weight).sum(dim=-1)
        bad = ~torch.isfinite(row_sum)
        if bool(bad.any()):
            safe = torch.where(keep, diff, torch.zeros((), dtype=dtype, device=diff.device)).sum(dim=-1)
            row_sum = torch.where(bad, safe, row_sum)
        sums.append(row_sum)
        counts.append(weight.sum(dim=-1))
    return torch.cat(sums), torch.cat(counts)


def confidence_scores(
    logprobs: Tensor, ref_logprobs: Tensor, response_mask: Tensor, length_normalize: bool = True
) -> Tensor:
    """Error confidence score ``c_i`` (paper Def. 1; Alg. 1 line 8 when ``length_normalize``).

    ``c_i = sum_t mask_it * (log pi(y_it) - log pi_ref(y_it))``, divided by ``T_i = sum_t mask_it`` when
    ``length_normalize`` (paper Sec. 4.3 "Practical considerations", Alg. 1, App. C code). A fully masked
    row has ``T_i = 0`` and gets ``c_i = 0``. Values at padding positions are ignored, even NaN/inf.

    Args:
        logprobs: (B, T) policy log-probs of the sampled tokens.
        ref_logprobs: (B, T) reference log-probs of the same tokens.
        response_mask: (B, T) 1 for response tokens, 0 for padding (nonzero counts as 1).
        length_normalize: divide the sequence sum by the response length ``T_i``.

    Returns:
        c: (B,), at least float32, differentiable (ACE detaches it).
    """
    c, lengths = _masked_log_ratio_sums(logprobs, ref_logprobs, response_mask)
    if length_normalize:
        c = torch.where(lengths > 0, c / lengths.clamp(min=1), torch.zeros_like(c))
    return c


MODULATIONS: Registry[Callable[[Tensor], Tensor]] = Registry("ACE modulation")


@MODULATIONS.register("softplus")
def softplus_modulation(c: Tensor) -> Tensor:
    """``phi(c) = log(1 + e^c)`` (paper default, Eq. 5); > 0 everywhere, phi(0) = ln 2."""
    return F.softplus(c)


@MODULATIONS.register("relu")
def relu_modulation(c: Tensor) -> Tensor:
    """``phi(c) = max(0, c)`` (paper ablation "ACE-ReLU", Table ``tab:ablation_modulation``)."""
    return torch.relu(c)


def _nanmean(values: Tensor, select: Tensor) -> float:
    n = int(select.sum().item())
    return float(values[select].double().mean().item()) if n else math.nan


ACE_METRIC_NAMES = (
    "negative_frac",
    "confidence_mean_neg",
    "overconfident_frac_neg",
    "multiplier_mean_neg",
    "multiplier_max",
)
"""The names :func:`ace_metrics` reports, in its order (both trainers log them under ``ace/``)."""


def ace_metric_keys(prefix: str = "ace/") -> tuple[str, ...]:
    """The keys :func:`ace_metrics` returns with ``prefix``."""
    return tuple(f"{prefix}{name}" for name in ACE_METRIC_NAMES)


def ace_metrics(
    confidence: Tensor,
    multiplier: Tensor,
    negative: Tensor,
    amplified: Tensor,
    response_mask: Tensor,
    prefix: str = "ace/",
) -> dict[str, float]:
    """ACE's scalar summaries: the fraction of negative-advantage rollouts, and over the amplified rollouts (the
    errors ACE acts on) the mean confidence, the fraction with ``c > 0`` (overconfident errors, Remark
    ``regimes``) and the multiplier's mean and max. Means over an empty set are NaN.

    Args:
        confidence: ``c_i`` (B,), or per-token ``c_i^(t)`` (B, T) (only response tokens count).
        multiplier: same shape as ``confidence`` (all ones for an estimator that amplifies nothing).
        negative: (B,) bool, ``A_i < 0``.
        amplified: (B,) bool, the rollouts ACE amplifies (or would amplify).
        response_mask: (B, T) 1 for response tokens; used when ``confidence`` is per token.
    """
    neg = amplified if confidence.dim() == 1 else amplified[:, None] & response_mask.bool()
    n_neg = int(neg.sum().item())
    values = (
        float(negative.double().mean().item()) if negative.numel() else 0.0,
        _nanmean(confidence, neg),
        _nanmean((confidence > 0).double(), neg),
        _nanmean(multiplier, neg),
        float(multiplier[neg].max().item()) if n_neg else math.nan,
    )
    return dict(zip(ace_metric_keys(prefix), values, strict=True))


def _correct_mask(correct: Tensor | None, batch: int, amplify: str) -> Tensor:
    """(B,) bool: rollouts exempt from amplification (the correct ones for ``"incorrect"``, none otherwise)."""
    if amplify not in AMPLIFY_RULES:
        raise ValueError(f"amplify must be one of {', '.join(AMPLIFY_RULES)}; got {amplify!r}")
    if amplify == "negative_advantage":
        return torch.zeros(batch, dtype=torch.bool)
    if correct is None:
        raise ValueError(
            "ACE with amplify='incorrect' needs correct=: a (B,) bool tensor of the grader's verdicts before any "
            "overlong penalty (verl: the reward manager's 'acc'); or pass amplify='negative_advantage' to "
            "amplify every rollout with a negative advantage"
        )
    if correct.dim() != 1 or correct.shape[0] != batch:
        raise ValueError(f"correct must have shape (B,) = ({batch},), got {tuple(correct.shape)}")
    return correct.detach().bool()


# --------------------------------------------------------------------------------------------------------------
# Estimator registry (one shared signature)
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdvantageOutput:
    """What every registered estimator returns: the advantages and, from ACE, the quantities behind them.

    Attributes:
        advantages: (B,) sequence-level or (B, T) token-level (zero on padding) advantages, no grad.
        negative: (B,) bool, the GRPO advantage ``A_i < 0``.
        confidence: ACE's detached ``c_i`` (B,) or per-token ``c_i^(t)`` (B, T); ``None`` from GRPO.
        multiplier: ``1 + alpha * phi(c)`` on amplified rollouts (their response tokens for ``"token"``), 1
            elsewhere; same shape as ``confidence``; always >= 1; ``None`` from GRPO.
        amplified: (B,) bool, the rollouts ACE amplifies (``negative`` and, with ``amplify="incorrect"``,
            incorrect); ``None`` from GRPO.
        loss_rows: (B,) bool, the rollouts that enter the policy loss (its token counts included): PSR keeps the
            correct ones, NSR the incorrect ones, as the authors' trainer subsets its batch; ``None``: all.
    """

    advantages: Tensor
    negative: Tensor
    confidence: Tensor | None = None
    multiplier: Tensor | None = None
    amplified: Tensor | None = None
    loss_rows: Tensor | None = None

    def loss_mask(self, response_mask: Tensor) -> Tensor:
        """(B, T) the tokens the policy loss counts: ``response_mask`` on :attr:`loss_rows` (all rows if None)."""
        if self.loss_rows is None:
            return response_mask
        return response_mask * self.loss_rows.to(response_mask.device)[:, None].to(response_mask.dtype)

    def token_level(self, response_mask: Tensor) -> Tensor:
        """(B, T) advantages zeroed on padding -- verl's ``data.batch["advantages"]`` layout."""
        mask = response_mask.to(self.advantages.dtype)
        adv = self.advantages if self.advantages.dim() == 2 else self.advantages[:, None]
        return adv * mask


class AdvantageEstimator(Protocol):
    """Shared estimator signature. Estimators that do not need log-probs accept and ignore them; every
    estimator also takes the keyword ``correct`` ((B,) bool verdicts before any overlong penalty, or ``None``).
    A config's parameters are its estimator's keywords: ``ADVANTAGE_ESTIMATORS.get(est.name)(..., **est.kwargs())``
    (``acerl.config``'s schema validates them). ``*args: Any, **params: Any`` is the typing spelling of "and
    any further arguments": each estimator declares its own keywords."""

    def __call__(
        self,
        rewards: Tensor,
        group_ids: Tensor,
        logprobs: Tensor | None,
        ref_logprobs: Tensor | None,
        response_mask: Tensor | None,
        *args: Any,
        **params: Any,
    ) -> AdvantageOutput: ...


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_estimator(
    rewards: Tensor,
    group_ids: Tensor,
    logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    response_mask: Tensor | None = None,
    *,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    correct: Tensor | None = None,
) -> AdvantageOutput:
    """Registry entry ``grpo``: :func:`grpo_advantages` (log-probs and ``correct`` unused). Returns (B,)
    advantages."""
    adv = grpo_advantages(rewards, group_ids, eps=eps, norm_by_std=norm_by_std)
    return AdvantageOutput(advantages=adv, negative=adv < 0)


@ADVANTAGE_ESTIMATORS.register("ace")
def ace_estimator(
    rewards: Tensor,
    group_ids: Tensor,
    logprobs: Tensor | None,
    ref_logprobs: Tensor | None,
    response_mask: Tensor | None,
    *,
    alpha: float = 1.0,
    modulation: str = "softplus",
    length_normalize: bool = True,
    granularity: Granularity = "sequence",
    eps: float = 1e-6,
    norm_by_std: bool = True,
    amplify: Amplify = "incorrect",
    correct: Tensor | None = None,
) -> AdvantageOutput:
    """Registry entry ``ace``: ``A_ACE,i = A_i * (1 + alpha * phi(c_i))`` for amplified rollouts, ``A_i`` otherwise.

    Paper Eq. 5 (Def. 2) / Alg. 1 lines 6-9, substituted into Eq. 8.
    ``A_i`` is :func:`grpo_advantages`; ``c_i`` is :func:`confidence_scores`, detached (stop-gradient,
    Remark ``why_stop_gradient``). ``granularity="token"`` is App. C's token-level variant: per-token
    ``c_i^(t)`` and multiplier ``1 + alpha * phi(c_i^(t))`` on every token of a negative rollout
    (``length_normalize`` does not apply). ``alpha = 0`` returns GRPO's advantages exactly.

    Args:
        rewards: (B,) scalar reward per rollout (binary 0/1, DAPO +1/-1, or continuous).
        group_ids: (B,) integer group id per rollout.
        logprobs: (B, T) log-probs of the sampled tokens under the policy whose confidence is measured
            (the trainer passes the rollout policy's ``old_log_probs``).
        ref_logprobs: (B, T) log-probs under the reference policy (with verl, they exist only when a KL loss
            or KL reward is on; see docs/verl.md).
        response_mask: (B, T) 1 for response tokens.
        alpha: ACE strength, >= 0 (paper default 1.0).
        modulation: ``"softplus"`` (default) or ``"relu"``; see :data:`MODULATIONS`.
        length_normalize: use ``c_i / T_i`` (default, Alg. 1) instead of the sequence sum (Def. 1).
        granularity: ``"sequence"`` (paper main experiments) or ``"token"`` (App. C variant).
        eps, norm_by_std: passed to :func:`grpo_advantages`.
        amplify: ``"incorrect"`` (default, Def. 2 / Alg. 1): rollouts with ``correct`` False and ``A_i < 0``;
            ``"negative_advantage"``: every rollout with ``A_i < 0``.
        correct: (B,) bool, the grader's verdict before any overlong penalty (verl: the reward manager's
            ``acc``); required by ``amplify="incorrect"``.

    Returns:
        :class:`AdvantageOutput` with ``confidence``, ``multiplier`` and ``amplified``; ``advantages`` (B,) for
        ``"sequence"``, (B, T) for ``"token"``, dtype of ``rewards``; no grad.

    Raises:
        ValueError: a log-prob input missing, bad ``alpha`` / ``granularity`` / ``amplify``, ``correct`` missing
            for ``"incorrect"`` or not of shape (B,).
    """
    if logprobs is None or ref_logprobs is None or response_mask is None:
        raise ValueError(
            "the 'ace' advantage estimator needs logprobs, ref_logprobs and response_mask (B, T); got None "
            "(is the reference policy enabled? ACE-DAPO needs use_kl_loss=True with kl_loss_coef=0)"
        )
    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0 (paper Def. 2), got {alpha!r}")
    if granularity not in ("sequence", "token"):
        raise ValueError(f"granularity must be 'sequence' or 'token', got {granularity!r}")
    phi = MODULATIONS.get(modulation)
    _check_token_inputs(logprobs, ref_logprobs, response_mask)
    if logprobs.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"logprobs has {logprobs.shape[0]} rows but rewards has {rewards.shape[0]} entries; both must be B"
        )
    base = grpo_advantages(rewards, group_ids, eps=eps, norm_by_std=norm_by_std)
    negative = base < 0
    amplified = negative & ~_correct_mask(correct, rewards.shape[0], amplify).to(negative.device)
    with torch.no_grad():
        if granularity == "sequence":
            conf = confidence_scores(logprobs, ref_logprobs, response_mask, length_normalize).detach()
            where = amplified
        else:
            conf = token_confidence(logprobs, ref_logprobs, response_mask).detach()
            mask = response_mask.bool()
            where = amplified[:, None] & mask
        bonus = alpha * phi(conf) if alpha != 0 else torch.zeros_like(conf)
        multiplier = torch.where(where, 1.0 + bonus, torch.ones_like(conf))
        if granularity == "sequence":
            adv = base * multiplier.to(base.dtype)
        else:
            adv = base[:, None] * multiplier.to(base.dtype) * mask.to(base.dtype)
    return AdvantageOutput(
        advantages=adv, negative=negative, confidence=conf, multiplier=multiplier, amplified=amplified
    )
