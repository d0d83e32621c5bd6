"""The local trainer: Algorithm 1 of the paper (ACE-GRPO), read top to bottom.

One training step (:func:`train_step`)::

    Alg. 1 line 2     prompts  <- next prompts_per_step rows of the seeded, epoch-shuffled training set
    Alg. 1 line 4     rollouts <- G samples per prompt at the rollout temperature (KV-cached, batched)
    Alg. 1 line 5     rewards  <- verifier (binary 1/0 or signed +1/-1) + DAPO overlong shaping
    (DAPO)            dynamic sampling: repeat 2-5 until prompts_per_step groups have mixed verdicts
    Alg. 1 line 8     log pi_old, log pi_ref of every response token (teacher forcing; c_i is built from them)
    Alg. 1 lines 6-9  advantages <- estimator registry (grpo | ace) with the method's parameters
    Alg. 1 line 11    clipped surrogate (clip-low/high, dual clip, loss aggregation) + beta * KL(pi || pi_ref)
    Alg. 1 line 13    AdamW over mini-batches (gradient accumulation over micro-batches), grad clip, LR schedule
    log               train/ actor/ ace/ timing/ metrics -> metrics.jsonl + dvclive

:func:`train_run` wraps the steps with resumable checkpoints, diagnostic snapshots, preemption handling and
the final policy folder. Nothing here branches on a method's name: the estimator, the policy loss, the reward
kind and the LR schedule come from registries keyed by config values. See docs/training.md.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer

from acerl import paths
from acerl.algos.advantages import (
    AceOutput,
    AdvantageOutput,
    compute_advantages,
    confidence_scores,
)
from acerl.algos.dapo import filter_groups
from acerl.algos.losses import POLICY_LOSSES, agg_loss, kl_penalty
from acerl.config import Config, EstimatorConfig, Run, spec_json
from acerl.data.io import read_jsonl
from acerl.errors import MissingInputError
from acerl.generate import resolve_device
from acerl.generate.hf import (
    RolloutBatch,
    encode_prompt,
    eos_pad_ids,
    response_logprobs,
    response_text,
    sample_batch,
)
from acerl.prompts import build_prompt
from acerl.runtime import autocast, configure_torch
from acerl.settings import OldLogprobs, ReferenceKind, RunSettings, local_run_spec
from acerl.train.checkpoint import (
    find_latest,
    get_rng_states,
    load_checkpoint,
    read_trainer_state,
    remove_stale_temps,
    save_checkpoint,
    save_hf_folder,
    set_rng_states,
    supersede_stale_state,
    write_text_atomic,
)
from acerl.train.data import PromptStream
from acerl.train.metrics import MetricsLog
from acerl.train.optim import build_optimizer
from acerl.train.rewards import Rewards, Verifier, compute_rewards
from acerl.train.signals import PreemptionFlag, TrainingPreempted

logger = logging.getLogger(__name__)

__all__ = [
    "TrainState",
    "TrainingSet",
    "batch_logprobs",
    "collect_rollouts",
    "init_state",
    "micro_batches",
    "train_run",
    "single_pass_update",
    "train_step",
    "update_policy",
]


@dataclass
class TrainingSet:
    """Training rows (``problem``, ``answer``) with their prompts encoded on first use."""

    rows: list[dict[str, Any]]
    tokenizer: Any
    template: str
    max_prompt_length: int
    source: Path
    _ids: dict[int, list[int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def prompt_ids(self, i: int) -> list[int]:
        if i not in self._ids:
            row = self.rows[i]
            ids = encode_prompt(self.tokenizer, build_prompt(row["problem"], self.template, self.tokenizer))
            if len(ids) > self.max_prompt_length:
                raise ValueError(
                    f"{self.source}: row {row.get('id', i)!r} has a {len(ids)}-token prompt, longer than "
                    f"max_prompt_length={self.max_prompt_length} (models.<model>.train.max_prompt_length)"
                )
            self._ids[i] = ids
        return self._ids[i]

    def answer(self, i: int) -> str:
        return str(self.rows[i]["answer"])


@dataclass
class TrainState:
    """The mutable state of a run (everything a checkpoint restores, plus the fixed reference)."""

    model: torch.nn.Module
    ref_model: torch.nn.Module | None
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    generator: torch.Generator
    stream: PromptStream
    step: int = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


class Timer:
    """Accumulates wall-clock seconds per name (``timing/<name>``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"timing/{k}": v for k, v in self.seconds.items()}


