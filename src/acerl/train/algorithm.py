"""The local trainer's algorithm: one step of Algorithm 1 of the paper (ACE-GRPO), read top to bottom.

One training step (:func:`train_step`)::

    Alg. 1 lines 2-5  prompts -> G rollouts each -> verifier rewards (+ DAPO dynamic sampling):
                      :func:`acerl.train.rollouts.collect_rollouts`
    Alg. 1 line 8     log pi_old, log pi_ref of every response token (teacher forcing; c_i is built from them)
    Alg. 1 lines 6-9  advantages <- estimator registry (grpo | ace) with the method's parameters
    Alg. 1 line 11    clipped surrogate (clip-low/high, dual clip, loss aggregation) + beta * KL(pi || pi_ref)
    Alg. 1 line 13    AdamW over mini-batches (gradient accumulation over micro-batches), grad clip, LR schedule
    log               train/ actor/ ace/ timing/ metrics

:func:`train_step` computes the advantages before the update; :func:`update_policy` then loops over epochs,
mini- and micro-batches. One branch saves a forward pass: when the update is one forward/backward pass (one
epoch, one mini-batch, one micro-batch: the embedded default), that forward runs first and its detached
log-probs are ``log pi_old`` (bitwise the values of a separate no-grad pass); otherwise ``log pi_old`` is that
separate pass. docs/benchmarks.md gives what the branch saves.
The run around the steps (init, resume, checkpoints, signals) is :mod:`acerl.train.run`. Nothing here
branches on a method's name: the estimator and the reward kind come from registries keyed by config values.
See docs/training.md.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from acerl.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageOutput,
    ace_metric_keys,
    ace_metrics,
    confidence_scores,
)
from acerl.algos.losses import (
    POLICY_LOSS_FUNCTIONS,
    POLICY_LOSS_METRIC_KEYS,
    BatchCounts,
    agg_loss,
    kl_penalty,
)
from acerl.config import AceEstimator, EstimatorConfig
from acerl.config.settings import RunSettings
from acerl.generate.rollout import RolloutBatch, response_logprobs
from acerl.pipeline.runtime import autocast
from acerl.train.data import TrainingSet
from acerl.train.logprobs import batch_logprobs, micro_batches, micro_inputs
from acerl.train.metrics import Timer
from acerl.train.rewards import Verifier
from acerl.train.rollouts import Rollouts, collect_rollouts
from acerl.train.state import TrainState

logger = logging.getLogger(__name__)

__all__ = [
    "ACE_KEYS",
    "ACTOR_KEYS",
    "PolicyForward",
    "policy_forward",
    "single_pass_update",
    "train_step",
    "update_policy",
]


# --------------------------------------------------------------------------------------------------------------
# Alg. 1 lines 11-13: clipped surrogate + KL, AdamW over mini-batches
# --------------------------------------------------------------------------------------------------------------


def single_pass_update(settings: RunSettings, rows: int) -> bool:
    """Whether updating on ``rows`` sequences is one forward/backward pass: one epoch, one mini-batch, one
    micro-batch (the embedded default). Then ``log pi_old`` -- the policy's log-probs before the update --
    are exactly the (detached) log-probs of that pass, and a separate teacher-forced pass is redundant."""
    h = settings.hyper
    one_micro = rows <= h.micro_batch_size_per_gpu and settings.max_tokens_per_micro_batch is None
    return h.ppo_epochs == 1 and rows <= h.mini_batch_size * h.group_size and one_micro


@contextmanager
def _checkpointing(model: torch.nn.Module, settings: RunSettings) -> Iterator[None]:
    """Train mode for the update's forward when gradient checkpointing is on (transformers checkpoints decoder
    layers only in train mode; the models here have no dropout, so the values are unchanged). The prompt-KV
    sharing of :func:`acerl.generate.rollout.response_logprobs` needs a KV cache, which checkpointed layers do not
    fill, so it is off then."""
    if not settings.gradient_checkpointing:
        yield
        return
    model.train()
    try:
        yield
    finally:
        model.eval()


@dataclass(frozen=True)
class PolicyForward:
    """One forward pass of the policy over ``rows``: ``log pi_theta`` (with grad) and the token entropy of
    their response tokens, and their response mask, all cut to the rows' longest response."""

    rows: Tensor
    logprobs: Tensor
    entropy: Tensor | None
    mask: Tensor


