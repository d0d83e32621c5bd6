"""Verified algorithm core: GRPO / ACE advantages, DAPO helpers, PPO-style losses (pure torch functions), the
registration calls of a method of one's own, and the methods ACE is compared with (PSR, NSR, W-REINFORCE, Clip-Cov,
KL-Cov: :mod:`acerl.algos.decomposed`, :mod:`acerl.algos.covariance`).

Paper: "Overconfident Errors Need Stronger Correction" (ACE), Sec. 3-4, Algorithm 1, App. C. Every function
here matches its verl 0.9.1 counterpart where one exists; see ``docs/algorithms.md``.
"""

from acerl.algos import covariance, decomposed  # noqa: F401 (acerl's own plugins register on import)
from acerl.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    MODULATIONS,
    AdvantageEstimator,
    AdvantageOutput,
    Granularity,
    ace_estimator,
    ace_metrics,
    as_group_ids,
    confidence_scores,
    group_mean_std,
    grpo_advantages,
    grpo_estimator,
    token_confidence,
)
from acerl.algos.dapo import FilterResult, filter_groups, overlong_penalty
from acerl.algos.extension import register_estimator, register_policy_loss
from acerl.algos.losses import (
    KL_KINDS,
    LOSS_AGG_MODES,
    POLICY_LOSS_FUNCTIONS,
    LossAggMode,
    PolicyLoss,
    PolicyLossOutput,
    agg_loss,
    entropy_from_logits,
    kl_penalty,
    masked_mean,
    masked_sum,
    token_logprobs,
    vanilla_policy_loss,
)
from acerl.algos.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_KINDS",
    "LOSS_AGG_MODES",
    "MODULATIONS",
    "POLICY_LOSS_FUNCTIONS",
    "AdvantageEstimator",
    "AdvantageOutput",
    "FilterResult",
    "Granularity",
    "LossAggMode",
    "PolicyLoss",
    "PolicyLossOutput",
    "Registry",
    "ace_estimator",
    "ace_metrics",
    "agg_loss",
    "as_group_ids",
    "confidence_scores",
    "entropy_from_logits",
    "filter_groups",
    "grpo_advantages",
    "grpo_estimator",
    "group_mean_std",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "overlong_penalty",
    "register_estimator",
    "register_policy_loss",
    "token_confidence",
    "token_logprobs",
    "vanilla_policy_loss",
]
