"""The local trainer's algorithm: one step of Algorithm 1 of the paper (ACE-GRPO), read top to bottom.

One training step (:func:`train_step`)::

    Alg. 1 lines 2-5  prompts -> G rollouts each -> verifier rewards (+ DAPO dynamic sampling):
                      :func:`acerl.train.rollouts.collect_rollouts`
    Alg. 1 line 8     log pi_old, log pi_ref of every response token (teacher forcing; c_i is built from them)
    Alg. 1 lines 6-9  advantages <- estimator registry (grpo | ace) with the method's parameters
    Alg. 1 line 11    clipped surrogate (clip-low/high, dual clip, loss aggregation) + beta * KL(pi || pi_ref)
    Alg. 1 line 13    AdamW over mini-batches (gradient accumulation over micro-batches), grad clip, LR schedule
    log               train/ actor/ ace/ timing/ metrics

:func:`update_policy` loops over epochs, mini- and micro-batches. When that is one forward/backward pass (one
epoch, one mini-batch, one micro-batch: the embedded default), ``log pi_old`` is the detached values of its one
policy forward, and the advantages are estimated from them before the loss; otherwise ``log pi_old`` is a
separate no-grad pass before the update.
The run around the steps (init, resume, checkpoints, signals) is :mod:`acerl.train.run`. Nothing here
branches on a method's name: the estimator and the reward kind come from registries keyed by config values.
See docs/training.md.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import Tensor

from acerl.algos.advantages import ADVANTAGE_ESTIMATORS, AdvantageOutput, ace_metrics, confidence_scores
from acerl.algos.losses import POLICY_LOSS_FUNCTIONS, BatchCounts, agg_loss, kl_penalty
from acerl.config import AceEstimator, EstimatorConfig
from acerl.generate.rollout import RolloutBatch, response_logprobs
from acerl.runtime import autocast
from acerl.settings import RunSettings
from acerl.train.data import TrainingSet
from acerl.train.metrics import Timer
from acerl.train.rewards import Verifier
from acerl.train.rollouts import Rollouts, collect_rollouts
from acerl.train.state import TrainState

logger = logging.getLogger(__name__)

__all__ = [
    "ACE_KEYS",
    "ACTOR_KEYS",
    "batch_logprobs",
    "micro_batches",
    "PolicyUpdate",
    "single_pass_update",
    "train_step",
    "update_policy",
]


# --------------------------------------------------------------------------------------------------------------
# Alg. 1 line 8 inputs: teacher-forced log-probs
# --------------------------------------------------------------------------------------------------------------


def _micro_inputs(batch: RolloutBatch, rows: Tensor) -> tuple[Tensor, Tensor, int]:
    """Input ids / attention mask of ``rows`` with all-padding columns cut off, and their response width."""
    p = batch.prompt_length
    attn = batch.attention_mask[rows]
    first = int(attn[:, :p].any(dim=0).nonzero().min())
    t = int(batch.response_mask[rows].sum(dim=-1).max())
    return batch.input_ids[rows, first : p + t], attn[:, first : p + t], t


def micro_batches(
    batch: RolloutBatch, rows: Tensor, max_rows: int, max_tokens: int | None = None
) -> list[Tensor]:
    """``rows`` in order, split into consecutive micro-batches of at most ``max_rows`` rows and, with
    ``max_tokens``, at most ``max_tokens`` padded tokens: ``rows x width``, the width being the longest prompt
    plus the longest response of the micro-batch (the layout :func:`_micro_inputs` cuts). Long responses then
    go in small micro-batches and short ones in large ones (verl's ``ppo_max_token_len_per_gpu``); a row wider
    than the budget forms a micro-batch of its own. The gradient accumulated over micro-batches is the same
    however they are cut (the losses are aggregated with mini-batch counts), so this is a memory setting."""
    if max_tokens is None:
        return list(rows.split(max_rows))
    p = batch.prompt_length
    prompt_len = batch.attention_mask[rows, :p].sum(dim=-1).tolist()
    response_len = batch.response_mask[rows].sum(dim=-1).tolist()
    out: list[Tensor] = []
    start, longest_p, longest_r = 0, 0, 0
    for i, (lp, lr) in enumerate(zip(prompt_len, response_len, strict=True)):
        wide_p, wide_r = max(longest_p, lp), max(longest_r, lr)
        n = i - start
        if n > 0 and (n + 1 > max_rows or (n + 1) * (wide_p + wide_r) > max_tokens):
            out.append(rows[start:i])
            start, wide_p, wide_r = i, lp, lr
        longest_p, longest_r = wide_p, wide_r
    out.append(rows[start:])
    return out


@torch.no_grad()
def batch_logprobs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    temperature: float,
    micro_batch_size: int,
    with_entropy: bool = False,
    max_tokens: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """(B, T) log-probs (and entropies) of every response token under ``model``, in the micro-batches of
    :func:`micro_batches` (``micro_batch_size`` rows, ``max_tokens`` padded tokens); zeros on padding."""
    b, t = batch.response_ids.shape
    logprobs = torch.zeros(b, t, dtype=torch.float32, device=batch.input_ids.device)
    entropy = torch.zeros_like(logprobs) if with_entropy else None
    for rows in micro_batches(batch, torch.arange(b, device=logprobs.device), micro_batch_size, max_tokens):
        ids, attn, tm = _micro_inputs(batch, rows)
        lp, ent = response_logprobs(model, ids, attn, tm, temperature=temperature, with_entropy=with_entropy)
        logprobs[rows, :tm] = lp
        if entropy is not None and ent is not None:
            entropy[rows, :tm] = ent
    mask = batch.response_mask.bool()
    logprobs = logprobs.masked_fill(~mask, 0.0)
    return logprobs, None if entropy is None else entropy.masked_fill(~mask, 0.0)


# --------------------------------------------------------------------------------------------------------------
# Alg. 1 lines 11-13: clipped surrogate + KL, AdamW over mini-batches
# --------------------------------------------------------------------------------------------------------------


def single_pass_update(setup: RunSettings, rows: int) -> bool:
    """Whether updating on ``rows`` sequences is one forward/backward pass: one epoch, one mini-batch, one
    micro-batch (the embedded default). Then ``log pi_old`` -- the policy's log-probs before the update --
    are exactly the (detached) log-probs of that pass, and a separate teacher-forced pass is redundant."""
    h = setup.hyper
    one_micro = rows <= h.micro_batch_size_per_gpu and setup.max_tokens_per_micro_batch is None
    return h.ppo_epochs == 1 and rows <= h.mini_batch_size * h.group_size and one_micro


@contextmanager
def _checkpointing(model: torch.nn.Module, setup: RunSettings) -> Iterator[None]:
    """Train mode for the update's forward when gradient checkpointing is on (transformers checkpoints decoder
    layers only in train mode; the models here have no dropout, so the values are unchanged). The prompt-KV
    sharing of :func:`acerl.generate.rollout.response_logprobs` needs a KV cache, which checkpointed layers do not
    fill, so it is off then."""
    if not setup.gradient_checkpointing:
        yield
        return
    model.train()
    try:
        yield
    finally:
        model.eval()


def _policy_forward(
    state: TrainState, setup: RunSettings, batch: RolloutBatch, rows: Tensor, with_entropy: bool
) -> tuple[Tensor, Tensor | None, Tensor]:
    """``log pi_theta`` (with grad) and the entropy of ``rows``' response tokens, and their response mask, all
    cut to the rows' longest response."""
    ids, attn, t = _micro_inputs(batch, rows)
    with autocast(batch.response_mask.device, setup.precision), _checkpointing(state.model, setup):
        logprobs, entropy = response_logprobs(
            state.model,
            ids,
            attn,
            t,
            temperature=setup.hyper.temperature,
            with_entropy=with_entropy,
            share_prompts=not setup.gradient_checkpointing,
        )
    return logprobs, entropy, batch.response_mask[rows, :t]


