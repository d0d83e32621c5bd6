"""DAPO dynamic-sampling filter and overlong penalty, against verl's rule and verl's ``dapo`` reward manager."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from acerl.algos import filter_groups, grpo_advantages, overlong_penalty


def verl_filter_rule(rewards: torch.Tensor, group_ids: torch.Tensor) -> list[bool]:
    """verl's rule (legacy DAPO recipe / V1 replay buffer): keep a group iff ``std > 0 or len == 1``."""
    values: dict[int, list[float]] = defaultdict(list)
    for r, g in zip(rewards.tolist(), group_ids.tolist(), strict=True):
        values[g].append(r)
    keep = {g: len(v) == 1 or float(np.std(v)) > 0 for g, v in values.items()}
    return [keep[g] for g in group_ids.tolist()]


@pytest.mark.parametrize("reward_kind", ["binary", "pm1"])
@pytest.mark.parametrize("layout", [[8] * 10, [1, 2, 3, 8, 1, 5, 16], [2] * 12])
def test_filter_groups_matches_verl_rule(make_batch, reward_kind, layout):
    b = make_batch(seed=len(layout), group_sizes=layout, reward_kind=reward_kind)
    keep, kept_fraction = filter_groups(b.rewards, b.group_ids)
    assert keep.dtype == torch.bool and keep.shape == b.rewards.shape
    assert keep.tolist() == verl_filter_rule(b.rewards, b.group_ids)
    kept_groups = {g for g, k in zip(b.group_ids.tolist(), keep.tolist(), strict=True) if k}
    assert kept_fraction == pytest.approx(len(kept_groups) / len(layout))


def test_filter_groups_drops_exactly_zero_advantage_groups():
    rewards = torch.tensor([1.0, 1, 1, 0, 0, 0, 1, 0, 0.3, 0.3, 0.3, 0.5])
    group_ids = torch.tensor([7, 7, 7, 2, 2, 2, 9, 9, 4, 4, 4, 11])
    keep, kept_fraction = filter_groups(rewards, group_ids)
    assert keep.tolist() == [False] * 6 + [True, True] + [False] * 3 + [True]
    assert kept_fraction == pytest.approx(2 / 5)
    adv = grpo_advantages(rewards, group_ids)
    assert torch.equal(adv[~keep], torch.zeros(int((~keep).sum())))


def test_filter_groups_edge_cases():
    keep, frac = filter_groups(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert keep.shape == (0,) and keep.dtype == torch.bool and frac == 1.0  # a mask: bool even when empty
    assert torch.zeros(0, 3)[keep].shape == (0, 3)
    keep, frac = filter_groups(torch.tensor([1, 0, 1]), torch.tensor([0, 0, 5]))  # integer rewards
    assert keep.tolist() == [True, True, True] and frac == 1.0
    with pytest.raises(TypeError):
        filter_groups(torch.zeros(2), torch.zeros(2))


class _StubTokenizer:
    """Just enough tokenizer for verl's DAPORewardManager (it decodes before scoring)."""

    eos_token = "</s>"

    def decode(self, ids, skip_special_tokens=True) -> str:
        return " ".join(str(int(i)) for i in ids)


@pytest.mark.verl
@pytest.mark.parametrize(
    ("max_len", "buffer_len", "factor"), [(20, 8, 1.0), (20, 20, 0.5), (16, 3, 2.0), (4096, 1024, 1.0)]
)
def test_overlong_penalty_matches_verl_reward_manager(verl_core, max_len, buffer_len, factor):
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.workers.reward_manager.dapo import DAPORewardManager

    gen = torch.Generator().manual_seed(max_len + buffer_len)
    n, prompt_len = 24, 3
    lengths = torch.randint(1, max_len + 1, (n,), generator=gen)
    lengths[:3] = torch.tensor([1, max_len - buffer_len, max_len])
    responses = torch.randint(0, 100, (n, max_len), generator=gen)
    attention = torch.cat(
        [torch.ones(n, prompt_len, dtype=torch.long), (torch.arange(max_len) < lengths[:, None]).long()],
        dim=1,
    )
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.randint(0, 100, (n, prompt_len), generator=gen),
            "responses": responses,
            "attention_mask": attention,
        },
        non_tensors={
            "data_source": np.array(["test"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": "0"} for _ in range(n)], dtype=object),
        },
    )
    manager = DAPORewardManager(
        tokenizer=_StubTokenizer(),
        num_examine=0,
        compute_score=lambda data_source, solution_str, ground_truth, extra_info: 0.0,
        max_resp_len=max_len,
        overlong_buffer_cfg=OmegaConf.create(
            {"enable": True, "len": buffer_len, "penalty_factor": factor, "log": False}
        ),
    )
    verl_rewards = manager(data).sum(dim=-1)
    ours = overlong_penalty(lengths, max_len, buffer_len, factor)
    assert ours.dtype == torch.float32
    assert torch.equal(ours, verl_rewards)
    assert ours[1] == 0 and ours[2].item() == pytest.approx(-factor)  # at max_len - buffer and at max_len


def test_overlong_penalty_shape():
    pen = overlong_penalty(
        torch.tensor([0, 10, 12, 14, 16, 20]), max_response_length=20, buffer_length=8, penalty_factor=1.0
    )
    assert pen.tolist() == pytest.approx([0.0, 0.0, 0.0, -0.25, -0.5, -1.0])
    assert (torch.diff(overlong_penalty(torch.arange(0, 21), 20, 8, 1.0)) <= 0).all()


def test_overlong_penalty_by_hand_default_factor_one_token_buffer_float32():
    """By hand: no penalty up to ``max - buffer`` tokens, then linear to ``-penalty_factor`` (default 1, verl's)
    at ``max``; a one-token buffer is allowed (the whole penalty on the last token); the result is float32
    whatever torch's default float dtype."""
    assert overlong_penalty(torch.tensor([3, 4, 5, 6]), 6, 2).tolist() == [0.0, 0.0, -0.5, -1.0]
    assert overlong_penalty(torch.tensor([5, 6]), 6, 1).tolist() == [0.0, -1.0]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert overlong_penalty(torch.tensor([6]), 6, 2).dtype == torch.float32
    finally:
        torch.set_default_dtype(default)


def test_overlong_penalty_validation():
    with pytest.raises(ValueError, match="buffer_length must be positive"):
        overlong_penalty(torch.tensor([1]), 10, 0, 1.0)
    with pytest.raises(ValueError, match="must be >= buffer_length"):
        overlong_penalty(torch.tensor([1]), 10, 11, 1.0)
    with pytest.raises(TypeError, match="integer"):
        overlong_penalty(torch.tensor([1.0]), 10, 4, 1.0)
