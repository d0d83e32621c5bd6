"""ACE inside verl 0.9.1 without a fork: load with ``VERL_USE_EXTERNAL_MODULES=acerl.verl_backend.plugin``.

verl imports this module in every process that imports verl; importing it calls :func:`install`, which

1. registers the estimator ``"ace"`` (:func:`compute_ace_outcome_advantage`: the paper's Eq. 5,
   Alg. 1, broadcast over the response tokens like verl's GRPO);
2. shims verl's ``compute_advantage`` (:func:`make_compute_advantage_shim`) so that every acerl-registered
   estimator, ACE among them, runs through one path (:func:`compute_registered_advantage`) with
   ``old_log_probs`` and ``ref_log_prob``, which ACE's confidence score
   ``c_i = (1/T_i) sum_t (log pi_old - log pi_ref)`` needs and verl does not pass; verl's own estimators are
   verl's;
3. wraps the V1 trainer's ``_compute_advantage`` to hand the grader's verdicts (``acc``) and the step's metrics
   dict to the shim (:func:`ace_step_context`), where ACE's summaries are added;
4. caps dynamic sampling (:func:`refill_cap`) by the DAPO recipe's ``max_num_gen_batches``;
5. warns in the training log when a step's rollout/train probability gap breaks the canary's rule
   (:func:`warn_on_sync_gap`, :mod:`acerl.verl_backend.sync_gap`): vLLM sampling from other weights than the
   actor trains (a broken weight sync) would otherwise train off-policy without a sign.

ACE's keys are ``algorithm.ace.*`` (:class:`AceConfig`, typed through :class:`AceAlgoConfig`). How each part
works and why: docs/verl.md, "The ACE plugin and why it is needed".
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.abc
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Optional

import numpy as np
import torch
from pydantic import ValidationError
from verl.base_config import BaseConfig
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos

from acerl.algos.advantages import ADVANTAGE_ESTIMATORS, ace_metrics, as_group_ids
from acerl.config import ESTIMATORS, AceEstimator, EstimatorParams
from acerl.verl_backend import GEN_BATCH_KEY, VERL_BUILTIN_ESTIMATORS, estimator_params_key
from acerl.verl_backend.sync_gap import GapLimits, gap_of, gap_problem

logger = logging.getLogger(__name__)

__all__ = [
    "ESTIMATOR_NAME",
    "LOGPROB_ESTIMATORS",
    "VERL_BUILTIN_ESTIMATORS",
    "compute_registered_advantage",
    "estimator_config",
    "plugin_estimators",
    "RAY_TRAINER_MODULE",
    "AceAlgoConfig",
    "AceConfig",
    "ace_config_from",
    "ace_step_context",
    "compute_ace_outcome_advantage",
    "correct_from_extra_fields",
    "GEN_BATCH_KEY",
    "RefillCap",
    "refill_cap",
    "install",
    "keep_trl_out_of_verl",
    "make_compute_advantage_shim",
    "shim_installed",
    "trl_has_value_head",
    "warn_on_sync_gap",
]

ESTIMATOR_NAME = "ace"
LOGPROB_ESTIMATORS: frozenset[str] = frozenset({ESTIMATOR_NAME})
"""Estimators the shim calls with ``old_log_probs`` and ``ref_log_prob`` (all others go to verl unchanged)."""
RAY_TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"
V1_TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
CORRECT_KEY = "acc"
"""``reward_extra_info`` key holding the grader's verdict (``acerl.grading.reward.compute_score``)."""
_SHIM_FLAG = "_acerl_logprob_shim"


# --------------------------------------------------------------------------------------------- config
_ACE = AceEstimator()  # the schema's defaults (the paper's), declared once in acerl.config


@dataclass
class AceConfig(BaseConfig):
    """``algorithm.ace``: ACE's parameters, :class:`acerl.config.AceEstimator`'s keyword arguments less
    ``norm_by_std`` (verl's own ``algorithm.norm_adv_by_std_in_grpo``), as the typed dataclass verl's structured
    config needs. Defaults and checks are the schema's: a bad value fails as ``acerl config`` would fail it.
    """

    alpha: float = _ACE.alpha
    modulation: str = _ACE.modulation
    length_normalize: bool = _ACE.length_normalize
    granularity: str = _ACE.granularity
    eps: float = _ACE.eps
    amplify: str = _ACE.amplify

    def __post_init__(self) -> None:
        values = {name: getattr(self, name) for name in _ace_keys()}
        try:
            AceEstimator.model_validate(values)
        except ValidationError as e:
            err = e.errors()[0]
            raise ValueError(f"algorithm.ace.{err['loc'][0]}: {err['msg']} (got {err['input']!r})") from None


