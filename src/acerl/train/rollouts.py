"""Alg. 1 lines 2-5 of the local trainer: prompts, G rollouts each, verifier rewards, DAPO dynamic sampling."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from acerl.algos.dapo import filter_groups
from acerl.config.settings import RunSettings
from acerl.generate.base import eos_pad_ids, response_text
from acerl.generate.rollout import RolloutBatch, sample_batch
from acerl.pipeline.runtime import autocast
from acerl.pipeline.seeds import TRAIN_SEED_STREAM, derive_seed
from acerl.train.data import TrainingSet
from acerl.train.metrics import Timer
from acerl.train.rewards import Rewards, Verifier, compute_rewards
from acerl.train.state import TrainState

__all__ = ["Rollouts", "collect_rollouts"]


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
    state: TrainState, settings: RunSettings, data: TrainingSet, verifier: Verifier, timer: Timer
) -> Rollouts:
    """Sample and grade prompt batches; with dynamic sampling keep only groups with mixed verdicts and draw
    new batches (at most ``dynamic_sampling.draws``) until ``prompts_per_step`` groups are kept."""
    h, fam = settings.hyper, settings.family
    g, want = h.group_size, h.prompts_per_step
    eos_id, pad_id = eos_pad_ids(state.tokenizer)
    dynamic = fam.dynamic_sampling.enable
    max_batches = fam.dynamic_sampling.draws if dynamic else 1
    kept: list[tuple[RolloutBatch, Tensor, Rewards]] = []  # (batch, kept rows, rewards of kept rows)
    n_kept = n_seen = n_mixed = 0
    all_scores, all_correct, all_lengths, all_stopped, all_overlong = [], [], [], [], []
    n_batches = 0
    for attempt in range(max_batches):
        n_batches += 1
        # common random numbers across methods (docs/reports.md): the step's first batch takes the next prompts
        # of the main stream and every batch draws from a generator seeded by (run seed, step, attempt), so runs
        # of two methods with the same seed see the same prompts and uniforms at every step, whatever earlier
        # steps consumed; dynamic sampling's extra batches come from their own stream
        state.generator.manual_seed(derive_seed(TRAIN_SEED_STREAM, settings.run.seed, state.step, attempt))
        idx = (state.stream if attempt == 0 else state.fill_stream).next(want)
        with timer("rollout"), autocast(state.device, settings.precision):
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