def _aggregation(setup: RunSettings, mini_mask: Tensor) -> BatchCounts:
    """The mini-batch counts every micro-batch loss is aggregated with, so the accumulated gradient equals that
    of the whole mini-batch loss (verl's ``global_batch_info``)."""
    return {
        "batch_num_tokens": mini_mask.sum(),
        "global_batch_size": (mini_mask.sum(dim=-1) > 0).sum(),
        "loss_scale_factor": setup.hyper.max_response_length,
    }


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
        out["actor/entropy"] = self.entropy_sum / max(1, self.entropy_tokens)
        return out


def _loss(
    setup: RunSettings,
    stats: _ActorStats,
    logprobs: Tensor,
    old: Tensor,
    adv: Tensor,
    ref: Tensor | None,
    mask: Tensor,
    agg: BatchCounts,
) -> Tensor:
    """Alg. 1 line 11 on one micro-batch: the policy loss plus ``beta * KL`` (their values go to ``stats``)."""
    fam = setup.family
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
        loss = loss + setup.kl_coef * kl
        stats.kl += float(kl.detach())
    return loss


def _optimizer_step(state: TrainState, setup: RunSettings, stats: _ActorStats) -> None:
    """Alg. 1 line 13: clip the accumulated gradient, one AdamW step (skipped on a non-finite norm)."""
    params = [p for p in state.model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, setup.hyper.grad_clip)
    if torch.isfinite(grad_norm):
        state.optimizer.step()
    else:
        logger.warning(
            "step %d: non-finite gradient norm %s; optimizer step skipped", state.step + 1, grad_norm
        )
    state.optimizer.zero_grad(set_to_none=True)
    stats.sums["actor/pg_loss"].append(stats.pg)
    stats.sums["actor/kl_loss"].append(stats.kl)
    stats.sums["actor/grad_norm"].append(float(grad_norm))
    stats.pg = stats.kl = 0.0