# --------------------------------------------------------------------------------------------------------------
# Alg. 1 lines 2-5: prompts, rollouts, rewards (+ DAPO dynamic sampling)
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Rollouts:
    """The groups a step trains on, plus statistics over everything sampled this step.

    Attributes:
        batch: kept rollouts, ``G`` consecutive rows per group.
        scores: (B,) rewards used for advantages; group_ids: (B,) group index per row (both on the model's
            device, like ``batch``).
        sampled: metrics over all rollouts sampled this step (kept or filtered out).
        correct: (B,) bool grader verdicts of the kept rollouts, before any overlong penalty (which rollouts
            ACE amplifies, ``estimator.amplify``).
    """

    batch: RolloutBatch | None
    scores: Tensor
    group_ids: Tensor
    sampled: dict[str, float]
    correct: Tensor


def collect_rollouts(
    state: TrainState, setup: RunSettings, data: TrainingSet, verifier: Verifier, timer: Timer
) -> Rollouts:
    """Sample and grade prompt batches; with dynamic sampling keep only groups with mixed verdicts and draw
    new batches (at most ``dynamic_sampling.max_batches``) until ``prompts_per_step`` groups are kept."""
    h, fam = setup.hyper, setup.family
    g, want = h.group_size, h.prompts_per_step
    eos_id, pad_id = eos_pad_ids(state.tokenizer)
    dynamic = fam.dynamic_sampling.enable
    max_batches = fam.dynamic_sampling.max_batches if dynamic else 1
    kept: list[tuple[RolloutBatch, Tensor, Rewards]] = []  # (batch, kept rows, rewards of kept rows)
    n_kept = n_seen = n_mixed = 0
    all_scores, all_correct, all_lengths, all_stopped, all_overlong = [], [], [], [], []
    n_batches = 0
    for _ in range(max_batches):
        n_batches += 1
        idx = state.stream.next(want)
        with timer("rollout"), autocast(state.device, setup.precision):
            batch = sample_batch(
                state.model,
                [data.prompt_ids(i) for i in idx],
                n=g,
                temperature=h.temperature,
                top_p=h.top_p,
                max_new_tokens=h.max_response_length,
                eos_id=eos_id,
                pad_id=pad_id,
                generator=state.generator,
            )
        with timer("reward"):
            texts = [
                response_text(state.tokenizer, batch.response(r), bool(batch.stopped[r]))
                for r in range(len(batch))
            ]
            golds = [data.answer(i) for i in idx for _ in range(g)]
            rewards = compute_rewards(
                verifier,
                texts,
                golds,
                batch.response_lengths.cpu(),
                fam.reward,
                fam.overlong,
                h.max_response_length,
            )
        group = torch.arange(len(idx)).repeat_interleave(g)
        mixed, _ = filter_groups(rewards.correct.double(), group)  # verl filter_groups metric "acc"
        n_seen += len(idx)
        n_mixed += int(mixed.sum()) // g
        all_scores.append(rewards.scores)
        all_correct.append(rewards.correct)
        all_lengths.append(batch.response_lengths.cpu())
        all_stopped.append(batch.stopped.cpu())
        all_overlong.append(rewards.overlong)
        keep = mixed if dynamic else torch.ones_like(mixed)
        rows = keep.nonzero().squeeze(-1)[: (want - n_kept) * g]
        kept.append(
            (batch, rows, Rewards(rewards.scores[rows], rewards.correct[rows], rewards.overlong[rows]))
        )
        n_kept += rows.numel() // g
        if n_kept >= want:
            break
    scores = torch.cat(all_scores)
    lengths = torch.cat(all_lengths).double()
    sampled = {
        "train/reward_mean": float(scores.mean()),
        "train/pass_rate": float(torch.cat(all_correct).double().mean()),
        "train/overlong_penalty_mean": float(torch.cat(all_overlong).double().mean()),
        "train/response_length_mean": float(lengths.mean()),
        "train/response_length_max": float(lengths.max()),
        "train/response_clip_frac": float((~torch.cat(all_stopped)).double().mean()),
        "train/kept_groups_frac": n_mixed / n_seen if dynamic else 1.0,
        "train/mixed_groups_frac": n_mixed / n_seen,
        "train/gen_batches": float(n_batches),
        "train/groups": float(n_kept),
    }
    device = state.device
    if n_kept == 0:
        empty = torch.zeros(0, device=device)
        return Rollouts(
            None, empty, torch.zeros(0, dtype=torch.long, device=device), sampled,
            torch.zeros(0, dtype=torch.bool, device=device),
        )  # fmt: skip
    if len(kept) == 1 and kept[0][1].numel() == len(kept[0][0]):
        merged = kept[0][0]  # everything kept: no re-packing
    else:
        merged = RolloutBatch.cat([b for b, _, _ in kept], pad_id, rows=[r for _, r, _ in kept])
    # rewards are graded on the host; the advantages combine them with the response mask on the model's device
    return Rollouts(
        batch=merged,
        scores=torch.cat([r.scores for _, _, r in kept]).to(device),
        group_ids=torch.arange(n_kept, device=device).repeat_interleave(g),
        sampled=sampled,
        correct=torch.cat([r.correct for _, _, r in kept]).to(device),
    )


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


