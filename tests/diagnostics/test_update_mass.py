"""Where an update moves probability: the rollout groups and the per-group mass bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from acerl.diagnostics.update_mass import mass_by_group, rollout_groups


def test_rollout_groups_follow_ace_s_amplification_rule():
    correct = np.array([True, False, False, False, True, False])
    confidence = np.array([0.3, 0.2, -0.1, 0.4, 0.0, 0.0])
    adv = np.array([1.0, -0.5, -0.5, 0.0, 0.0, -0.2])
    assert rollout_groups(correct, confidence, adv).tolist() == [
        "correct", "overconfident", "other_incorrect", "no_signal", "no_signal", "other_incorrect",
    ]  # fmt: skip


def test_mass_by_group_counts_each_distinct_response_once_and_closes_the_balance():
    old = np.log(np.array([0.5, 0.5, 0.2, 0.1]))  # prompt 0: one response sampled twice, then another
    prompts = np.array([0, 0, 0, 1])
    groups = np.array(["overconfident", "overconfident", "correct", "overconfident"])
    new = {"ace": np.log(np.array([0.4, 0.4, 0.25, 0.05]))}
    responses = np.array(["a", "a", "b", "a"])
    frame = mass_by_group(old, new, groups, prompts, responses).set_index("group")
    # amplified: (0.4 - 0.5) once for prompt 0, (0.05 - 0.1) for prompt 1, over 2 prompts
    assert frame.loc["overconfident", "dmass_per_prompt"] == pytest.approx((-0.1 - 0.05) / 2)
    assert frame.loc["correct", "dmass_per_prompt"] == pytest.approx(0.05 / 2)
    assert frame.loc["overconfident", "rollouts"] == 3
    assert frame.loc["overconfident", "dlogp_mean"] == pytest.approx(
        np.mean(new["ace"][[0, 1, 3]] - old[[0, 1, 3]])
    )
    assert frame["dmass_per_prompt"].sum() == pytest.approx(0.0)  # what left the sampled set went elsewhere
    assert frame.loc["unsampled", "dmass_per_prompt"] == pytest.approx(0.1 / 2)


def test_independent_copies_update_from_the_same_state():
    """Both arms of update_mass start from the checkpoint's AdamW state: updating one copy leaves the original's
    moments and step counts as they were, so a second copy's identical update gives identical weights."""
    import copy

    import torch

    from acerl.config import TrainHyper
    from acerl.diagnostics.update_mass import independent_copy
    from acerl.optim import build_optimizer
    from acerl.train.data import PromptStream
    from acerl.train.state import TrainState

    torch.manual_seed(0)
    x = torch.randn(5, 4)
    model = torch.nn.Linear(4, 3)
    hyper = TrainHyper(lr=1e-2)
    optimizer, scheduler = build_optimizer(model.parameters(), hyper)
    model(x).square().sum().backward()
    optimizer.step()
    scheduler.step()
    state = TrainState(
        model,
        None,
        None,
        optimizer,
        scheduler,
        torch.Generator(),
        PromptStream(4, seed=0),
        PromptStream(4, seed=1),
    )
    saved = copy.deepcopy(optimizer.state_dict())

    weights = []
    for _ in range(2):
        arm = independent_copy(state, hyper)
        arm.optimizer.zero_grad(set_to_none=True)
        arm.model(x).abs().sum().backward()
        arm.optimizer.step()
        weights.append(arm.model.weight.detach().clone())
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], model.weight)
    for index, moments in saved["state"].items():
        for key, value in moments.items():
            assert torch.equal(optimizer.state_dict()["state"][index][key], value), key
