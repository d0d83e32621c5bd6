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