def policy_forward(
    state: TrainState, settings: RunSettings, batch: RolloutBatch, rows: Tensor, with_entropy: bool
) -> PolicyForward:
    """The policy's forward pass over ``rows`` that the loss differentiates."""
    ids, attn, t = micro_inputs(batch, rows)
    with autocast(batch.response_mask.device, settings.precision), _checkpointing(state.model, settings):
        logprobs, entropy = response_logprobs(
            state.model,
            ids,
            attn,
            t,
            temperature=settings.hyper.temperature,
            with_entropy=with_entropy,
            share_prompts=not settings.gradient_checkpointing,
        )
    return PolicyForward(rows, logprobs, entropy, batch.response_mask[rows, :t])


def _aggregation(settings: RunSettings, mini_mask: Tensor) -> BatchCounts:
    """The mini-batch counts every micro-batch loss is aggregated with, so the accumulated gradient equals that
    of the whole mini-batch loss (verl's ``global_batch_info``)."""
    return {
        "batch_num_tokens": mini_mask.sum(),
        "global_batch_size": (mini_mask.sum(dim=-1) > 0).sum(),
        "loss_scale_factor": settings.hyper.max_response_length,
    }


ENTROPY_KEY = "actor/entropy"


@dataclass
class _ActorStats:
    """``actor/`` metrics accumulated over an update: per-micro-batch loss metrics, per-optimizer-step losses
    (``pg`` and ``kl``: the current step's sums over its micro-batches) and gradient norms, and the token
    entropy of the policy that sampled the batch (first epoch)."""

    sums: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    pg: float = 0.0
    kl: float = 0.0
    entropy_sum: float = 0.0
    entropy_tokens: int = 0

    def add_entropy(self, entropy: Tensor | None, mask: Tensor) -> None:
        if entropy is not None:
            self.entropy_sum += float((entropy * mask).sum())
            self.entropy_tokens += int(mask.sum())

    def metrics(self) -> dict[str, float]:
        out = {k: sum(v) / len(v) for k, v in self.sums.items()}
        out[ENTROPY_KEY] = self.entropy_sum / max(1, self.entropy_tokens)
        return out


def _loss(
    settings: RunSettings,
    stats: _ActorStats,
    logprobs: Tensor,
    old: Tensor,
    adv: Tensor,
    ref: Tensor | None,
    mask: Tensor,
    agg: BatchCounts,
) -> Tensor:
    """Alg. 1 line 11 on one micro-batch: the policy loss plus ``beta * KL`` (their values go to ``stats``)."""
    fam = settings.family
    out = POLICY_LOSS_FUNCTIONS.get(fam.policy_loss.name)(
        old,
        logprobs,
        adv,
        mask,
        fam.loss_agg_mode,
        clip_ratio_low=fam.clip_ratio_low,
        clip_ratio_high=fam.clip_ratio_high,
        clip_ratio_c=fam.clip_ratio_c,
        **agg,
        **fam.policy_loss.kwargs(),
    )
    for k, v in out.metrics.items():
        stats.sums[k].append(v)
    loss = out.loss
    stats.pg += float(out.loss.detach())
    if fam.use_kl_loss and ref is not None:
        kl = agg_loss(kl_penalty(logprobs, ref, fam.kl_type), mask, fam.loss_agg_mode, **agg)
        loss = loss + settings.kl_coef * kl
        stats.kl += float(kl.detach())
    return loss


OPTIMIZER_STEP_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")
"""What :func:`_optimizer_step` records per optimizer step (the losses: sums over its micro-batches)."""