OnPolicyAdvantages = Callable[[Tensor], Tensor]


@contextmanager
def _checkpointing(model: torch.nn.Module, setup: RunSettings) -> Iterator[None]:
    """Train mode for the update's forward when gradient checkpointing is on (transformers checkpoints decoder
    layers only in train mode; the models here have no dropout, so the values are unchanged). The prompt-KV
    sharing of :func:`acerl.generate.hf.response_logprobs` needs a KV cache, which checkpointed layers do not
    fill, so it is off then."""
    if not setup.gradient_checkpointing:
        yield
        return
    model.train()
    try:
        yield
    finally:
        model.eval()


def update_policy(
    state: TrainState,
    setup: RunSettings,
    batch: RolloutBatch,
    old_logprobs: Tensor | None,
    ref_logprobs: Tensor | None,
    advantages: Tensor | OnPolicyAdvantages,
) -> dict[str, float]:
    """``ppo_epochs`` passes over the batch in mini-batches of ``mini_batch_size`` groups, one AdamW step
    each, gradients accumulated over micro-batches of ``micro_batch_size_per_gpu`` sequences (verl's actor).

    Every micro-batch loss is aggregated with the *mini-batch* token / sequence counts, so the accumulated
    gradient equals that of the whole mini-batch loss (verl's ``global_batch_info``).

    Args:
        old_logprobs, advantages: (B, T); ref_logprobs: (B, T) or None (no KL term).
        old_logprobs=None: on-policy single pass (:func:`single_pass_update` must hold): ``log pi_old`` is the
            detached log-probs of the update's own forward pass (zeros on padding, as
            :func:`batch_logprobs` returns them) and ``advantages`` is a function of them returning (B, T)
            (ACE's ``c_i`` needs ``log pi_old``).
    """
    h, fam = setup.hyper, setup.family
    if old_logprobs is None and not single_pass_update(setup, batch.response_mask.shape[0]):
        raise ValueError("old_logprobs=None needs an update that is a single forward pass")
    loss_fn = POLICY_LOSSES.get(setup.policy_loss)
    mask = batch.response_mask
    b = mask.shape[0]
    mini_rows = h.mini_batch_size * h.group_size
    sums: dict[str, list[float]] = defaultdict(list)
    params = [p for p in state.model.parameters() if p.requires_grad]
    entropy_sum, entropy_tokens = 0.0, 0
    for epoch in range(h.ppo_epochs):
        for mini in torch.arange(b, device=mask.device).split(mini_rows):
            n_tokens = mask[mini].sum()
            n_seqs = (mask[mini].sum(dim=-1) > 0).sum()
            state.optimizer.zero_grad(set_to_none=True)
            pg_total = kl_total = 0.0
            for rows in micro_batches(
                batch, mini, h.micro_batch_size_per_gpu, setup.max_tokens_per_micro_batch
            ):
                ids, attn, t = _micro_inputs(batch, rows)
                with autocast(mask.device, setup.precision), _checkpointing(state.model, setup):
                    logprobs, entropy = response_logprobs(
                        state.model,
                        ids,
                        attn,
                        t,
                        temperature=h.temperature,
                        with_entropy=epoch == 0,
                        share_prompts=not setup.gradient_checkpointing,
                    )
                m = mask[rows, :t]
                if old_logprobs is None:  # on-policy single pass: rows is the whole batch, t its width
                    old_mb = logprobs.detach().masked_fill(~m.bool(), 0.0)
                    adv_mb = advantages(old_mb) if callable(advantages) else advantages
                else:
                    old_mb, adv_mb = old_logprobs[rows, :t], advantages[rows, :t]  # type: ignore[index]
                if entropy is not None:  # entropy of the policy that sampled the batch (first pass)
                    entropy_sum += float((entropy * m).sum())
                    entropy_tokens += int(m.sum())
                agg = {
                    "batch_num_tokens": n_tokens,
                    "global_batch_size": n_seqs,
                    "loss_scale_factor": h.max_response_length,
                }
                out = loss_fn(
                    old_mb,
                    logprobs,
                    adv_mb,
                    m,
                    fam.loss_agg_mode,
                    clip_ratio_low=fam.clip_ratio_low,
                    clip_ratio_high=fam.clip_ratio_high,
                    clip_ratio_c=fam.clip_ratio_c,
                    **agg,
                )
                loss = out.loss
                pg_total += float(out.loss.detach())
                for k, v in out.metrics.items():
                    sums[k].append(v)
                if fam.use_kl_loss and ref_logprobs is not None:
                    kl = agg_loss(
                        kl_penalty(logprobs, ref_logprobs[rows, :t], fam.kl_type), m, fam.loss_agg_mode, **agg
                    )
                    loss = loss + setup.kl_coef * kl
                    kl_total += float(kl.detach())
                loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, h.grad_clip)
            if torch.isfinite(grad_norm):
                state.optimizer.step()
            else:
                logger.warning(
                    "step %d: non-finite gradient norm %s; optimizer step skipped", state.step + 1, grad_norm
                )
            state.optimizer.zero_grad(set_to_none=True)
            sums["actor/pg_loss"].append(pg_total)
            sums["actor/kl_loss"].append(kl_total)
            sums["actor/grad_norm"].append(float(grad_norm))
    metrics = {k: sum(v) / len(v) for k, v in sums.items()}
    metrics["actor/entropy"] = entropy_sum / max(1, entropy_tokens)
    return metrics


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
    out: AdvantageOutput, old: Tensor, ref: Tensor, mask: Tensor, estimator: EstimatorConfig, correct: Tensor
) -> dict[str, float]:
    """``ace/`` metrics (batch OEF = ``ace/overconfident_frac_neg``); for estimators that do not report them
    (GRPO) they are computed from the same log-probs with multiplier 1, over the rollouts ACE would amplify
    (``estimator.amplify``)."""
    if out.metrics:
        return dict(out.metrics)
    conf = confidence_scores(old, ref, mask, estimator.length_normalize)
    negative = out.stats.get("negative", out.advantages < 0 if out.advantages.dim() == 1 else None)
    if negative is None:
        return {}
    amplified = negative & ~correct if estimator.amplify == "incorrect" else negative
    ones = torch.ones_like(conf)
    return AceOutput(out.advantages, conf, ones, negative, torch.ones_like(negative), amplified).metrics()


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


