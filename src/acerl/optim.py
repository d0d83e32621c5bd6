"""The local trainer's optimizer (Alg. 1 line 13: "Update theta") and its LR schedule.

The plain path, what a reader should read first: :func:`build_optimizer` returns ``torch.optim.AdamW(params, lr,
betas, eps, weight_decay, foreach=False)`` and ``torch.optim.lr_scheduler.LambdaLR(optimizer, factor)``, the
factor of the training step coming from :func:`lr_factor` (stepped once per training step, as verl's actor does).
The schedules match verl's ``get_constant_schedule_with_warmup`` and ``get_cosine_schedule_with_warmup``
(``min_lr_ratio=0``, half a cosine, 0-indexed steps). ``foreach=False`` is torch's own choice for CPU parameters,
written out so that a GPU run computes the same single-tensor update.

The fast path (``compute.fast_paths``, on by default: :func:`acerl.pipeline.runtime.fast_paths`) swaps in
:class:`AdamW` and :class:`StepSchedule`, the same two without ``torch.optim``'s ``Optimizer`` base class, whose
constructor imports ``torch._dynamo``: CPU time paid in every job that builds an optimizer (the measured cost:
docs/benchmarks.md, "Imports a job does not need"). The arithmetic is torch's, operation for operation, and so
are the ``state_dict`` formats: checkpoints move between these classes and torch's in both directions.
``tests/test_optim.py`` checks both against torch bit for bit, so an upgrade of torch that changes its update
fails there, not silently in a study; ``tests/models/test_fast_paths.py`` checks the switch end to end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from acerl.config import TrainHyper
from acerl.pipeline.runtime import fast_paths

__all__ = [
    "ADAM_EPS",
    "LR_SCHEDULES",
    "AdamW",
    "Schedule",
    "StepSchedule",
    "TrainOptimizer",
    "adamw",
    "build_optimizer",
    "constant_with_warmup",
    "cosine_with_warmup",
    "lr_factor",
]

ADAM_EPS = 1e-8  # torch / verl default

# The options of torch.optim.AdamW that this class implements only at their defaults; they are written into
# every param group (as torch writes them) so a state_dict loads into torch.optim.AdamW unchanged.
_TORCH_GROUP_FLAGS: dict[str, Any] = {
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": None,
    "decoupled_weight_decay": True,
}
# Those that change the update (a state dict saved with another value is refused).
_UNIMPLEMENTED = ("amsgrad", "maximize", "differentiable", "decoupled_weight_decay")


def _scalar_dtype() -> torch.dtype:
    """The dtype of AdamW's step counters (torch's ``_get_scalar_dtype``)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