def _optimizer_step(state: TrainState, settings: RunSettings, stats: _ActorStats) -> None:
    """Alg. 1 line 13: clip the accumulated gradient, one AdamW step (skipped on a non-finite norm)."""
    params = [p for p in state.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, settings.hyper.grad_clip)
    if torch.isfinite(grad_norm):
        state.optimizer.step()
    else:
        logger.warning(
            "step %d: non-finite gradient norm %s; optimizer step skipped", state.step + 1, grad_norm
        )
    state.optimizer.zero_grad(set_to_none=True)
    pg_key, kl_key, norm_key = OPTIMIZER_STEP_KEYS
    stats.sums[pg_key].append(stats.pg)
    stats.sums[kl_key].append(stats.kl)
    stats.sums[norm_key].append(float(grad_norm))
    stats.pg = stats.kl = 0.0


def update_policy(
    state: TrainState,
    settings: RunSettings,
    batch: RolloutBatch,
    old_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    advantages: AdvantageOutput,
    first: PolicyForward | None = None,
) -> dict[str, float]:
    """Alg. 1 lines 11-13: ``ppo_epochs`` passes over the batch in mini-batches of ``mini_batch_size`` groups,
    one AdamW step each, gradients accumulated over micro-batches of ``micro_batch_size_per_gpu`` sequences
    (verl's actor); returns the ``actor/`` metrics.

    Every micro-batch loss is aggregated with the *mini-batch* token / sequence counts, so the accumulated
    gradient equals that of the whole mini-batch loss (verl's ``global_batch_info``).

    Args:
        old_logprobs: (B, T) ``log pi_old``; ref_logprobs: (B, T) or None (no KL term).
        advantages: the estimator's output for this batch (its loss rows: PSR / NSR train on a subset).
        first: the single pass (:func:`single_pass_update` must hold): the update's one forward pass, already
            done over every row because ``log pi_old`` was read from it.
    """
    h, mask = settings.hyper, batch.response_mask
    if first is not None and not single_pass_update(settings, mask.shape[0]):
        raise ValueError(
            "update_policy with a forward pass done needs an update that is a single forward pass"
        )
    adv, loss_mask = advantages.token_level(mask), advantages.loss_mask(mask)
    stats = _ActorStats()
    if first is not None:  # the forward of the policy that sampled the batch
        stats.add_entropy(first.entropy, first.mask)
    for epoch in range(h.ppo_epochs):
        for mini in _mini_batches(settings, advantages, loss_mask, first):
            agg = _aggregation(settings, loss_mask[mini])
            state.optimizer.zero_grad(set_to_none=True)
            for rows in micro_batches(
                batch, mini, h.micro_batch_size_per_gpu, settings.max_tokens_per_micro_batch
            ):
                if first is not None:
                    fwd, first = first, None
                else:
                    fwd = policy_forward(state, settings, batch, rows, with_entropy=epoch == 0)
                    stats.add_entropy(fwd.entropy, fwd.mask)  # the sampling policy's entropy (first epoch)
                t = fwd.mask.shape[1]
                ref = None if ref_logprobs is None else ref_logprobs[rows, :t]
                lm = loss_mask[rows, :t]  # the estimator's loss rows (PSR / NSR keep a subset)
                loss = _loss(
                    settings, stats, fwd.logprobs, old_logprobs[rows, :t], adv[rows, :t], ref, lm, agg
                )
                loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated
            _optimizer_step(state, settings, stats)
    return stats.metrics()


def _mini_batches(
    settings: RunSettings, advantages: AdvantageOutput, loss_mask: Tensor, first: PolicyForward | None
) -> list[Tensor]:
    """The rows of each mini-batch, in order; none when no rollout enters the loss (NSR on an all-correct
    batch: no update). The single pass is one mini-batch of every row, the rows its forward covered."""
    if first is not None:
        return [first.rows] if bool(loss_mask[first.rows].any()) else []
    rows = _update_rows(loss_mask.shape[0], advantages, loss_mask.device)
    return [
        m for m in torch.split(rows, settings.hyper.mini_batch_size * settings.hyper.group_size) if m.numel()
    ]