def train_step(
    state: TrainState, setup: RunSettings, data: TrainingSet, verifier: Verifier
) -> dict[str, float]:
    """One iteration of Algorithm 1; returns the step's metrics (``train/``, ``actor/``, ``ace/``, ``timing/``)."""
    h, est = setup.hyper, setup.estimator
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
        # Alg. 1 line 8 inputs: log pi_old (the sampling policy) and log pi_ref of every response token
        in_update = setup.old_logprobs == "recompute" and single_pass_update(setup, len(batch))
        micro = {"max_tokens": setup.max_tokens_per_micro_batch}
        with timer("logprobs"), autocast(mask.device, setup.precision):
            old: Tensor | None = None
            if setup.old_logprobs == "rollout":
                old = batch.logprobs
            elif not in_update:
                old, _ = batch_logprobs(
                    state.model, batch, h.temperature, h.micro_batch_size_per_gpu, **micro
                )
            ref = None
            if state.ref_model is not None:
                ref, _ = batch_logprobs(
                    state.ref_model, batch, h.temperature, h.micro_batch_size_per_gpu, **micro
                )
        computed: dict[str, Any] = {}

        def advantages_from(old_lp: Tensor) -> Tensor:
            # Alg. 1 lines 6-9: GRPO group advantages, ACE amplification of negative ones (registry by name)
            with timer("advantage"):
                out = compute_advantages(
                    est.name, ro.scores, ro.group_ids, old_lp, ref, mask, correct=ro.correct, **est.kwargs()
                )
            computed.update(old=old_lp, out=out)
            return out.token_level(mask)

        # Alg. 1 lines 11-13: clipped surrogate + beta * KL, AdamW steps (log pi_old from the update's own
        # forward pass when that is the only one: same values, one pass less)
        update_start = time.perf_counter()
        advantages = advantages_from if old is None else advantages_from(old)
        metrics.update(update_policy(state, setup, batch, old, ref, advantages))
        timer.seconds["update"] += time.perf_counter() - update_start - timer.seconds["advantage"]
        old, out = computed["old"], computed["out"]
        metrics.update(_advantage_metrics(out.advantages, mask))
        if ref is not None:
            metrics.update(_confidence_metrics(out, old, ref, mask, est, ro.correct))
    else:
        logger.warning(
            "step %d: no group with mixed rewards after %d batches; no update",
            state.step + 1,
            int(metrics["train/gen_batches"]),
        )
    with warnings.catch_warnings():  # a step without an update still advances the LR schedule
        warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
        state.scheduler.step()
    if setup.reference == "ema" and state.ref_model is not None:
        ema_update(state.ref_model, state.model, setup.ref_ema_decay)
    state.step += 1
    metrics.update(timer.metrics())
    for name in ("rollout", "reward", "logprobs", "advantage", "update"):
        metrics.setdefault(f"timing/{name}", 0.0)
    metrics["timing/step"] = time.perf_counter() - start
    return metrics


