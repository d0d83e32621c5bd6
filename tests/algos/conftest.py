"""Fixtures for the algorithm tests: seeded random batches and verl's reference implementations."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import pytest
import torch


@pytest.fixture(scope="session")
def verl_core() -> ModuleType:
    """``verl.trainer.ppo.core_algos`` (imported once per session: ``import verl`` takes ~10 s)."""
    return pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed")


@dataclass
class Batch:
    """A synthetic rollout batch: B rollouts in shuffled groups, right-padded to T tokens."""

    rewards: torch.Tensor  # (B,)
    group_ids: torch.Tensor  # (B,) non-contiguous, unsorted
    logprobs: torch.Tensor  # (B, T)
    ref_logprobs: torch.Tensor  # (B, T)
    response_mask: torch.Tensor  # (B, T) float 0/1
    lengths: torch.Tensor  # (B,)


def build_batch(
    seed: int,
    group_sizes: list[int],
    T: int = 12,
    reward_kind: str = "binary",
    min_len: int = 0,
) -> Batch:
    """Seeded batch. ``reward_kind``: ``binary`` (0/1), ``pm1`` (DAPO +1/-1), ``continuous``.

    Group ids are random large integers, rollouts shuffled; lengths in [min_len, T] (0 = fully masked row);
    padding positions hold NaN/inf garbage to prove masking.
    """
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randperm(10_000, generator=gen)[: len(group_sizes)] * 7 + 3
    group_ids = torch.cat([torch.full((n,), int(i)) for i, n in zip(ids, group_sizes, strict=True)])
    B = group_ids.numel()
    if reward_kind == "binary":
        rewards = torch.randint(0, 2, (B,), generator=gen).float()
    elif reward_kind == "pm1":
        rewards = torch.randint(0, 2, (B,), generator=gen).float() * 2 - 1
    elif reward_kind == "continuous":
        rewards = torch.randn(B, generator=gen)
    else:
        raise ValueError(reward_kind)
    perm = torch.randperm(B, generator=gen)
    group_ids, rewards = group_ids[perm], rewards[perm]
    lengths = torch.randint(min_len, T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logprobs = -torch.rand(B, T, generator=gen) * 3
    ref_logprobs = logprobs + torch.randn(B, T, generator=gen) * 0.5
    logprobs = torch.where(mask.bool(), logprobs, torch.full_like(logprobs, float("nan")))
    ref_logprobs = torch.where(mask.bool(), ref_logprobs, torch.full_like(ref_logprobs, -float("inf")))
    return Batch(rewards, group_ids, logprobs, ref_logprobs, mask, lengths)


@pytest.fixture(scope="session")
def make_batch():
    """The :func:`build_batch` factory (``make_batch(seed, group_sizes, T=..., reward_kind=...)``)."""
    return build_batch