def _update_rows(n: int, out: AdvantageOutput, device: torch.device) -> Tensor:
    """The rows the update's mini-batches split, in order: all ``n``, or the estimator's loss rows only (PSR /
    NSR: the authors' trainer subsets the batch before splitting it)."""
    rows = torch.arange(n, device=device)
    if out.loss_rows is None:
        return rows
    return rows[out.loss_rows.to(device)]


@torch.no_grad()
def ema_update(ref_model: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """``ref <- decay * ref + (1 - decay) * policy`` for every parameter (EMA reference)."""
    for r, p in zip(ref_model.parameters(), model.parameters(), strict=True):
        r.mul_(decay).add_(p.detach(), alpha=1.0 - decay)


ADVANTAGE_KEYS = ("actor/advantage_mean", "actor/advantage_std", "actor/advantage_min", "actor/advantage_max")


def _advantage_metrics(adv: Tensor, mask: Tensor) -> dict[str, float]:
    """Mean / std / min / max over rollouts (sequence-level, (B,)) or response tokens (token-level, (B, T))."""
    values = adv if adv.dim() == 1 else adv[mask.bool()]
    v = values.double()
    stats = (v.mean(), v.std(unbiased=False), v.min(), v.max())
    return dict(zip(ADVANTAGE_KEYS, map(float, stats), strict=True))


def _confidence_metrics(
    out: AdvantageOutput, old: Tensor, ref: Tensor, mask: Tensor, correct: Tensor
) -> dict[str, float]:
    """``ace/`` metrics (batch OEF = ``ace/overconfident_frac_neg``); for estimators without a confidence score
    (GRPO) they are computed from the same log-probs with multiplier 1, as ACE with its default parameters
    would measure them (``c_i / T_i`` over the rollouts it amplifies)."""
    conf, multiplier, amplified = out.confidence, out.multiplier, out.amplified
    if conf is None or multiplier is None or amplified is None:
        ace = AceEstimator()
        conf = confidence_scores(old, ref, mask, ace.length_normalize)
        multiplier = torch.ones_like(conf)
        amplified = out.negative & ~correct if ace.amplify == "incorrect" else out.negative
    return ace_metrics(conf, multiplier, out.negative, amplified, mask)


# --------------------------------------------------------------------------------------------------------------
# One step
# --------------------------------------------------------------------------------------------------------------

ACTOR_KEYS = (
    *OPTIMIZER_STEP_KEYS[:2],
    *POLICY_LOSS_METRIC_KEYS,
    *OPTIMIZER_STEP_KEYS[2:],
    ENTROPY_KEY,
    *ADVANTAGE_KEYS,
)
"""Every ``actor/`` key of a step with an update, from the functions that produce them (NaN without one)."""
ACE_KEYS = ace_metric_keys()


def estimate_advantages(
    est: EstimatorConfig, ro: Rollouts, ref: Tensor | None, old: Tensor
) -> AdvantageOutput:
    """Alg. 1 lines 6-9: GRPO group advantages, ACE's amplification of negative ones (registry by name), from
    the rollouts' rewards and ``log pi_old`` (and ``log pi_ref``: ACE's ``c_i``)."""
    assert ro.batch is not None
    return ADVANTAGE_ESTIMATORS.get(est.name)(
        ro.scores,
        ro.group_ids,
        old,
        ref,
        ro.batch.response_mask,
        correct=ro.correct,
        **est.kwargs(),
    )


def teacher_forced_logprobs(
    state: TrainState, settings: RunSettings, batch: RolloutBatch, policy: bool
) -> tuple[Tensor | None, Tensor | None]:
    """Alg. 1 line 8 inputs: ``log pi_old`` (with ``policy``: the sampler's own with ``old_logprobs: rollout``,
    else a no-grad teacher-forced pass of the policy) and ``log pi_ref`` (None without a reference model)."""
    h, max_tokens = settings.hyper, settings.max_tokens_per_micro_batch
    old = None
    if policy:
        old = (
            batch.logprobs
            if settings.old_logprobs == "rollout"
            else batch_logprobs(
                state.model, batch, h.temperature, h.micro_batch_size_per_gpu, max_tokens=max_tokens
            )[0]
        )
    ref = None
    if state.ref_model is not None:
        ref, _ = batch_logprobs(
            state.ref_model, batch, h.temperature, h.micro_batch_size_per_gpu, max_tokens=max_tokens
        )
    return old, ref


def train_step(
    state: TrainState, settings: RunSettings, data: TrainingSet, verifier: Verifier
) -> dict[str, float]:
    """One iteration of Algorithm 1; returns the step's metrics (``train/``, ``actor/``, ``ace/``, ``timing/``)."""
    timer = Timer()
    start = time.perf_counter()

    # rollout -> reward (Alg. 1 lines 2-5, + DAPO dynamic sampling)
    ro = collect_rollouts(state, settings, data, verifier, timer)
    metrics = _step_metrics(state, settings, ro)
    if ro.batch is None:
        logger.warning(
            "step %d: no group with mixed rewards after %d batches; no update",
            state.step + 1,
            int(metrics["train/gen_batches"]),
        )
    else:
        batch, mask = ro.batch, ro.batch.response_mask
        # log pi_old and log pi_ref of every response token (Alg. 1 line 8), teacher-forced without grad
        single = settings.old_logprobs == "recompute" and single_pass_update(settings, len(batch))
        with timer("logprobs"), autocast(mask.device, settings.precision):
            old, ref = teacher_forced_logprobs(state, settings, batch, policy=not single)
        first = None
        if (
            single
        ):  # the update is one forward pass: its log-probs, detached, are log pi_old (docs/training.md)
            with timer("update"):
                first = policy_forward(state, settings, batch, torch.arange(len(batch)), with_entropy=True)
            old = first.logprobs.detach().masked_fill(~first.mask.bool(), 0.0)
        assert old is not None

        # advantage (Alg. 1 lines 6-9): GRPO's group advantages, rescaled by the method's estimator
        with timer("advantage"):
            advantages = estimate_advantages(settings.estimator, ro, ref, old)

        # loss -> optimizer step (Alg. 1 lines 11-13)
        with timer("update"):
            metrics.update(update_policy(state, settings, batch, old, ref, advantages, first))

        # log
        metrics.update(_advantage_metrics(advantages.advantages, mask))
        if ref is not None:
            metrics.update(_confidence_metrics(advantages, old, ref, mask, ro.correct))
    state.scheduler.step()  # a step without an update still advances the LR schedule
    if settings.reference == "ema" and state.ref_model is not None:
        ema_update(state.ref_model, state.model, settings.ref_ema_decay)
    state.step += 1
    metrics.update(timer.metrics())
    for name in ("rollout", "reward", "logprobs", "advantage", "update"):
        metrics.setdefault(f"timing/{name}", 0.0)
    metrics["timing/step"] = time.perf_counter() - start
    return metrics


def _step_metrics(state: TrainState, settings: RunSettings, ro: Rollouts) -> dict[str, float]:
    """The step's metrics once its rollouts are drawn: every ``actor/`` (and ``ace/``) key NaN until the update
    sets it (a step without an update keeps them NaN), the sampling's ``train/`` metrics, the KL coefficient,
    the learning rate and the data epoch."""
    metrics: dict[str, float] = dict.fromkeys(ACTOR_KEYS, math.nan)
    if settings.needs_reference:
        metrics.update(dict.fromkeys(ACE_KEYS, math.nan))
    metrics.update(ro.sampled)
    metrics["actor/kl_coef"] = settings.kl_loss_coef
    metrics["train/lr"] = state.optimizer.param_groups[0]["lr"]
    metrics["train/epoch"] = state.stream.epoch + state.stream.position / state.stream.size
    return metrics
