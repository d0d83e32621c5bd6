"""Where one update moves probability: the GRPO and the ACE update of the same training batch from the same state.

The question the power study leaves (docs/results.md): when ACE does not help, does its update differ from
GRPO's where the paper says it should? From one saved training state (a GRPO run's checkpoint: weights, AdamW
moments, prompt streams, random state), :func:`measure` samples that step's batch exactly as the run did,
computes both estimators' advantages on it (the same ``log pi_old`` and ``log pi_ref``), applies each update to
a copy of the state, and scores the batch's responses under both updated policies. Per rollout group (the
overconfident incorrect rollouts ACE amplifies most: ``c_i > 0``; the other incorrect ones; the correct ones) it
reports the change of their summed sequence probability and mean log-probability (:func:`mass_by_group`); the
probability taken from the sampled responses and not given to other sampled ones went to unsampled responses.

    acerl update-mass --config config/config.yaml --root . --seed 0 --step 20
    acerl update-mass --config config/config.yaml --root . --baseline dapo --ace ace_dapo
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from acerl.algos.advantages import confidence_scores
from acerl.config import GrpoEstimator, Run, TrainHyper, load_config
from acerl.config.settings import resolve
from acerl.optim import build_optimizer
from acerl.pipeline import paths
from acerl.train.algorithm import estimate_advantages, teacher_forced_logprobs, update_policy
from acerl.train.logprobs import batch_logprobs
from acerl.train.metrics import Timer
from acerl.train.rollouts import collect_rollouts
from acerl.train.run import init_state, resume_state
from acerl.train.state import TrainState

__all__ = ["GROUPS", "independent_copy", "mass_by_group", "measure", "main"]

GROUPS = ("overconfident", "other_incorrect", "correct", "no_signal")
"""Rollout groups: incorrect with a negative GRPO advantage and ``c_i > 0`` (the overconfident errors ACE
amplifies most), the other incorrect ones with a negative advantage (softplus amplifies them less: by
``1 + alpha softplus(c_i)`` with ``c_i <= 0``), correct ones with a positive advantage, and the rest (groups whose
rollouts all got one verdict: advantage 0, no update from either estimator)."""


def rollout_groups(correct: np.ndarray, confidence: np.ndarray, grpo_advantage: np.ndarray) -> np.ndarray:
    """The :data:`GROUPS` label of each rollout from its verdict, confidence score ``c_i`` and GRPO advantage."""
    correct = np.asarray(correct, dtype=bool)
    confidence, adv = np.asarray(confidence, dtype=np.float64), np.asarray(grpo_advantage, dtype=np.float64)
    negative = ~correct & (adv < 0.0)
    return np.select(
        [negative & (confidence > 0.0), negative, correct & (adv > 0.0)],
        ["overconfident", "other_incorrect", "correct"],
        default="no_signal",
    )


def mass_by_group(
    old_logp: np.ndarray,
    new_logp: Mapping[str, np.ndarray],
    groups: np.ndarray,
    prompts: np.ndarray,
    responses: np.ndarray,
) -> pd.DataFrame:
    """Per group and update: the rollouts, their mean change of sequence log-probability, and the change of
    their summed sequence probability per prompt (distinct responses of a prompt counted once).

    Args:
        old_logp: ``(B,)`` sequence log-probabilities before the update.
        new_logp: ``{update name: (B,)}`` after each update.
        groups: ``(B,)`` :data:`GROUPS` labels; prompts: ``(B,)`` group (prompt) index of each rollout;
        responses: ``(B,)`` the response of each rollout (any hashable key, e.g. its token ids as a string).

    Returns:
        Rows ``update, group, rollouts, dlogp_mean, dmass_per_prompt``; a row ``group == "unsampled"`` per update
        holds the probability the update moved to responses outside the sampled set (minus the sampled rows'
        sum), per prompt.
    """
    old_logp = np.asarray(old_logp, dtype=np.float64)
    n_prompts = len(np.unique(prompts))
    rows = []
    for name, new in new_logp.items():
        new = np.asarray(new, dtype=np.float64)
        dmass = np.exp(new) - np.exp(old_logp)
        # a response sampled twice in one group is one sequence: count its probability once
        first = ~pd.DataFrame({"p": prompts, "r": responses}).duplicated().to_numpy()
        total = 0.0
        for g in GROUPS:
            sel = groups == g
            moved = float(dmass[sel & first].sum()) / n_prompts
            total += moved
            dlogp = float((new - old_logp)[sel].mean()) if sel.any() else float("nan")
            rows.append((name, g, int(sel.sum()), dlogp, moved))
        rows.append((name, "unsampled", 0, float("nan"), -total))
    return pd.DataFrame(rows, columns=["update", "group", "rollouts", "dlogp_mean", "dmass_per_prompt"])


def independent_copy(state: TrainState, hyper: TrainHyper) -> TrainState:
    """``state`` with its own copy of the weights, the AdamW moments and step counts, and the LR schedule: an
    update of the copy leaves ``state`` as it was. (``torch.optim.Optimizer.load_state_dict`` alone would not: it
    keeps the state tensors it is given, so an optimizer loaded from another's ``state_dict()`` updates the other's
    moments in place. :class:`acerl.optim.AdamW` copies them; the deep copy here holds whichever the state has.)"""
    model = copy.deepcopy(state.model)
    optimizer, scheduler = build_optimizer(model.parameters(), hyper)
    optimizer.load_state_dict(copy.deepcopy(state.optimizer.state_dict()))
    scheduler.load_state_dict(copy.deepcopy(state.scheduler.state_dict()))
    return dataclasses.replace(state, model=model, optimizer=optimizer, scheduler=scheduler)


def measure(
    config_files: list[Path],
    root: Path,
    seed: int,
    step: int,
    *,
    baseline: str = "grpo",
    ace: str = "ace_grpo",
) -> pd.DataFrame:
    """GRPO's and ACE's update of the batch that ``baseline``'s run ``seed`` trained on after ``step`` (from
    its checkpoint at ``step``): :func:`mass_by_group`, plus the advantages' means per group (``adv_mean``)."""
    from acerl.grading import Grader

    cfg = load_config(config_files)
    run = Run(cfg.study.main.models[0], baseline, seed)
    settings = resolve(cfg, run)
    ckpt = paths.checkpoints_dir(root, run) / f"step_{step:06d}"
    if not ckpt.is_dir():
        raise FileNotFoundError(
            f"{ckpt}: no checkpoint at step {step} (runs keep the last {cfg.models[run.model].train.keep_checkpoints})"
        )
    dev = torch.device("cpu")
    state, data = init_state(root, run, settings, dev)
    resume_state(state, ckpt, settings, dev)
    with Grader(timeout_s=cfg.grading.timeout_s, workers=cfg.grading.workers) as grader:
        ro = collect_rollouts(state, settings, data, grader, Timer())
    assert ro.batch is not None
    batch, mask = ro.batch, ro.batch.response_mask
    old, ref = teacher_forced_logprobs(state, settings, batch, policy=True)
    assert old is not None and ref is not None
    estimators = {baseline: GrpoEstimator(), ace: cfg.method(ace).estimator}
    outs = {name: estimate_advantages(est, ro, ref, old) for name, est in estimators.items()}
    groups = rollout_groups(
        ro.correct.cpu().numpy(),
        confidence_scores(old, ref, mask).cpu().numpy(),
        outs[baseline].advantages.cpu().numpy(),
    )
    new_logp, adv_means = {}, []
    for name, out in outs.items():
        copy_state = independent_copy(state, settings.hyper)
        update_policy(copy_state, settings, batch, old, ref, out)
        lp, _ = batch_logprobs(
            copy_state.model, batch, settings.hyper.temperature, settings.hyper.micro_batch_size_per_gpu
        )
        new_logp[name] = (lp * mask).sum(dim=1).cpu().numpy()
        adv = out.advantages.cpu().numpy()
        adv_means += [
            (name, g, float(adv[groups == g].mean()) if (groups == g).any() else float("nan")) for g in GROUPS
        ]
    keys = np.array(
        [" ".join(map(str, ids[m.bool()].tolist())) for ids, m in zip(batch.response_ids, mask, strict=True)]
    )
    frame = mass_by_group(
        (old * mask).sum(dim=1).cpu().numpy(), new_logp, groups, ro.group_ids.cpu().numpy(), keys
    )
    adv_frame = pd.DataFrame(adv_means, columns=["update", "group", "adv_mean"])
    return frame.merge(adv_frame, on=["update", "group"], how="left")


def main(argv: list[str] | None = None) -> int:
    """Print where GRPO's and ACE's update of the same batch move probability (Markdown)."""
    ap = argparse.ArgumentParser(prog="acerl update-mass", description=main.__doc__)
    ap.add_argument(
        "--config", type=Path, action="append", required=True, help="config file(s), in merge order"
    )
    ap.add_argument("--root", type=Path, default=Path("."), help="work directory")
    ap.add_argument("--seed", type=int, nargs="+", default=[0], help="training seeds (their baseline runs)")
    ap.add_argument("--step", type=int, default=20, help="checkpoint step of the baseline run")
    ap.add_argument("--baseline", default="grpo")
    ap.add_argument("--ace", default="ace_grpo")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    frames = [
        measure(args.config, args.root, s, args.step, baseline=args.baseline, ace=args.ace).assign(seed=s)
        for s in args.seed
    ]
    print(pd.concat(frames).to_markdown(index=False, floatfmt=".3g"))
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.diagnostics.update_mass", main))
