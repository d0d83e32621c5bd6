"""PSR, NSR and W-REINFORCE (Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement in LLM
Reasoning", arXiv 2506.01347), written as a plugin of one's own is written (docs/extending.md).

The paper splits RLVR's objective into positive and negative sample reinforcement (arXiv 2506.01347 Eqs. 3-5):
``L_PSR = -E[sum_{y: r=1} pi(y)]``, ``L_NSR = -E[sum_{y: r=0} -pi(y)]`` and W-REINFORCE
``L = lambda * L_PSR + L_NSR`` with ``lambda = 0.1``. The authors' code (RLVR-Decomposed, commit a5d4e7c1,
``verl/trainer/ppo/core_algos.py:compute_psr_nsr_outcome_advantage`` and ``ray_trainer.py``) implements them as
advantages without a group baseline: ``A_i = r_i`` (PSR), ``A_i = r_i - 1`` (NSR), ``A_i = lambda r_i`` for a
correct and ``r_i - 1`` for an incorrect rollout (W-REINFORCE), with ``r_i`` the 0/1 score; for PSR and NSR their
trainer first subsets the batch to the correct (PSR) or incorrect (NSR) rollouts, so the loss's token mean runs
over those rollouts only (:attr:`AdvantageOutput.loss_rows`). Here ``r_i`` is the grader's verdict (``correct``),
so a shaped reward (DAPO's overlong penalty) does not change it. See docs/algorithms.md.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from acerl.algos.advantages import AdvantageOutput
from acerl.algos.extension import register_estimator
from acerl.config import EstimatorParams

__all__ = ["NsrParams", "PsrParams", "WReinforceParams", "decomposed_advantages"]


def decomposed_advantages(correct: Tensor, positive_weight: float, negative_weight: float) -> Tensor:
    """``A_i = positive_weight`` for a correct rollout, ``-negative_weight`` for an incorrect one (arXiv
    2506.01347 Eq. 3-5 as advantages; the authors' ``r_i`` and ``r_i - 1`` scaled by the two weights).

    Args:
        correct: (B,) bool, the grader's verdict.
        positive_weight: PSR's weight (1 for PSR, lambda for W-REINFORCE, 0 for NSR).
        negative_weight: NSR's weight (1 for NSR and W-REINFORCE, 0 for PSR).

    Returns:
        (B,) float32 advantages.
    """
    if correct.dim() != 1:
        raise ValueError(f"correct must be 1-D (B,), got shape {tuple(correct.shape)}")
    c = correct.detach().bool()
    pos = torch.full(c.shape, float(positive_weight), device=c.device)
    neg = torch.full(c.shape, -float(negative_weight), device=c.device)
    return torch.where(c, pos, neg)


def _verdicts(correct: Tensor | None, rewards: Tensor, name: str) -> Tensor:
    if correct is None:
        raise ValueError(
            f"the {name!r} estimator needs correct=: a (B,) bool tensor of the grader's verdicts (verl: the reward "
            "manager's 'acc')"
        )
    if correct.shape != rewards.shape:
        raise ValueError(f"correct must have shape (B,) = {tuple(rewards.shape)}, got {tuple(correct.shape)}")
    return correct.bool()


class PsrParams(EstimatorParams):
    """``name: psr``: positive sample reinforcement, ``A_i = 1`` on the correct rollouts, the only ones in the loss
    (arXiv 2506.01347 Eq. 4). ``eps`` and ``norm_by_std`` are unused (no group baseline)."""

    name: Literal["psr"] = "psr"
    needs_group: ClassVar[bool] = False


class NsrParams(EstimatorParams):
    """``name: nsr``: negative sample reinforcement, ``A_i = -1`` on the incorrect rollouts, the only ones in the
    loss (arXiv 2506.01347 Eq. 5). ``eps`` and ``norm_by_std`` are unused (no group baseline)."""

    name: Literal["nsr"] = "nsr"
    needs_group: ClassVar[bool] = False


class WReinforceParams(EstimatorParams):
    """``name: w_reinforce``: ``A_i = lambda`` on correct, ``-1`` on incorrect rollouts, all in the loss (arXiv
    2506.01347 Eq. 6). ``eps`` and ``norm_by_std`` are unused (no group baseline)."""

    name: Literal["w_reinforce"] = "w_reinforce"
    needs_group: ClassVar[bool] = False
    positive_weight: float = Field(
        0.1, ge=0, description="lambda, the weight of the positive term (paper and authors' recipe: 0.1)"
    )


@register_estimator(PsrParams)
def psr_estimator(
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
    """Registry entry ``psr``: (B,) advantages 1 on correct rollouts; loss rows: the correct ones."""
    c = _verdicts(correct, rewards, "psr")
    adv = decomposed_advantages(c, 1.0, 0.0).to(
        rewards.dtype if rewards.is_floating_point() else torch.float32
    )
    return AdvantageOutput(advantages=adv, negative=adv < 0, loss_rows=c)


@register_estimator(NsrParams)
def nsr_estimator(
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
    """Registry entry ``nsr``: (B,) advantages -1 on incorrect rollouts; loss rows: the incorrect ones."""
    c = _verdicts(correct, rewards, "nsr")
    adv = decomposed_advantages(c, 0.0, 1.0).to(
        rewards.dtype if rewards.is_floating_point() else torch.float32
    )
    return AdvantageOutput(advantages=adv, negative=adv < 0, loss_rows=~c)


@register_estimator(WReinforceParams)
def w_reinforce_estimator(
    rewards: Tensor,
    group_ids: Tensor,
    logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    response_mask: Tensor | None = None,
    *,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    positive_weight: float = 0.1,
    correct: Tensor | None = None,
) -> AdvantageOutput:
    """Registry entry ``w_reinforce``: (B,) advantages lambda on correct, -1 on incorrect rollouts; all rows."""
    c = _verdicts(correct, rewards, "w_reinforce")
    adv = decomposed_advantages(c, positive_weight, 1.0)
    adv = adv.to(rewards.dtype if rewards.is_floating_point() else torch.float32)
    return AdvantageOutput(advantages=adv, negative=adv < 0)
