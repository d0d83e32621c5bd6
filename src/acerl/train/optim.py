"""Optimizer and learning-rate schedule of the local trainer (Alg. 1 line 13: "Update theta").

AdamW with the model's :class:`acerl.config.TrainHyper` (``lr``, ``betas``, ``weight_decay``); the schedule
multiplies ``lr`` by a factor of the training step (the scheduler is stepped once per training step, as verl's
actor does). Schedules match verl's ``get_constant_schedule_with_warmup`` and
``get_cosine_schedule_with_warmup`` (``min_lr_ratio=0``, half a cosine, 0-indexed steps).
The optimizer and the schedule are :class:`acerl.optim.AdamW` and :class:`acerl.optim.StepSchedule`
(``torch.optim.AdamW`` and ``LambdaLR``, the same arithmetic, without ``torch.optim``'s base class).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from acerl.config import TrainHyper
from acerl.optim import ADAM_EPS, AdamW, StepSchedule

__all__ = ["LR_SCHEDULES", "build_optimizer", "constant_with_warmup", "cosine_with_warmup", "lr_factor"]


def constant_with_warmup(step: int, warmup_steps: int, total_steps: int) -> float:
    """``step / warmup_steps`` during warm-up, then 1 (verl ``get_constant_schedule_with_warmup``)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return 1.0


def cosine_with_warmup(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up, then ``0.5 * (1 + cos(pi * progress))`` down to 0 at ``total_steps``
    (verl ``get_cosine_schedule_with_warmup`` with ``min_lr_ratio=0``, ``num_cycles=0.5``)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


LR_SCHEDULES: dict[str, Callable[[int, int, int], float]] = {
    "constant": constant_with_warmup,
    "cosine": cosine_with_warmup,
}


def lr_factor(schedule: str, step: int, warmup_steps: int, total_steps: int) -> float:
    """The LR multiplier of ``schedule`` at 0-indexed training ``step``."""
    try:
        fn = LR_SCHEDULES[schedule]
    except KeyError:
        raise ValueError(f"unknown lr_schedule {schedule!r}; valid: {', '.join(LR_SCHEDULES)}") from None
    return fn(step, warmup_steps, total_steps)


def build_optimizer(params: Iterable[torch.nn.Parameter], hyper: TrainHyper) -> tuple[AdamW, StepSchedule]:
    """AdamW over ``params`` and its LR schedule (stepped once per training step)."""
    optimizer = AdamW(
        list(params), lr=hyper.lr, betas=hyper.betas, eps=ADAM_EPS, weight_decay=hyper.weight_decay
    )
    schedule, warmup, total = hyper.lr_schedule, hyper.warmup_steps, hyper.total_steps
    lr_factor(schedule, 0, warmup, total)  # validate the name now
    scheduler = StepSchedule(optimizer, lambda step: lr_factor(schedule, step, warmup, total))
    return optimizer, scheduler
