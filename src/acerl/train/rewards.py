"""Rollout rewards (Alg. 1 line 5): the verifier's verdict as a task reward, plus DAPO's overlong shaping.

The verifier is :class:`acerl.grading.Grader` (the one grader shared with evaluation); anything with the same
``grade_many`` method works. The reward *kind* is a config value (``families.<f>.reward``):

- ``binary``: 1 for a correct response, 0 otherwise (the paper, Sec. 3);
- ``signed``: +1 / -1 (verl's ``math_dapo`` rewards used by DAPO).

With ``families.<f>.overlong.enable`` the soft overlong penalty of DAPO (:func:`acerl.algos.dapo.overlong_penalty`)
is added to the task reward, as verl's ``dapo`` reward manager does; correctness (``acc``) is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from acerl.algos.dapo import overlong_penalty
from acerl.config import OverlongShaping

__all__ = ["REWARD_VALUES", "Rewards", "Verifier", "compute_rewards", "task_rewards"]

REWARD_VALUES: dict[str, tuple[float, float]] = {"binary": (1.0, 0.0), "signed": (1.0, -1.0)}
"""Reward kind -> (reward of a correct response, reward of an incorrect one)."""


class Verifier(Protocol):
    """What the trainer needs from a grader: one verdict (with a boolean ``correct``) per pair, in order."""

    def grade_many(self, items: Sequence[tuple[str, str]], *, progress: bool | None = None) -> list[Any]: ...


@dataclass(frozen=True)
class Rewards:
    """Per-rollout rewards of a batch.

    Attributes:
        scores: (B,) float32 reward used for advantages (task reward + overlong penalty).
        correct: (B,) bool verifier verdicts (verl's ``acc``; the dynamic-sampling filter looks at these).
        overlong: (B,) float32 overlong penalty included in ``scores`` (zeros when shaping is off).
    """

    scores: Tensor
    correct: Tensor
    overlong: Tensor


def task_rewards(correct: Tensor, kind: str) -> Tensor:
    """(B,) bool verdicts -> (B,) float32 task rewards of the given kind (see :data:`REWARD_VALUES`)."""
    try:
        good, bad = REWARD_VALUES[kind]
    except KeyError:
        raise ValueError(f"unknown reward kind {kind!r}; valid: {', '.join(REWARD_VALUES)}") from None
    return torch.where(correct, torch.tensor(good), torch.tensor(bad)).to(torch.float32)


def compute_rewards(
    verifier: Verifier,
    responses: Sequence[str],
    golds: Sequence[str],
    response_lengths: Tensor,
    kind: str,
    overlong: OverlongShaping,
    max_response_length: int,
) -> Rewards:
    """Grade ``responses`` against ``golds`` and turn the verdicts into rewards.

    Args:
        verifier: e.g. :class:`acerl.grading.Grader`.
        responses: B decoded responses (EOS stripped); golds: B reference answers.
        response_lengths: (B,) int response lengths in tokens (EOS included, as in verl).
        kind: ``binary`` or ``signed``; overlong: the family's overlong-shaping settings.
        max_response_length: the generation budget in tokens.
    """
    if len(responses) != len(golds):
        raise ValueError(f"{len(responses)} responses but {len(golds)} gold answers")
    verdicts = verifier.grade_many(list(zip(responses, golds, strict=True)), progress=False)
    correct = torch.tensor([bool(v.correct) for v in verdicts], dtype=torch.bool)
    scores = task_rewards(correct, kind)
    penalty = torch.zeros_like(scores)
    if overlong.enable:
        penalty = overlong_penalty(
            response_lengths.cpu(), max_response_length, overlong.buffer, overlong.penalty_factor
        )
        scores = scores + penalty
    return Rewards(scores=scores, correct=correct, overlong=penalty)
