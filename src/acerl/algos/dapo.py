"""DAPO pieces (Yu et al. 2025) used by the DAPO and ACE-DAPO runs: dynamic sampling and overlong shaping.

:func:`filter_groups` is the group filter of verl's dynamic sampling (``algorithm.filter_groups``);
:func:`overlong_penalty` is the soft overlong punishment of verl's ``dapo`` reward manager
(``verl/workers/reward_manager/dapo.py``). Both are vectorised over the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from acerl.algos.advantages import _check_group_inputs

__all__ = ["FilterResult", "filter_groups", "overlong_penalty"]


class FilterResult(NamedTuple):
    """Result of :func:`filter_groups` (unpacks as ``keep_mask, kept_fraction``).

    Attributes:
        keep_mask: (B,) bool, True for rollouts of kept groups.
        kept_fraction: kept groups / all groups (1.0 for an empty batch).
    """

    keep_mask: Tensor
    kept_fraction: float


def filter_groups(rewards: Tensor, group_ids: Tensor) -> FilterResult:
    """DAPO dynamic sampling: drop groups whose rewards (or accuracy metric) are all equal.

    Such groups have zero GRPO advantage for every rollout, hence no policy gradient (and ACE cannot change
    that: it multiplies a zero advantage). One-rollout groups are kept, as in verl (legacy DAPO recipe:
    ``std > 0 or len == 1``; V1 replay buffer: filter iff ``len > 1 and std == 0``). "All equal" is tested
    exactly (``max == min``); verl's ``np.std(values) == 0`` agrees for binary and +1/-1 rewards but can
    keep equal non-dyadic floats (e.g. three rewards of 0.1 have ``np.std`` 1.4e-17).

    Args:
        rewards: (B,) per-rollout value the filter looks at (verl's ``filter_groups.metric``: ``acc`` or
            the score).
        group_ids: (B,) integer group id per rollout, any order.

    Returns:
        :class:`FilterResult` ``(keep_mask (B,) bool, kept_fraction)``.
    """
    _check_group_inputs(rewards, group_ids)
    if rewards.numel() == 0:
        return FilterResult(torch.zeros(0, dtype=torch.bool, device=rewards.device), 1.0)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1
    r = rewards.detach()
    if not r.is_floating_point():
        r = r.double()
    empty = torch.zeros(n_groups, dtype=r.dtype, device=r.device)
    g_max = empty.scatter_reduce(0, inverse, r, reduce="amax", include_self=False)
    g_min = empty.scatter_reduce(0, inverse, r, reduce="amin", include_self=False)
    count = torch.bincount(inverse, minlength=n_groups)
    keep_group = (g_max != g_min) | (count == 1)
    kept_fraction = float(keep_group.double().mean().item())
    return FilterResult(keep_group[inverse], kept_fraction)


def overlong_penalty(
    response_lengths: Tensor, max_response_length: int, buffer_length: int, penalty_factor: float = 1.0
) -> Tensor:
    """DAPO soft overlong punishment, added to the task reward (verl ``dapo`` reward manager).

    ``penalty = min(-(L - (max_response_length - buffer_length)) / buffer_length * penalty_factor, 0)``:
    0 up to ``max_response_length - buffer_length`` tokens, then linear down to ``-penalty_factor`` at
    ``max_response_length`` (same operations and float32 result as verl; like verl, no floor for ``L`` above
    the maximum, which generation cannot produce).

    Args:
        response_lengths: (B,) integer number of response tokens (``response_mask.sum(-1)``).
        max_response_length: generation budget (verl ``max_resp_len``).
        buffer_length: length of the linear-penalty zone (verl ``overlong_buffer.len``), > 0.
        penalty_factor: penalty at the full length (verl ``overlong_buffer.penalty_factor``).

    Returns:
        (B,) float32 penalties, each <= 0.
    """
    if buffer_length <= 0:
        raise ValueError(f"buffer_length must be positive (disable the penalty instead), got {buffer_length}")
    if max_response_length < buffer_length:
        raise ValueError(
            f"max_response_length ({max_response_length}) must be >= buffer_length ({buffer_length})"
        )
    if response_lengths.is_floating_point():
        raise TypeError(f"response_lengths must be integer token counts, got dtype {response_lengths.dtype}")
    exceed = response_lengths.long() - (max_response_length - buffer_length)
    penalty = -exceed / buffer_length * penalty_factor
    return torch.clamp(penalty, max=0.0).to(torch.float32)
