"""The rollout/train probability gap: whether vLLM samples from the weights the FSDP actor trains.

verl 0.9.1's V1 trainer logs, per step, the mean of ``|p_vllm - p_fsdp|`` over the response tokens
(:data:`GAP_KEY`, from ``verl/utils/debug/metrics.py:calculate_debug_metrics`` while
``rollout.calculate_log_probs`` is on, verl's default): ``p_vllm`` is the probability vLLM sampled each token
with, ``p_fsdp`` the one the actor recomputes. The synchronous trainer copies the actor's weights into vLLM
before step 1 (``on_init_end``) and after every update (``on_step_end``), so step 1's gap measures the kernels'
and bf16's disagreement on the same weights, and every later step's gap also measures the sync that followed an
update. :func:`gap_problem` is the rule the canary fails on (``acerl canary check``) and the ACE plugin warns
on in the training log at scale. The numbers are argued in docs/cluster.md ("Canary").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["GAP_KEY", "GapLimits", "gap_of", "gap_problem", "metric"]

GAP_KEY = "training/rollout_probs_diff_mean"


@dataclass(frozen=True)
class GapLimits:
    """``limit``: the mean gap any step may show; ``jump`` / ``floor``: after a weight sync (step >= 2) the gap
    may also not exceed ``jump`` times the first step's, unless it stays below ``floor``."""

    limit: float = 0.02
    jump: float = 3.0
    floor: float = 0.005


def metric(row: Mapping[str, Any], key: str) -> float | None:
    """``row[key]`` as a float, or ``None`` when it is missing or not a finite number (verl logs NaN where a
    metric has no input, e.g. an empty response mask)."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def gap_of(row: Mapping[str, Any]) -> float | None:
    """The step's mean gap (:func:`metric` of :data:`GAP_KEY`)."""
    return metric(row, GAP_KEY)


def gap_problem(step: int, gap: float, first: float | None, limits: GapLimits = GapLimits()) -> str | None:
    """What is wrong with ``gap`` at ``step``, or ``None``; ``first`` is the gap of the attempt's first step
    (``None`` at that step itself), whose rollouts no post-update sync preceded."""
    if gap > limits.limit:
        return f"rollout/train probability gap {gap:.4f} at step {step} is above {limits.limit} ({GAP_KEY})"
    if first is not None and gap > max(limits.jump * first, limits.floor):
        return (
            f"rollout/train probability gap {gap:.4f} at step {step} is more than {limits.jump:g}x the first "
            f"step's {first:.4f} ({GAP_KEY}): vLLM may sample from stale weights (the weight sync after an update)"
        )
    return None