# --------------------------------------------------------------------------------------------------------------
# A whole run
# --------------------------------------------------------------------------------------------------------------


def _warn_short_mini_batch(setup: RunSettings) -> None:
    h = setup.hyper
    if h.prompts_per_step % h.mini_batch_size != 0:
        logger.warning(
            "models.%s.train.prompts_per_step (%d) is not a multiple of mini_batch_size (%d): "
            "the last mini-batch of each step is smaller",
            setup.run.model,
            h.prompts_per_step,
            h.mini_batch_size,
        )


def _comparable_spec(spec: dict[str, Any]) -> str:
    return spec_json({k: v for k, v in spec.items() if k != "diagnostic_steps"})


def _trainer_state(state: TrainState, spec: str) -> dict[str, Any]:
    return {
        "scheduler": state.scheduler.state_dict(),
        "data": state.stream.state_dict(),
        "rng": get_rng_states(state.generator),
        "spec": spec,
    }


def train_run(
    cfg: Config,
    run: Run,
    root: Path | str,
    *,
    device: str = "cpu",
    threads: int = 1,
    progress: bool = True,
    verifier: Verifier | None = None,
    reference: ReferenceKind | None = None,
    ref_ema_decay: float | None = None,
    old_logprobs: OldLogprobs | None = None,
) -> Path:
    """Train ``run`` with the local backend; returns the final policy folder ``paths.policy_dir(root, run)``.

    Resumes from the newest checkpoint under ``paths.checkpoints_dir`` if there is one; a run whose final
    policy exists is not touched. SIGTERM / SIGUSR1 checkpoint at the next step boundary and raise
    :class:`acerl.train.signals.TrainingPreempted` (exit code 75).

    Args:
        cfg, run: the validated config and the (model, method, seed) to train.
        root: work directory (``data/``, ``models/``, ``runs/``).
        device: ``cpu``, ``cuda`` or ``auto``; threads: ``torch.set_num_threads`` for the run (restored after;
            denormals are flushed to zero from then on, :func:`acerl.runtime.configure_torch`).
        progress: show a tqdm bar.
        verifier: grader for rewards (default: an :class:`acerl.grading.Grader` from ``cfg.grading``).
        reference: ``initial`` (frozen base model, the paper) or ``ema``; overrides the config.
        ref_ema_decay: EMA decay per step for ``reference="ema"``; overrides the config.
        old_logprobs: ``recompute`` (default, verl) or ``rollout``; see :class:`RunSettings`.
    """
    root = Path(root)
    final = paths.policy_dir(root, run)
    if final.is_dir() and (final / "config.json").is_file():
        logger.info("%s: final policy %s exists; nothing to do", run.id, final)
        return final
    setup = cfg.resolve(run, reference=reference, ref_ema_decay=ref_ema_decay, old_logprobs=old_logprobs)
    _warn_short_mini_batch(setup)
    spec = local_run_spec(setup)
    spec_text = _comparable_spec(spec)
    run_dir, ckpt_dir = paths.run_dir(root, run), paths.checkpoints_dir(root, run)
    for folder in (run_dir, ckpt_dir, paths.diag_dir(root, run)):
        remove_stale_temps(folder)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(paths.run_spec_file(root, run), json.dumps(spec, indent=2, sort_keys=True) + "\n")

    ckpt = find_latest(ckpt_dir)
    if ckpt is not None and read_trainer_state(ckpt).get("spec") != spec_text:
        supersede_stale_state(root, run, ckpt)
        ckpt = None

    previous_threads = torch.get_num_threads()
    configure_torch(threads)
    try:
        dev = torch.device(resolve_device(device))
        state, data = init_state(root, run, setup, dev)
        if ckpt is not None:
            _resume(state, ckpt, setup, dev)
        elif 0 in setup.diagnostic_steps:
            save_hf_folder(paths.diag_step_dir(root, run, 0), state.model, state.tokenizer)
        _train_loop(state, setup, data, cfg, run, root, spec_text, verifier, progress)
        save_hf_folder(final, state.model, state.tokenizer)
        logger.info("%s: final policy written to %s", run.id, final)
        return final
    finally:
        torch.set_num_threads(previous_threads)