def _ace_keys() -> list[str]:
    """``algorithm.ace``'s keys (verl's ``BaseConfig`` adds private fields such as ``_target_``)."""
    return [f.name for f in fields(AceConfig) if not f.name.startswith("_")]


def _ace_params(section: AceConfig) -> dict[str, Any]:
    """``algorithm.ace``'s keys and values, without verl's private ``BaseConfig`` fields."""
    return {k: getattr(section, k) for k in _ace_keys()}


@dataclass
class AceAlgoConfig(AlgoConfig):
    """verl's ``AlgoConfig`` plus ``ace`` (:class:`AceConfig`); select it with
    ``algorithm._target_=acerl.verl_backend.plugin.AceAlgoConfig``."""

    ace: Optional[AceConfig] = None  # noqa: UP045 (OmegaConf structured configs need Optional)
    estimator_params: Optional[dict[str, Any]] = None  # noqa: UP045
    """Keys of an acerl estimator other than ACE (``acerl.config.ESTIMATORS``), e.g. W-REINFORCE's
    ``positive_weight``; validated by its parameter class when the estimator runs."""

    def __post_init__(self) -> None:
        if self.ace is not None and not isinstance(self.ace, AceConfig):
            object.__setattr__(self, "ace", ace_config_from({"ace": self.ace}))


def ace_config_from(config: Any) -> AceConfig:
    """ACE's parameters from verl's ``config.algorithm`` (DictConfig, dataclass, mapping or ``None``).

    A missing ``ace`` section gives the paper's defaults; an unknown key raises ``ValueError`` naming it.
    """
    section = None if config is None else config.get("ace", None)
    if section is None:
        return AceConfig()
    if isinstance(section, AceConfig):
        return section
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    if not isinstance(section, Mapping):
        raise ValueError(f"algorithm.ace must be a mapping, got {type(section).__name__}")
    valid = set(_ace_keys())
    unknown = sorted(set(section) - valid)
    if unknown:
        raise ValueError(f"algorithm.ace: unknown key(s) {unknown}; valid: {sorted(valid)}")
    return AceConfig(**dict(section))


# ------------------------------------------------------------------------------------------ estimator
def compute_ace_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    old_log_probs: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
    correct: torch.Tensor | None = None,
    metrics: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator ``"ace"``: ACE advantages (paper Eq. 5) in verl's layout.

    The sequence reward is ``token_level_rewards.sum(-1)`` (as verl's GRPO); groups are ``index`` (verl's
    ``uid``); ``c_i`` uses the rollout policy's ``old_log_probs`` against ``ref_log_prob``.

    Args:
        token_level_rewards: (bs, resp_len) rewards (outcome reward on the last token).
        response_mask: (bs, resp_len) 1 for response tokens.
        index: (bs,) group key per rollout (verl ``uid`` strings).
        config: ``config.algorithm`` (reads ``ace`` via :func:`ace_config_from` and
            ``norm_adv_by_std_in_grpo``).
        old_log_probs: (bs, resp_len) rollout-policy log-probs (passed by the shim).
        ref_log_prob: (bs, resp_len) reference log-probs (passed by the shim).
        correct: (bs,) bool, the grader's verdict before any reward shaping (verl's ``acc``; passed by the
            shim); needed by ``algorithm.ace.amplify=incorrect``.
        metrics: a dict that receives ACE's summaries (``ace/...``): the trainer's step metrics.

    Returns:
        ``(advantages, returns)``, both (bs, resp_len), equal, zero on padding.
    """
    advantages, _ = compute_registered_advantage(
        ESTIMATOR_NAME,
        token_level_rewards,
        response_mask,
        index,
        config=config,
        old_log_probs=old_log_probs,
        ref_log_prob=ref_log_prob,
        correct=correct,
        metrics=metrics,
    )
    return advantages, advantages


def plugin_estimators() -> frozenset[str]:
    """The estimators the shim computes: every acerl-registered one but verl's own (ACE, PSR, NSR, W-REINFORCE
    and those of a plugin of one's own imported before this module)."""
    return frozenset(ADVANTAGE_ESTIMATORS.names()) - VERL_BUILTIN_ESTIMATORS