@dataclass(frozen=True)
class PolicyUpdate:
    """What :func:`update_policy` returns: the ``actor/`` metrics, ``log pi_old`` and the advantages."""

    metrics: dict[str, float]
    old_logprobs: Tensor
    advantages: AdvantageOutput


def update_policy(
    state: TrainState,
    setup: RunSettings,
    batch: RolloutBatch,
    old_logprobs: Tensor | None,
    ref_logprobs: Tensor | None,
    estimate: Callable[[Tensor], AdvantageOutput],
    timer: Timer | None = None,
) -> PolicyUpdate:
    """Alg. 1 lines 6-13: the advantages ``estimate(log pi_old)``, then ``ppo_epochs`` passes over the batch in
    mini-batches of ``mini_batch_size`` groups, one AdamW step each, gradients accumulated over micro-batches
    of ``micro_batch_size_per_gpu`` sequences (verl's actor).

    Every micro-batch loss is aggregated with the *mini-batch* token / sequence counts, so the accumulated
    gradient equals that of the whole mini-batch loss (verl's ``global_batch_info``).

    ``old_logprobs`` None is the single pass (:func:`single_pass_update` must hold: one epoch, one mini-batch,
    one micro-batch): the policy has not moved before its first forward, so that forward's detached log-probs
    (zeros on padding, as :func:`batch_logprobs` returns them) are ``log pi_old``, and the advantages are
    estimated from them before the loss. The separate teacher-forced pass is saved.

    Args:
        old_logprobs: (B, T) or None (see above); ref_logprobs: (B, T) or None (no KL term).
        estimate: ``log pi_old`` -> advantages (ACE's ``c_i`` needs them).
        timer: records ``advantage`` (the estimate); the caller times the whole update.
    """
    h, mask = setup.hyper, batch.response_mask
    timer = timer or Timer()
    if old_logprobs is None and not single_pass_update(setup, mask.shape[0]):
        raise ValueError("update_policy without old_logprobs needs an update that is a single forward pass")
    old, out, advantages, loss_mask = old_logprobs, None, None, mask
    if old is not None:
        with timer("advantage"):
            out = estimate(old)
        advantages, loss_mask = out.token_level(mask), out.loss_mask(mask)
    stats = _ActorStats()
    for epoch in range(h.ppo_epochs):
        for mini in _update_rows(mask.shape[0], out, mask.device).split(h.mini_batch_size * h.group_size):
            if mini.numel() == 0:  # no rollout enters the loss (NSR on an all-correct batch): no update
                continue
            agg = None if out is None else _aggregation(setup, loss_mask[mini])
            state.optimizer.zero_grad(set_to_none=True)
            update = True
            for rows in micro_batches(
                batch, mini, h.micro_batch_size_per_gpu, setup.max_tokens_per_micro_batch
            ):
                logprobs, entropy, m = _policy_forward(state, setup, batch, rows, with_entropy=epoch == 0)
                if old is None:  # the single pass: this forward is the policy before the update
                    old = logprobs.detach().masked_fill(~m.bool(), 0.0)
                    with timer("advantage"):
                        out = estimate(old)
                    advantages, loss_mask = out.token_level(mask), out.loss_mask(mask)
                    agg = _aggregation(setup, loss_mask[mini])
                    if not bool(loss_mask[mini].any()):  # no rollout enters the loss (NSR, all correct)
                        stats.add_entropy(entropy, m)
                        update = False
                        break
                assert advantages is not None and agg is not None
                t = m.shape[1]
                stats.add_entropy(entropy, m)  # entropy of the policy that sampled the batch (first pass)
                ref = None if ref_logprobs is None else ref_logprobs[rows, :t]
                lm = loss_mask[rows, :t]  # the estimator's loss rows (PSR / NSR keep a subset)
                loss = _loss(setup, stats, logprobs, old[rows, :t], advantages[rows, :t], ref, lm, agg)
                loss.backward()
            if update:
                _optimizer_step(state, setup, stats)
    assert old is not None and out is not None
    return PolicyUpdate(stats.metrics(), old, out)