def init_state(
    root: Path, run: Run, setup: RunSettings, device: torch.device
) -> tuple[TrainState, TrainingSet]:
    """The step-0 state of ``run``: policy and reference loaded from the base model folder, a fresh AdamW,
    the sampling generator seeded with the run seed, and the training set."""
    base = paths.base_model_dir(root, run.model)
    if not (base / "config.json").is_file():
        raise MissingInputError(
            f"base model folder {base} is missing (run `acerl prepare-base --model {run.model}` first)"
        )
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).to(device).eval()
    # The reference keeps requires_grad=True although it is only ever run under no_grad: ATen folds 3-D matmuls
    # differently when a weight requires grad, so this keeps its numerics identical to the policy's (at step 1
    # log pi_ref == log pi_old bit for bit and every c_i is exactly 0). No gradient is ever computed for it.
    ref_model = copy.deepcopy(model).eval() if setup.needs_reference else None
    if setup.gradient_checkpointing:  # the policy only: the reference never runs a backward pass
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    train_file = paths.data_file(root, "train")
    rows = read_jsonl(train_file, required=("problem", "answer"))
    data = TrainingSet(rows, tokenizer, setup.template, setup.hyper.max_prompt_length, train_file)
    optimizer, scheduler = build_optimizer(model.parameters(), setup.hyper)
    state = TrainState(
        model=model,
        ref_model=ref_model,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        generator=torch.Generator(device=device).manual_seed(run.seed),
        stream=PromptStream(len(data), seed=run.seed),
    )
    return state, data


