"""Verified algorithm core: GRPO / ACE advantages, DAPO helpers, PPO-style losses (pure torch functions).

Paper: "Overconfident Errors Need Stronger Correction" (ACE), Sec. 3-4, Algorithm 1, App. C. Every function
here matches its verl 0.9.1 counterpart where one exists; see ``docs/algorithms.md``.
"""

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
from acerl.algos.losses import (
    KL_KINDS,
    LOSS_AGG_MODES,
    LossAggMode,
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
    "AdvantageEstimator",
    "AdvantageOutput",
    "FilterResult",
    "Granularity",
    "LossAggMode",
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
    "token_confidence",
    "token_logprobs",
    "vanilla_policy_loss",
]
