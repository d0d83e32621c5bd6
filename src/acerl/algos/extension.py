"""Adding a method: one registration call per estimator or policy loss, honoured by the config, both trainers
and the run spec (docs/extending.md).

A method of one's own is a module that defines the parameters (a pydantic model with a ``name``) and the
function, and registers them together::

    from typing import Literal
    from acerl.algos import AdvantageOutput, grpo_advantages, register_estimator
    from acerl.config import EstimatorParams

    class ClippedParams(EstimatorParams):
        name: Literal["clipped"] = "clipped"
        bound: float = 2.0

    @register_estimator(ClippedParams)
    def clipped(rewards, group_ids, logprobs, ref_logprobs, response_mask, *, eps, norm_by_std, bound,
                correct=None):
        adv = grpo_advantages(rewards, group_ids, eps, norm_by_std).clamp(-bound, bound)
        return AdvantageOutput(advantages=adv, negative=adv < 0)

The config lists the module under ``plugins`` (or its package declares an ``acerl.methods`` entry point), and a
method names it: ``estimator: {name: clipped, bound: 1.5}``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from acerl.algos.advantages import ADVANTAGE_ESTIMATORS, AdvantageEstimator
from acerl.algos.losses import POLICY_LOSS_FUNCTIONS, PolicyLoss
from acerl.config import (
    EstimatorParams,
    PolicyLossParams,
    register_estimator_params,
    register_policy_loss_params,
)

__all__ = ["register_estimator", "register_policy_loss"]

E = TypeVar("E", bound=AdvantageEstimator)
L = TypeVar("L", bound=PolicyLoss)


def _check_keywords(fn: Callable[..., object], params: type[BaseModel], kind: str) -> None:
    """Every parameter key must be a keyword of ``fn`` (the trainers call ``fn(..., **params.kwargs())``)."""
    signature = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    missing = [k for k in params.model_fields if k != "name" and k not in signature]
    if missing and not takes_any:
        raise TypeError(f"{kind} {fn.__name__}: its parameters {missing} are not keywords of the function")


def register_estimator(params: type[EstimatorParams]) -> Callable[[E], E]:
    """Decorator registering an advantage estimator under ``params``' name, with ``params`` as its config keys.

    The function takes ``(rewards, group_ids, logprobs, ref_logprobs, response_mask, *, <params' keys>,
    correct)`` and returns :class:`acerl.algos.AdvantageOutput` (see :class:`AdvantageEstimator`). Set
    ``needs_reference = True`` on ``params`` when it reads ``ref_logprobs``.
    """

    def decorator(fn: E) -> E:
        _check_keywords(fn, params, "advantage estimator")
        register_estimator_params(params)
        ADVANTAGE_ESTIMATORS.register(params.model_fields["name"].default)(fn)
        return fn

    return decorator


def register_policy_loss(params: type[PolicyLossParams]) -> Callable[[L], L]:
    """Decorator registering a policy loss under ``params``' name, with ``params`` as its config keys.

    The function takes ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, *, clip_ratio_low,
    clip_ratio_high, clip_ratio_c, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor, <params'
    keys>)`` and returns :class:`acerl.algos.PolicyLossOutput` (see :class:`acerl.algos.losses.PolicyLoss`).
    """

    def decorator(fn: L) -> L:
        _check_keywords(fn, params, "policy loss")
        register_policy_loss_params(params)
        POLICY_LOSS_FUNCTIONS.register(params.model_fields["name"].default)(fn)
        return fn

    return decorator