class AdamW:
    """``torch.optim.AdamW(params, lr, betas, eps, weight_decay, foreach=False)``: the same update (torch's
    ``_single_tensor_adam`` with decoupled weight decay, the path torch takes for CPU parameters), state and
    ``state_dict`` format, without ``torch.optim.Optimizer`` (see the module docstring). ``amsgrad``,
    ``maximize``, ``differentiable`` and plain Adam's coupled weight decay are not implemented: a state dict that
    sets one of them is refused. Unlike torch's, :meth:`load_state_dict` copies the tensors it is given."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = ADAM_EPS,
        weight_decay: float = 1e-2,
    ) -> None:
        params = list(params)
        if not params:
            raise ValueError("AdamW got an empty parameter list")
        if not 0.0 <= lr:
            raise ValueError(f"invalid AdamW learning rate {lr}; it must be >= 0")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid AdamW betas {tuple(betas)}; each must be in [0, 1)")
        if not 0.0 <= eps:
            raise ValueError(f"invalid AdamW eps {eps}; it must be >= 0")
        if not 0.0 <= weight_decay:
            raise ValueError(f"invalid AdamW weight_decay {weight_decay}; it must be >= 0")
        if any(torch.is_complex(p) for p in params):
            raise ValueError(
                "AdamW here supports real parameters only (use torch.optim.AdamW for complex ones)"
            )
        self.defaults: dict[str, Any] = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            **_TORCH_GROUP_FLAGS,
        }
        self.param_groups: list[dict[str, Any]] = [{**self.defaults, "params": params}]
        self.state: dict[Tensor, dict[str, Tensor]] = {}

    def _param_state(self, p: Tensor) -> dict[str, Tensor]:
        state = self.state.get(p)
        if not state:  # lazy, as torch: a parameter's state appears at its first step with a gradient
            state = self.state[p] = {
                "step": torch.tensor(0.0, dtype=_scalar_dtype()),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (torch's ``_single_tensor_adam``, line for line)."""
        for group in self.param_groups:
            lr, (beta1, beta2), eps, weight_decay = (
                group["lr"],
                group["betas"],
                group["eps"],
                group["weight_decay"],
            )
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                state = self._param_state(param)
                exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                step_t += 1
                if weight_decay != 0:
                    param.mul_(1 - lr * weight_decay)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = step_t.item()
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                step_size = lr / bias_correction1
                bias_correction2_sqrt = bias_correction2**0.5
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
                param.addcdiv_(exp_avg, denom, value=-step_size)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) every parameter's gradient, as ``torch.optim.Optimizer.zero_grad``."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """torch's format: parameters by position across the groups, per-parameter state and group settings."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: s for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict` or ``torch.optim.AdamW.state_dict()`` (copies of its tensors, cast to
        each parameter's dtype and device; step counters stay as saved). A dict of another shape or with an
        option this class does not implement is a ``ValueError`` saying which."""
        if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
            raise ValueError("not an optimizer state dict: it needs the keys 'state' and 'param_groups'")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"the saved optimizer state has {len(saved_groups)} parameter groups, this optimizer "
                f"{len(self.param_groups)}"
            )
        params: dict[int, Tensor] = {}
        new_groups = []
        for i, (mine, saved) in enumerate(zip(self.param_groups, saved_groups, strict=True)):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(
                    f"parameter group {i} of the saved optimizer state has {len(saved['params'])} parameters, "
                    f"this optimizer's {len(mine['params'])}: it was saved for another model"
                )
            for key in _UNIMPLEMENTED:  # foreach / fused / capturable pick kernels, not the update: accepted
                if key in saved and bool(saved[key]) != bool(_TORCH_GROUP_FLAGS[key]):
                    raise ValueError(
                        f"the saved optimizer state sets {key}={saved[key]!r}, which this AdamW does not "
                        "implement; resume it with torch.optim.AdamW"
                    )
            params.update(zip(saved["params"], mine["params"], strict=True))
            new_groups.append({**{k: v for k, v in saved.items() if k != "params"}, "params": mine["params"]})
        state: dict[Tensor, dict[str, Tensor]] = {}
        for key, values in state_dict["state"].items():
            if key not in params:
                raise ValueError(
                    f"the saved optimizer state has state for parameter {key}, which no group lists"
                )
            p = params[key]
            state[p] = {
                name: v.clone() if name == "step" else v.to(dtype=p.dtype, device=p.device, copy=True)
                for name, v in values.items()
            }
        self.param_groups = new_groups
        self.state = state


class StepSchedule:
    """``torch.optim.lr_scheduler.LambdaLR(optimizer, factor)`` for :class:`AdamW`: each group's LR is its
    initial LR times ``factor(step)``, set at construction (step 0) and at each :meth:`step`; the same
    arithmetic and ``state_dict`` keys (a LambdaLR's state dict loads here and this one's into a LambdaLR)."""

    def __init__(self, optimizer: AdamW, factor: Callable[[int], float]) -> None:
        self.optimizer = optimizer
        self.factor = factor
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = -1
        self._step_count = 0
        self.step()

    def step(self) -> None:
        """Advance one training step and set every group's LR."""
        self._step_count += 1
        self.last_epoch += 1
        lrs = [base * self.factor(self.last_epoch) for base in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """LambdaLR's keys and values (the factor, a function, is saved as ``None``, as LambdaLR saves it)."""
        return {
            "base_lrs": list(self.base_lrs),
            "last_epoch": self.last_epoch,
            "_step_count": self._step_count,
            "_is_initial": False,
            "_get_lr_called_within_step": False,
            "_last_lr": list(self._last_lr),
            "lr_lambdas": [None] * len(self.base_lrs),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the step and base LRs (like LambdaLR's, this does not set the groups' LRs: the optimizer's
        state dict holds them)."""
        missing = {"base_lrs", "last_epoch", "_last_lr"} - set(state_dict)
        if missing:
            raise ValueError(f"not an LR schedule state dict: it lacks {', '.join(sorted(missing))}")
        self.base_lrs = list(state_dict["base_lrs"])
        self.last_epoch = int(state_dict["last_epoch"])
        self._step_count = int(state_dict.get("_step_count", self.last_epoch + 1))
        self._last_lr = list(state_dict["_last_lr"])


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


TrainOptimizer = AdamW | torch.optim.AdamW
"""What :func:`adamw` returns: torch's AdamW (plain path) or :class:`AdamW` (fast path)."""
Schedule = StepSchedule | torch.optim.lr_scheduler.LambdaLR
"""What :func:`build_optimizer` pairs with it: ``LambdaLR`` (plain path) or :class:`StepSchedule` (fast path)."""


def adamw(
    params: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    eps: float = ADAM_EPS,
) -> TrainOptimizer:
    """AdamW over ``params``: ``torch.optim.AdamW`` (single-tensor update), or with the fast paths on the same
    update in :class:`AdamW`."""
    params = list(params)
    if not fast_paths():
        return torch.optim.AdamW(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False
        )
    return AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def build_optimizer(
    params: Iterable[torch.nn.Parameter], hyper: TrainHyper
) -> tuple[TrainOptimizer, Schedule]:
    """AdamW over ``params`` and its LR schedule (stepped once per training step): ``torch.optim.AdamW`` and
    ``LambdaLR``, or with the fast paths on :class:`AdamW` and :class:`StepSchedule` (the module docstring)."""
    optimizer = adamw(params, lr=hyper.lr, betas=hyper.betas, weight_decay=hyper.weight_decay)
    schedule, warmup, total = hyper.lr_schedule, hyper.warmup_steps, hyper.total_steps
    lr_factor(schedule, 0, warmup, total)  # validate the name now

    def factor(step: int) -> float:
        return lr_factor(schedule, step, warmup, total)

    if isinstance(optimizer, torch.optim.AdamW):
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, StepSchedule(optimizer, factor)