def _resume(state: TrainState, ckpt: Path, setup: RunSettings, dev: torch.device) -> None:
    ref = state.ref_model if setup.reference == "ema" else None
    saved = load_checkpoint(ckpt, state.model, state.optimizer, ref_model=ref, device=dev)
    state.scheduler.load_state_dict(saved["scheduler"])
    state.stream.load_state_dict(saved["data"])
    set_rng_states(saved["rng"], state.generator)
    state.step = int(saved["step"])
    logger.info("resuming from %s (step %d)", ckpt, state.step)


def _train_loop(
    state: TrainState,
    setup: RunSettings,
    data: TrainingSet,
    cfg: Config,
    run: Run,
    root: Path,
    spec_text: str,
    verifier: Verifier | None,
    progress: bool,
) -> None:
    h = setup.hyper
    ckpt_dir = paths.checkpoints_dir(root, run)
    live_dir = paths.run_dir(root, run) / "dvclive"
    if verifier is None:
        from acerl.grading import Grader

        grader_ctx: Any = Grader(timeout_s=cfg.grading.timeout_s, workers=cfg.grading.workers)
    else:
        grader_ctx = nullcontext(verifier)

    def checkpoint() -> None:
        ref = state.ref_model if setup.reference == "ema" else None
        save_checkpoint(
            ckpt_dir,
            state.step,
            state.model,
            state.optimizer,
            _trainer_state(state, spec_text),
            h.keep_checkpoints,
            ref,
        )

    with (
        PreemptionFlag() as flag,
        MetricsLog(paths.train_metrics_file(root, run), state.step, live_dir) as log,
        grader_ctx as grader,
    ):
        bar = tqdm(total=h.total_steps, initial=state.step, desc=run.id, unit="step", disable=not progress)
        try:
            while state.step < h.total_steps:
                metrics = train_step(state, setup, data, grader)
                log.log(state.step, metrics)
                if state.step in setup.diagnostic_steps:
                    save_hf_folder(paths.diag_step_dir(root, run, state.step), state.model, state.tokenizer)
                if state.step % h.save_every == 0 or state.step == h.total_steps or flag.requested:
                    checkpoint()
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['train/reward_mean']:.3f}", acc=f"{metrics['train/pass_rate']:.3f}"
                )
                if flag.requested and state.step < h.total_steps:
                    raise TrainingPreempted(state.step, flag.signum or 0)
        finally:
            bar.close()
