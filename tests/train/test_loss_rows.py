"""The trainer honours an estimator's loss rows: PSR's and NSR's loss is the token mean over the rollouts they
keep (the authors' batch subset), not over the whole batch; the family's policy loss comes from the registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_fixtures import DigitVerifier, Verdict, make_config

from acerl.config import Run
from acerl.config.settings import resolve
from acerl.train.algorithm import train_step
from acerl.train.run import init_state

METHODS = (
    "methods.psr={display: PSR, family: grpo, estimator: {name: psr}}",
    "methods.nsr={display: NSR, family: grpo, estimator: {name: nsr}}",
    "families.kl_cov={policy_loss: {name: kl_cov, kl_cov_ratio: 0.5, ppo_kl_coef: 1.0}}",
    "methods.kl_cov={display: KL-Cov, family: kl_cov, estimator: {name: grpo}}",
)


class AllCorrect(DigitVerifier):
    """Every response graded correct (NSR then has no rollout to learn from)."""

    def grade_many(self, items, *, progress=None):
        return [Verdict(True) for _ in items]


@pytest.mark.parametrize("mini_batch", [2, 4])
@pytest.mark.parametrize(("method", "pg_loss"), [("psr", -1.0), ("nsr", 1.0)])
def test_the_loss_counts_only_the_kept_rollouts(
    tiny_root: Path, method: str, pg_loss: float, mini_batch: int
) -> None:
    """At ratio 1 (a learning rate too small to move the policy) every kept token's loss is ``-A``: -1 for PSR
    (A = 1 on correct rollouts), +1 for NSR (A = -1 on incorrect ones), so each update's token mean is exactly
    -1 / +1; counting the dropped rollouts' tokens (loss 0) would shrink it toward 0. One update (mini-batch of 4
    prompts: the single pass) and several (2)."""
    cfg = make_config(
        "models.tiny.train.total_steps=1", f"models.tiny.train.mini_batch_size={mini_batch}",
        "models.tiny.train.lr=1e-12", *METHODS,
    )  # fmt: skip
    settings = resolve(cfg, Run("tiny", method, 0))
    state, data = init_state(tiny_root, Run("tiny", method, 0), settings, torch.device("cpu"))
    metrics = train_step(state, settings, data, DigitVerifier())
    assert 0.0 < metrics["train/pass_rate"] < 1.0  # both kinds of rollouts in the batch
    assert metrics["actor/pg_loss"] == pytest.approx(pg_loss, abs=1e-6)


def test_the_familys_policy_loss_comes_from_the_registry(tiny_root: Path, monkeypatch) -> None:
    from acerl.algos import POLICY_LOSS_FUNCTIONS

    calls: list[dict] = []
    original = POLICY_LOSS_FUNCTIONS.get("kl_cov")

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setitem(POLICY_LOSS_FUNCTIONS._items, "kl_cov", spy)
    cfg = make_config("models.tiny.train.total_steps=1", *METHODS)
    settings = resolve(cfg, Run("tiny", "kl_cov", 0))
    state, data = init_state(tiny_root, Run("tiny", "kl_cov", 0), settings, torch.device("cpu"))
    train_step(state, settings, data, DigitVerifier())
    assert calls and calls[0]["kl_cov_ratio"] == 0.5 and calls[0]["ppo_kl_coef"] == 1.0


@pytest.mark.parametrize("mini_batch", [2, 4])
def test_no_kept_rollout_means_no_update(tiny_root: Path, mini_batch: int) -> None:
    """NSR on a batch graded all correct: nothing enters the loss, the policy and the optimizer do not move."""
    cfg = make_config(
        "models.tiny.train.total_steps=1", f"models.tiny.train.mini_batch_size={mini_batch}", *METHODS
    )
    settings = resolve(cfg, Run("tiny", "nsr", 0))
    state, data = init_state(tiny_root, Run("tiny", "nsr", 0), settings, torch.device("cpu"))
    before = [p.detach().clone() for p in state.model.parameters()]
    metrics = train_step(state, settings, data, AllCorrect())
    assert metrics["train/pass_rate"] == 1.0
    assert all(torch.equal(b, p) for b, p in zip(before, state.model.parameters(), strict=True))
    assert metrics["actor/pg_loss"] != metrics["actor/pg_loss"]  # NaN: a step without an update