def _as_mapping(section: Any) -> dict[str, Any]:
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            section = OmegaConf.to_container(section, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    return dict(section)


def estimator_config(name: str, config: Any = None) -> EstimatorParams:
    """The estimator config the local trainer would hold for ``name``, from verl's ``config.algorithm``: its keys
    (ACE's typed ``algorithm.ace`` section, :func:`ace_config_from`; any other estimator's
    ``algorithm.estimator_params``) validated by the registered parameter class (``acerl.config.ESTIMATORS``),
    ``norm_by_std`` from ``algorithm.norm_adv_by_std_in_grpo``. A bad key or value is a ``ValueError`` naming it."""
    norm_by_std = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    section = estimator_params_key(name)
    if name == ESTIMATOR_NAME:  # typed by verl's structured config (AceAlgoConfig.ace): checked as it loads
        params = _ace_params(ace_config_from(config))
    else:
        params = _as_mapping(None if config is None else config.get(section.split(".", 1)[1], None))
    try:
        return ESTIMATORS[name].model_validate({**params, "name": name, "norm_by_std": norm_by_std})
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"{section}.{loc}: {err['msg']} (estimator {name!r})") from None


def compute_registered_advantage(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    old_log_probs: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
    correct: torch.Tensor | None = None,
    metrics: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """An acerl-registered estimator (ACE, PSR, NSR, W-REINFORCE, a plugin's own) in verl's layout: the estimator
    config the local trainer would hold (:func:`estimator_config`), the same registry entry with the same
    keywords. The sequence reward is ``token_level_rewards.sum(-1)`` (as verl's GRPO); groups are ``index``
    (verl's ``uid``). An estimator whose output carries ACE's confidence adds its summaries (``ace/...``) to
    ``metrics``.

    Args:
        token_level_rewards: (bs, resp_len) rewards (outcome reward on the last token).
        response_mask: (bs, resp_len) 1 for response tokens.
        index: (bs,) group key per rollout (verl ``uid`` strings).
        old_log_probs, ref_log_prob: (bs, resp_len) rollout-policy and reference log-probs; required by the
            estimators of :data:`LOGPROB_ESTIMATORS`.
        correct: (bs,) bool, the grader's verdict before any reward shaping (verl's ``acc``).
        metrics: a dict that receives the estimator's summaries: the trainer's step metrics.

    Returns:
        ``(advantages, loss_rows)``: (bs, resp_len) advantages zero on padding, and the (bs,) bool rows the
        loss keeps (``None``: all).
    """
    if name in LOGPROB_ESTIMATORS and (old_log_probs is None or ref_log_prob is None):
        raise ValueError(
            f"the {name!r} advantage estimator needs old_log_probs and ref_log_prob, which verl passes only through "
            "acerl's compute_advantage shim: load the plugin with VERL_USE_EXTERNAL_MODULES="
            "acerl.verl_backend.plugin (and keep a reference policy: actor_rollout_ref.actor.use_kl_loss=True)"
        )
    est = estimator_config(name, config)
    out = ADVANTAGE_ESTIMATORS.get(name)(
        token_level_rewards.sum(dim=-1),
        as_group_ids(index),
        old_log_probs,
        ref_log_prob,
        response_mask,
        correct=correct,
        **est.kwargs(),
    )
    if out.confidence is not None and out.multiplier is not None and out.amplified is not None:
        stats = ace_metrics(out.confidence, out.multiplier, out.negative, out.amplified, response_mask)
        if metrics is not None:
            metrics.update(stats)
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s: %s", name, {k: round(v, 4) for k, v in stats.items()})
    return out.token_level(response_mask), out.loss_rows


# ------------------------------------------------------------------------------------ step context
@dataclass
class _StepContext:
    correct: np.ndarray | None
    metrics: dict[str, Any] | None


_STEP: contextvars.ContextVar[_StepContext | None] = contextvars.ContextVar("acerl_ace_step", default=None)


@contextlib.contextmanager
def ace_step_context(
    correct: Sequence[bool] | np.ndarray | None, metrics: dict[str, Any] | None
) -> Iterator[None]:
    """Within this context the shim gives ACE ``correct`` (one verdict per row of the batch passed to
    ``compute_advantage``, in its order) and adds ACE's summaries to ``metrics``. The V1 trainer wrapper
    (:func:`_patch_v1_trainer`) opens it around ``PPOTrainer._compute_advantage``."""
    verdicts = None if correct is None else np.asarray(correct, dtype=bool)
    token = _STEP.set(_StepContext(correct=verdicts, metrics=metrics))
    try:
        yield
    finally:
        _STEP.reset(token)


def correct_from_extra_fields(extra_fields: Sequence[Any], keys: Sequence[str]) -> np.ndarray:
    """(B,) bool verdicts from V1 TransferQueue ``extra_fields`` rows (``reward_extra_info[acc]``), read as the
    V1 replay buffer reads ``filter_groups.metric``; ``keys`` name the rows in errors."""
    out = np.zeros(len(extra_fields), dtype=bool)
    for i, value in enumerate(extra_fields):
        fields_ = getattr(value, "data", value)
        info = fields_.get("reward_extra_info", {}) if isinstance(fields_, Mapping) else {}
        if CORRECT_KEY not in info:
            raise ValueError(
                f"ACE (algorithm.ace.amplify=incorrect): rollout {keys[i]!r} has no reward_extra_info[{CORRECT_KEY!r}]; "
                f"the reward function must return a dict with {CORRECT_KEY!r} (acerl.grading.reward.compute_score "
                "does: reward.custom_reward_function.path=pkg://acerl.grading.reward), or set "
                "algorithm.ace.amplify=negative_advantage"
            )
        out[i] = bool(info[CORRECT_KEY])
    return out


def _batch_correct(data: Any, name: str) -> torch.Tensor | None:
    """The verdicts for ``data``'s rows: ``non_tensor_batch['acc']`` (legacy trainer) or the step context."""
    verdicts = data.non_tensor_batch.get(CORRECT_KEY) if hasattr(data, "non_tensor_batch") else None
    if verdicts is None:
        ctx = _STEP.get()
        verdicts = None if ctx is None else ctx.correct
    if verdicts is None:
        return None
    verdicts = np.asarray(verdicts).astype(bool)
    if verdicts.shape != (len(data),):
        raise ValueError(
            f"advantage estimator {name!r}: {verdicts.shape[0] if verdicts.ndim else 0} verdicts ({CORRECT_KEY!r}) "
            f"for a batch of {len(data)} rollouts"
        )
    return torch.from_numpy(verdicts)


# ----------------------------------------------------------------------------------------------- shim
def _estimator_name(adv_estimator: Any) -> str:
    return adv_estimator.value if isinstance(adv_estimator, Enum) else str(adv_estimator)


def make_compute_advantage_shim(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap verl's ``compute_advantage(data, adv_estimator, gamma, lam, num_repeat, norm_adv_by_std_in_grpo,
    config)``: every acerl-registered estimator (:func:`plugin_estimators`, ACE among them) runs through
    :func:`compute_registered_advantage` with ``old_log_probs`` and ``ref_log_prob`` from ``data.batch``; verl's
    own estimators go to ``original`` unchanged."""

    def compute_advantage(
        data: Any,
        adv_estimator: Any,
        gamma: float = 1.0,
        lam: float = 1.0,
        num_repeat: int = 1,
        norm_adv_by_std_in_grpo: bool = True,
        config: Any = None,
    ) -> Any:
        name = _estimator_name(adv_estimator)
        if name in plugin_estimators():
            return _registered_advantage(data, name, config)
        return original(
            data,
            adv_estimator=adv_estimator,
            gamma=gamma,
            lam=lam,
            num_repeat=num_repeat,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            config=config,
        )

    compute_advantage.__doc__ = (original.__doc__ or "") + "\n\n(acerl shim: passes log-probs to ACE)"
    compute_advantage.__wrapped__ = original  # type: ignore[attr-defined]  # as functools.wraps sets it
    setattr(compute_advantage, _SHIM_FLAG, True)
    return compute_advantage


def _registered_advantage(data: Any, name: str, config: Any) -> Any:
    """The shim's path for :func:`compute_registered_advantage`: advantages and returns into ``data.batch``; the
    rows the estimator leaves out of the loss (PSR, NSR: the authors' batch subset) get a zero
    ``response_mask``, which verl's policy loss and its token counts read."""
    if "response_mask" not in data.batch.keys():
        responses = data.batch["responses"]
        data.batch["response_mask"] = data.batch["attention_mask"][:, -responses.size(1) :]
    keys = set(data.batch.keys())
    if name in LOGPROB_ESTIMATORS:
        missing = [k for k in ("old_log_probs", "ref_log_prob", "token_level_rewards") if k not in keys]
        if missing:
            raise ValueError(
                f"advantage estimator {name!r} needs {missing} in the batch; ref_log_prob exists only with a "
                "reference policy: set actor_rollout_ref.actor.use_kl_loss=True (kl_loss_coef=0.0 leaves the loss "
                "unchanged)"
            )
    if "uid" not in data.non_tensor_batch:
        raise ValueError(f"advantage estimator {name!r} needs the group index non_tensor_batch['uid']")
    mask = data.batch["response_mask"]
    ctx = _STEP.get()
    advantages, loss_rows = compute_registered_advantage(
        name,
        data.batch["token_level_rewards"],
        mask,
        data.non_tensor_batch["uid"],
        config=config,
        old_log_probs=data.batch["old_log_probs"] if "old_log_probs" in keys else None,
        ref_log_prob=data.batch["ref_log_prob"] if "ref_log_prob" in keys else None,
        correct=_batch_correct(data, name),
        metrics=None if ctx is None else ctx.metrics,
    )
    data.batch["advantages"] = advantages
    data.batch["returns"] = advantages
    if loss_rows is not None:
        data.batch["response_mask"] = mask * loss_rows.to(mask.device)[:, None].to(mask.dtype)
    return data


def _patch_ray_trainer(module: Any) -> None:
    """Replace ``module.compute_advantage`` by the shim and rebind it in every module holding the original."""
    current = module.__dict__.get("compute_advantage")
    if current is None:
        raise RuntimeError(f"{module.__name__} has no compute_advantage: this plugin targets verl 0.9.1")
    if getattr(current, _SHIM_FLAG, False):
        return
    shim = make_compute_advantage_shim(current)
    for name, mod in list(sys.modules.items()):
        namespace = getattr(mod, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("compute_advantage") is current:
            namespace["compute_advantage"] = shim
            logger.debug("acerl: compute_advantage shim bound in %s", name)


@dataclass(frozen=True)
class RefillCap:
    """The DAPO recipe's bound on one step's generation, in prompts: ``max_num_gen_batches`` generation batches
    of ``gen_batch_size`` prompts each (``budget = max_num_gen_batches * gen_batch_size``)."""

    max_num_gen_batches: int
    gen_batch_size: int
    train_batch_size: int

    @property
    def budget(self) -> int:
        return self.max_num_gen_batches * self.gen_batch_size


def refill_cap(config: Any) -> RefillCap | None:
    """The dynamic-sampling cap of verl's ``config``, or ``None`` for no cap.

    The DAPO recipe (``recipe/dapo/dapo_ray_trainer.py``) generates a step in batches of ``data.gen_batch_size``
    prompts, keeps the groups whose ``filter_groups.metric`` varies, and stops the run when
    ``max_num_gen_batches`` batches hold fewer than ``train_batch_size`` such groups ("Generated too many.
    Please check if your data are too difficult"); its scripts use ``max_num_gen_batches=10`` and a generation
    batch of 3x the training batch. verl 0.9.1's V1 trainer ignores the key
    (``v1/trainer_base.py:_resolve_filter_groups_metric`` only warns), sets ``data.gen_batch_size=1`` and its
    replay buffer refills speculatively without a bound (``v1/replay_buffer.py:ReplayBuffer.sample``: 2 prompts
    per filtered group). The recipe's rule in V1's terms is a budget of ``max_num_gen_batches *
    gen_batch_size`` prompts per step (the step's first ``train_batch_size`` prompts included), where
    ``gen_batch_size`` is :data:`GEN_BATCH_KEY` (default ``data.train_batch_size``); see :func:`_cap_refills`.
    ``max_num_gen_batches <= 0`` means no cap, as in the recipe. Applies to the synchronous V1 trainer with
    ``filter_groups`` enabled and verl's own replay buffer (a ``custom_sampler`` owns its filtering).
    """
    fg = config.algorithm.get("filter_groups", None)
    if fg is None or not fg.get("enable", False):
        return None
    if config.trainer.get("v1", {}).get("trainer_mode", "sync") != "sync":
        return None
    batches = int(fg.get("max_num_gen_batches", 0) or 0)
    if batches <= 0:
        return None
    train = int(config.data.train_batch_size)
    acerl_section = config.trainer.get("acerl", None) or {}
    gen = int(acerl_section.get("gen_batch_size", None) or train)
    if gen < train:
        raise ValueError(
            f"{GEN_BATCH_KEY}={gen} is below data.train_batch_size={train}: a generation batch must hold at "
            "least the training batch (the DAPO recipe uses 3x)"
        )
    return RefillCap(max_num_gen_batches=batches, gen_batch_size=gen, train_batch_size=train)


def _buffer_counts(buffer: Any, partition: str = "train") -> tuple[int, int]:
    """``(usable groups, prompts in flight)`` in the replay buffer's snapshot (verl 0.9.1's ``ReplayBuffer``:
    refreshed and cleared of filtered groups just before it calls ``refill_fn``). Usable groups are those the
    buffer could sample: finished or failed, not filtered (filtered ones are already evicted)."""
    usable = len(buffer.finished_keys[partition] | buffer.failure_keys[partition])
    inflight = len(buffer.pending_keys[partition] | buffer.running_keys[partition])
    return usable, inflight


def _cap_refills(cls: Any) -> None:
    """Wrap ``PPOTrainer.prepare_step`` (starts the step's prompt count at its first batch) and
    ``_add_prompts_to_generate`` (the replay buffer's ``refill_fn``), enforcing :func:`refill_cap`.

    A refill request is cut to the prompts left in the step's budget; V1's speculative 2-per-filtered-group
    requests thus never stop a step by themselves. The step stops with a one-line error naming
    ``max_num_gen_batches`` when even all prompts in flight plus all prompts left in the budget, each giving
    a usable group, could not complete the batch: exactly when the recipe's generation batches would hold
    fewer than ``train_batch_size`` usable groups. (Every filtered group makes the buffer call ``refill_fn``
    again, so that state is always seen; without this error the buffer would wait forever.)
    """
    prepare, add = cls.__dict__["prepare_step"], cls.__dict__["_add_prompts_to_generate"]

    def prepare_step(self: Any) -> Any:
        cap = refill_cap(self.config)
        self._acerl_dispatched = 0 if cap is None else cap.train_batch_size
        if cap is not None:
            logger.info(
                "acerl: dynamic sampling cap at step %s: %d prompts (max_num_gen_batches %d x %d)",
                getattr(self, "global_steps", "?"),
                cap.budget,
                cap.max_num_gen_batches,
                cap.gen_batch_size,
            )
        return prepare(self)

    def _add_prompts_to_generate(self: Any, num_prompts: int) -> Any:
        cap = refill_cap(self.config)
        if cap is None or not hasattr(self.replay_buffer, "finished_keys"):  # a custom sampler owns its rule
            return add(self, num_prompts)
        dispatched = getattr(self, "_acerl_dispatched", cap.train_batch_size)
        left = max(0, cap.budget - dispatched)
        usable, inflight = _buffer_counts(self.replay_buffer)
        if usable + inflight + left < cap.train_batch_size:
            raise RuntimeError(
                f"dynamic sampling at step {getattr(self, 'global_steps', '?')}: {usable} usable groups + "
                f"{inflight} prompts in flight + {left} prompts left of the step's {cap.budget} cannot fill "
                f"data.train_batch_size={cap.train_batch_size}: algorithm.filter_groups.max_num_gen_batches="
                f"{cap.max_num_gen_batches} generation batches of {cap.gen_batch_size} prompts ({GEN_BATCH_KEY}) "
                f"are not enough (too many groups with identical '{self.config.algorithm.filter_groups.metric}': "
                "the data may be too easy or too hard for the policy); raise max_num_gen_batches, or set it to 0 "
                "for no cap (the DAPO recipe's rule)"
            )
        take = min(int(num_prompts), left)
        if take < int(num_prompts):
            logger.info(
                "acerl: dynamic sampling at step %s: refill of %d prompts cut to %d (%d of %d dispatched)",
                getattr(self, "global_steps", "?"),
                int(num_prompts),
                max(take, 0),
                dispatched,
                cap.budget,
            )
        if take <= 0:
            return 0
        self._acerl_dispatched = dispatched + take
        return add(self, take)

    shims: dict[str, Callable[..., Any]] = {
        "prepare_step": prepare_step,
        "_add_prompts_to_generate": _add_prompts_to_generate,
    }
    for name, fn in shims.items():
        original = cls.__dict__[name]
        fn.__doc__ = (original.__doc__ or "") + "\n\n(acerl: dynamic-sampling cap, see refill_cap)"
        fn.__wrapped__ = original  # type: ignore[attr-defined]  # as functools.wraps sets it
        setattr(fn, _SHIM_FLAG, True)
        setattr(cls, name, fn)


def warn_on_sync_gap(
    trainer: Any, metrics: Mapping[str, Any], step: int, limits: GapLimits = GapLimits()
) -> str | None:
    """Log a warning when ``metrics`` (the V1 trainer's step metrics) break the rollout/train gap rule; the
    first gap ``trainer`` logged in this process is the baseline of the later ones (a resumed attempt's first
    step follows the initial sync only, as step 1 does). Returns the warning, or ``None``."""
    gap = gap_of(metrics)
    if gap is None:
        return None
    first = getattr(trainer, "_acerl_first_gap", None)
    if first is None:
        trainer._acerl_first_gap = gap
    problem = gap_problem(step, gap, first, limits)
    if problem is not None:
        logger.warning("acerl: %s; check the weight sync (docs/cluster.md, 'Canary')", problem)
    return problem


def _watch_sync_gap(cls: Any) -> None:
    """Wrap ``PPOTrainer._compute_metrics`` (called once per step with the step's metrics, before they are
    logged) with :func:`warn_on_sync_gap`."""
    original = cls.__dict__["_compute_metrics"]

    def _compute_metrics(self: Any, batch: Any, metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        out = original(self, batch, metrics, *args, **kwargs)
        warn_on_sync_gap(self, metrics, int(kwargs.get("global_steps", getattr(self, "global_steps", 0))))
        return out

    _compute_metrics.__doc__ = (original.__doc__ or "") + "\n\n(acerl: warns on a rollout/train gap)"
    _compute_metrics.__wrapped__ = original  # type: ignore[attr-defined]  # as functools.wraps sets it
    setattr(_compute_metrics, _SHIM_FLAG, True)
    cls._compute_metrics = _compute_metrics


def _patch_v1_trainer(module: Any) -> None:
    """Patch the V1 trainer's ``PPOTrainer``: wrap ``_compute_advantage`` (for ACE, read each row's grader
    verdict ``extra_fields.reward_extra_info.acc`` from TransferQueue and open :func:`ace_step_context` with it
    and the step's metrics dict around verl's own method) and cap dynamic sampling (:func:`refill_cap`)."""
    cls = getattr(module, "PPOTrainer", None)
    names = ("_compute_advantage", "prepare_step", "_add_prompts_to_generate", "_compute_metrics")
    if cls is None or any(name not in cls.__dict__ for name in names):
        raise RuntimeError(
            f"{module.__name__}.PPOTrainer lacks one of {names}: this plugin targets verl 0.9.1"
        )
    original = cls.__dict__["_compute_advantage"]
    if getattr(original, _SHIM_FLAG, False):
        return
    _cap_refills(cls)
    _watch_sync_gap(cls)

    def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        algorithm = self.config.algorithm
        name = _estimator_name(algorithm.adv_estimator)
        if name not in plugin_estimators():
            return original(self, batch, metrics)
        correct = None
        if name not in LOGPROB_ESTIMATORS or ace_config_from(algorithm).amplify == "incorrect":
            rows = module.tq.kv_batch_get(
                keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
            )
            correct = correct_from_extra_fields(list(rows["extra_fields"]), batch.keys)
        with ace_step_context(correct, metrics):
            return original(self, batch, metrics)

    _compute_advantage.__doc__ = (original.__doc__ or "") + "\n\n(acerl: ACE's verdicts and step metrics)"
    _compute_advantage.__wrapped__ = original  # type: ignore[attr-defined]  # as functools.wraps sets it
    setattr(_compute_advantage, _SHIM_FLAG, True)
    cls._compute_advantage = _compute_advantage


_PATCHES: dict[str, Callable[[Any], None]] = {
    RAY_TRAINER_MODULE: _patch_ray_trainer,
    V1_TRAINER_MODULE: _patch_v1_trainer,
}
"""verl modules the plugin patches, each right after it has executed (or at once if already imported)."""


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Import hook: once a module of :data:`_PATCHES` has executed, patch it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        original_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            original_exec(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader instance
        return spec


def _register_estimator() -> None:
    registered = core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME)
    if registered is None:
        core_algos.register_adv_est(ESTIMATOR_NAME)(compute_ace_outcome_advantage)
    elif (
        getattr(registered, "__qualname__", None) != compute_ace_outcome_advantage.__qualname__
        or getattr(registered, "__module__", None) != __name__
    ):
        raise RuntimeError(
            f"verl advantage estimator {ESTIMATOR_NAME!r} is already registered to {registered!r}"
        )


TRL_PROBE_MODULES = ("verl.utils.import_utils", "verl.models.transformers.monkey_patch")
"""Modules that hold verl's ``is_trl_available`` (``monkey_patch`` imports the name)."""


def trl_has_value_head(version: str | None) -> bool:
    """Whether an installed trl of ``version`` still has ``AutoModelForCausalLMWithValueHead`` (removed in 1.0)."""
    if version is None:
        return False
    from packaging.version import Version

    return Version(version) < Version("1.0")


def _installed_trl_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:
        return None


def keep_trl_out_of_verl() -> None:
    """verl 0.9.1's ``apply_monkey_patch`` (``verl/models/transformers/monkey_patch.py``) patches trl's
    ``AutoModelForCausalLMWithValueHead`` whenever trl is importable, and both of its imports fail with
    trl >= 1.0, which removed that class: every FSDP worker would stop while building its model. The patch
    concerns trl's PPO value head, which no run of this project uses; so verl's probe answers "no trl" unless
    the installed trl still has the class (docs/verl.md, "trl")."""
    if trl_has_value_head(_installed_trl_version()):
        return

    def is_trl_available() -> bool:
        return False

    for name in TRL_PROBE_MODULES:
        module: Any = sys.modules.get(name)  # verl's module, patched in place
        if module is None:
            module = importlib.import_module(name) if name == TRL_PROBE_MODULES[0] else None
        if module is not None:
            module.is_trl_available = is_trl_available


def install() -> None:
    """Register ``"ace"`` and install the ``compute_advantage`` shim (idempotent; see the module docstring).

    Also sets this module's log level from ``ACERL_VERL_LOG_LEVEL`` (default ``INFO``): verl configures the
    root logger at WARNING, and the per-step ACE summaries are INFO records.
    """
    logger.setLevel(os.environ.get("ACERL_VERL_LOG_LEVEL", "INFO"))
    _register_estimator()
    keep_trl_out_of_verl()
    for name, patch in _PATCHES.items():
        module = sys.modules.get(name)
        if module is not None and _module_executed(module, name):
            patch(module)
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def _module_executed(module: Any, name: str) -> bool:
    """Whether ``module`` has finished executing (its patched attribute exists)."""
    attr = "compute_advantage" if name == RAY_TRAINER_MODULE else "PPOTrainer"
    return attr in module.__dict__


def shim_installed() -> bool:
    """True when ``ray_trainer`` is imported and its ``compute_advantage`` is the shim (and, when the V1 trainer
    is imported, its ``PPOTrainer._compute_advantage`` is wrapped)."""
    module = sys.modules.get(RAY_TRAINER_MODULE)
    if module is None or not getattr(module.__dict__.get("compute_advantage"), _SHIM_FLAG, False):
        return False
    v1 = sys.modules.get(V1_TRAINER_MODULE)
    return v1 is None or getattr(v1.PPOTrainer.__dict__.get("_compute_advantage"), _SHIM_FLAG, False)


# The one piece of import-time work in the package: this module exists to be imported by
# ``VERL_USE_EXTERNAL_MODULES`` and must register itself then.
install()