def _update_rows(n: int, out: AdvantageOutput | None, device: torch.device) -> Tensor:
    """The rows the update's mini-batches split, in order: all ``n``, or, once the advantages are known, the
    estimator's loss rows only (PSR / NSR: the authors' trainer subsets the batch before splitting it)."""
    rows = torch.arange(n, device=device)
    if out is None or out.loss_rows is None:
        return rows
    return rows[out.loss_rows.to(device)]


@torch.no_grad()
def ema_update(ref_model: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """``ref <- decay * ref + (1 - decay) * policy`` for every parameter (EMA reference)."""
    for r, p in zip(ref_model.parameters(), model.parameters(), strict=True):
        r.mul_(decay).add_(p.detach(), alpha=1.0 - decay)


def _advantage_metrics(adv: Tensor, mask: Tensor) -> dict[str, float]:
    """Mean / std / min / max over rollouts (sequence-level, (B,)) or response tokens (token-level, (B, T))."""
    values = adv if adv.dim() == 1 else adv[mask.bool()]
    v = values.double()
    return {
        "actor/advantage_mean": float(v.mean()),
        "actor/advantage_std": float(v.std(unbiased=False)),
        "actor/advantage_min": float(v.min()),
        "actor/advantage_max": float(v.max()),
    }


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
    "actor/pg_loss",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/ppo_kl",
    "actor/grad_norm",
    "actor/entropy",
    "actor/advantage_mean",
    "actor/advantage_std",
    "actor/advantage_min",
    "actor/advantage_max",
)
ACE_KEYS = (
    "ace/negative_frac",
    "ace/confidence_mean_neg",
    "ace/overconfident_frac_neg",
    "ace/multiplier_mean_neg",
    "ace/multiplier_max",
)


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
    state: TrainState, setup: RunSettings, batch: RolloutBatch, policy: bool
) -> tuple[Tensor | None, Tensor | None]:
    """Alg. 1 line 8 inputs: ``log pi_old`` (with ``policy``: the sampler's own with ``old_logprobs: rollout``,
    else a no-grad teacher-forced pass of the policy) and ``log pi_ref`` (None without a reference model)."""
    h, max_tokens = setup.hyper, setup.max_tokens_per_micro_batch
    old = None
    if policy:
        old = (
            batch.logprobs
            if setup.old_logprobs == "rollout"
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
    state: TrainState, setup: RunSettings, data: TrainingSet, verifier: Verifier
) -> dict[str, float]:
    """One iteration of Algorithm 1; returns the step's metrics (``train/``, ``actor/``, ``ace/``, ``timing/``)."""
    timer = Timer()
    start = time.perf_counter()
    lr = state.optimizer.param_groups[0]["lr"]

    # Alg. 1 lines 2-5 (+ DAPO dynamic sampling): prompts -> G rollouts each -> verifier rewards
    ro = collect_rollouts(state, setup, data, verifier, timer)
    metrics: dict[str, float] = dict.fromkeys(ACTOR_KEYS, math.nan)
    if setup.needs_reference:
        metrics.update(dict.fromkeys(ACE_KEYS, math.nan))
    metrics.update(ro.sampled)
    metrics["actor/kl_coef"] = setup.kl_loss_coef
    metrics["train/lr"] = lr
    metrics["train/epoch"] = state.stream.epoch + state.stream.position / state.stream.size

    if ro.batch is not None:
        batch = ro.batch
        mask = batch.response_mask
        single = setup.old_logprobs == "recompute" and single_pass_update(setup, len(batch))
        # Alg. 1 line 8 inputs: log pi_ref, and log pi_old unless the update's own forward pass gives it
        with timer("logprobs"), autocast(mask.device, setup.precision):
            old, ref = teacher_forced_logprobs(state, setup, batch, policy=not single)
        estimate = partial(estimate_advantages, setup.estimator, ro, ref)
        with timer("update"):  # Alg. 1 lines 6-13 (the advantages are timed apart)
            update = update_policy(state, setup, batch, old, ref, estimate, timer)
        old, out = update.old_logprobs, update.advantages
        metrics.update(update.metrics)
        metrics.update(_advantage_metrics(out.advantages, mask))
        if ref is not None:
            metrics.update(_confidence_metrics(out, old, ref, mask, ro.correct))
    else:
        logger.warning(
            "step %d: no group with mixed rewards after %d batches; no update",
            state.step + 1,
            int(metrics["train/gen_batches"]),
        )
    state.scheduler.step()  # a step without an update still advances the LR schedule
    if setup.reference == "ema" and state.ref_model is not None:
        ema_update(state.ref_model, state.model, setup.ref_ema_decay)
    state.step += 1
    metrics.update(timer.metrics())
    for name in ("rollout", "reward", "logprobs", "advantage", "update"):
        metrics.setdefault(f"timing/{name}", 0.0)
    metrics["timing/step"] = time.perf_counter() - start
    return metrics
