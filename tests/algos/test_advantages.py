"""GRPO / ACE advantages: against verl, against plain loops over the paper's formulas, and edge cases."""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acerl.algos import (
    ADVANTAGE_ESTIMATORS,
    AdvantageOutput,
    ace_estimator,
    ace_metrics,
    as_group_ids,
    confidence_scores,
    group_mean_std,
    grpo_advantages,
    token_confidence,
)

# The arithmetic tests below select every rollout with A_i < 0, the rule of their loop references; with 0/1 and
# +1/-1 rewards the default rule ("incorrect") selects the same rollouts (test_incorrect_rule_* below).
ace = partial(ace_estimator, amplify="negative_advantage")


def ace_advantages(*args, **kwargs) -> torch.Tensor:
    """The sequence-level advantages of :func:`ace` (every A_i < 0 amplified)."""
    return ace(*args, **kwargs).advantages


def metrics(out: AdvantageOutput, response_mask: torch.Tensor) -> dict[str, float]:
    """:func:`ace_metrics` of an ACE output."""
    assert out.confidence is not None and out.multiplier is not None and out.amplified is not None
    return ace_metrics(out.confidence, out.multiplier, out.negative, out.amplified, response_mask)


# Mixed layouts: one-sample groups, pairs, the paper's G=8, odd sizes.
GROUP_LAYOUTS = [[8] * 6, [1, 2, 3, 8, 1, 5, 16], [2] * 10, [1] * 5, [7, 7, 1]]


# ---------------------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------------------


def loop_grpo(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float, norm_by_std: bool) -> torch.Tensor:
    """Paper Sec. 3 with verl's conventions, one rollout at a time in float64."""
    r, g = rewards.tolist(), group_ids.tolist()
    groups: dict[int, list[float]] = defaultdict(list)
    for ri, gi in zip(r, g, strict=True):
        groups[gi].append(ri)
    out = []
    for ri, gi in zip(r, g, strict=True):
        vals = groups[gi]
        mean, std = (0.0, 1.0) if len(vals) == 1 else (statistics.fmean(vals), statistics.stdev(vals))
        out.append((ri - mean) / (std + eps) if norm_by_std else ri - mean)
    return torch.tensor(out, dtype=torch.float64)


def phi_py(c: float, modulation: str) -> float:
    return math.log1p(math.exp(c)) if modulation == "softplus" else max(0.0, c)


def loop_ace(batch, alpha: float, modulation: str, length_normalize: bool, eps: float = 1e-6) -> torch.Tensor:
    """Eq. 5 / Alg. 1, one rollout at a time: amplify A_i < 0 by 1 + alpha * phi(c_i)."""
    base = loop_grpo(batch.rewards, batch.group_ids, eps, True)
    out = []
    for i, a in enumerate(base.tolist()):
        if a < 0:
            ratios = [
                float(batch.logprobs[i, t]) - float(batch.ref_logprobs[i, t])
                for t in range(batch.logprobs.shape[1])
                if batch.response_mask[i, t] > 0
            ]
            c = sum(ratios)
            if length_normalize:
                c = c / len(ratios) if ratios else 0.0
            a = a * (1.0 + alpha * phi_py(c, modulation))
        out.append(a)
    return torch.tensor(out, dtype=torch.float64)


def loop_ace_token(batch, alpha: float, modulation: str, eps: float = 1e-6) -> torch.Tensor:
    """App. C token-level variant: per-token c_i^(t) and multiplier on negative-advantage rollouts."""
    base = loop_grpo(batch.rewards, batch.group_ids, eps, True)
    B, T = batch.logprobs.shape
    out = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        for t in range(T):
            if batch.response_mask[i, t] == 0:
                continue
            a = float(base[i])
            if a < 0:
                c = float(batch.logprobs[i, t]) - float(batch.ref_logprobs[i, t])
                a = a * (1.0 + alpha * phi_py(c, modulation))
            out[i, t] = a
    return out


def verl_grpo(verl_core, rewards, group_ids, response_mask, eps=1e-6, norm_by_std=True) -> torch.Tensor:
    """verl's GRPO with the reward placed on the last response token, uid strings as the group index."""
    B, T = response_mask.shape
    token_rewards = torch.zeros(B, T)
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    token_rewards[torch.arange(B), last] = rewards.float()
    index = np.array([f"uid-{int(g)}" for g in group_ids], dtype=object)
    adv, returns = verl_core.compute_grpo_outcome_advantage(
        token_level_rewards=token_rewards,
        response_mask=response_mask,
        index=index,
        epsilon=eps,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    assert torch.equal(adv, returns)
    return adv


# ---------------------------------------------------------------------------------------------------------------
# GRPO
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.verl
@pytest.mark.parametrize("layout", GROUP_LAYOUTS)
@pytest.mark.parametrize("reward_kind", ["binary", "pm1", "continuous"])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_verl(verl_core, make_batch, layout, reward_kind, norm_by_std):
    b = make_batch(seed=len(layout) * 31 + len(reward_kind), group_sizes=layout, reward_kind=reward_kind)
    ours = grpo_advantages(b.rewards, b.group_ids, eps=1e-6, norm_by_std=norm_by_std)
    ref = verl_grpo(verl_core, b.rewards, b.group_ids, b.response_mask, 1e-6, norm_by_std)
    assert ours.shape == (b.rewards.shape[0],) and ours.dtype == torch.float32
    torch.testing.assert_close(ours[:, None] * b.response_mask, ref, rtol=1e-5, atol=1e-6)
    out = ADVANTAGE_ESTIMATORS.get("grpo")(b.rewards, b.group_ids, None, None, None, norm_by_std=norm_by_std)
    torch.testing.assert_close(out.token_level(b.response_mask), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.verl
@pytest.mark.parametrize("eps", [1e-6, 1e-8, 0.1])
def test_grpo_matches_verl_eps_and_all_equal_groups(verl_core, eps):
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0.5, 0.5, 0.25])
    group_ids = torch.tensor([4, 4, 4, 4, 9, 9, 9, 9, 2, 2, 2, 2, 100, 100, -3])
    mask = torch.ones(15, 3)
    ours = grpo_advantages(rewards, group_ids, eps=eps)
    torch.testing.assert_close(
        ours[:, None] * mask, verl_grpo(verl_core, rewards, group_ids, mask, eps), rtol=1e-6, atol=1e-7
    )
    assert torch.equal(ours[:8], torch.zeros(8)) and torch.equal(ours[12:14], torch.zeros(2))
    assert ours[14].item() == pytest.approx(0.25 / (1 + eps))  # one-sample group: mean 0, std 1


@pytest.mark.parametrize("layout", GROUP_LAYOUTS)
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_loop(make_batch, layout, norm_by_std):
    b = make_batch(seed=7, group_sizes=layout, reward_kind="continuous")
    b.rewards = b.rewards.double()
    ours = grpo_advantages(b.rewards, b.group_ids, norm_by_std=norm_by_std)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(
        ours, loop_grpo(b.rewards, b.group_ids, 1e-6, norm_by_std), rtol=1e-12, atol=1e-12
    )


def test_grpo_permutation_and_relabel_equivariant(make_batch):
    b = make_batch(seed=3, group_sizes=[1, 2, 3, 8, 5])
    ours = grpo_advantages(b.rewards, b.group_ids)
    perm = torch.randperm(b.rewards.numel(), generator=torch.Generator().manual_seed(0))
    relabelled = b.group_ids * -13 + 5
    assert torch.equal(grpo_advantages(b.rewards[perm], relabelled[perm]), ours[perm])


def test_grpo_integer_rewards_and_empty_batch():
    out = grpo_advantages(torch.tensor([1, 0, 0, 1]), torch.tensor([0, 0, 0, 0]))
    assert out.dtype == torch.get_default_dtype()
    torch.testing.assert_close(
        out, loop_grpo(torch.tensor([1.0, 0, 0, 1]), torch.zeros(4), 1e-6, True).float()
    )
    assert grpo_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_grpo_input_validation():
    with pytest.raises(TypeError, match="integer"):
        grpo_advantages(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="group_ids must have shape"):
        grpo_advantages(torch.zeros(3), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long))
    # a bool mask or complex values passed as group ids are refused, not read as ids 0/1
    for bad in (torch.tensor([True, False, True]), torch.tensor([1 + 0j, 2 + 0j, 1 + 0j])):
        with pytest.raises(TypeError, match=f"^group_ids must be an integer tensor, got dtype {bad.dtype}$"):
            grpo_advantages(torch.zeros(3), bad)


def test_token_inputs_validation_names_the_shapes():
    with pytest.raises(ValueError, match=r"^logprobs must be 2-D \(B, T\), got shape \(3,\)$"):
        token_confidence(torch.zeros(3), torch.zeros(3), torch.ones(3))
    message = "logprobs, ref_logprobs and response_mask must share shape (B, T); got (2, 3), (2, 4), (2, 3)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        token_confidence(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))


def test_group_mean_std_and_as_group_ids():
    rewards = torch.tensor([1.0, 0.0, 3.0, 2.0])
    group_ids = as_group_ids(np.array(["b", "a", "b", "c"], dtype=object))
    assert group_ids.tolist() == [1, 0, 1, 2]
    mean, std, count = group_mean_std(rewards, group_ids)
    assert mean.tolist() == [2.0, 0.0, 2.0, 0.0]  # one-sample groups: mean 0, std 1 (verl)
    assert std.tolist() == pytest.approx([math.sqrt(2.0), 1.0, math.sqrt(2.0), 1.0])
    assert count.tolist() == [2, 1, 2, 1]
    assert as_group_ids(["x", "y", "x"]).tolist() == [0, 1, 0]
    assert as_group_ids(torch.tensor([5, 5, 2], dtype=torch.int32)).dtype == torch.long
    with pytest.raises(TypeError):
        as_group_ids(torch.tensor([0.0, 1.0]))


def test_as_group_ids_accepts_only_integer_tensors_and_one_dimensional_keys():
    """Bool, float and complex tensors are not group ids (a bool mask passed by mistake must not become ids
    0/1); integer tensors of any width come back as ``long``; keys must be 1-D."""
    for bad in (torch.tensor([True, False]), torch.tensor([0.0, 1.0]), torch.tensor([1 + 0j, 2 + 0j])):
        with pytest.raises(TypeError, match=f"group ids must be an integer tensor, got dtype {bad.dtype}"):
            as_group_ids(bad)
    assert torch.equal(as_group_ids(torch.tensor([7, 3, 7], dtype=torch.int16)), torch.tensor([7, 3, 7]))
    with pytest.raises(ValueError, match=r"group index must be 1-D, got shape \(2, 2\)"):
        as_group_ids(np.array([["a", "b"], ["c", "d"]], dtype=object))


# ---------------------------------------------------------------------------------------------------------------
# Confidence scores
# ---------------------------------------------------------------------------------------------------------------


def test_confidence_scores_sum_mean_and_masking(make_batch):
    b = make_batch(seed=11, group_sizes=[4, 4, 4], min_len=0)
    summed = confidence_scores(b.logprobs, b.ref_logprobs, b.response_mask, length_normalize=False)
    normed = confidence_scores(b.logprobs, b.ref_logprobs, b.response_mask, length_normalize=True)
    assert torch.isfinite(summed).all() and torch.isfinite(normed).all()
    for i in range(b.rewards.numel()):
        n = int(b.lengths[i])
        expected = float((b.logprobs[i, :n] - b.ref_logprobs[i, :n]).sum()) if n else 0.0
        assert summed[i].item() == pytest.approx(expected, abs=1e-5)
        assert normed[i].item() == pytest.approx(expected / n if n else 0.0, abs=1e-6)
    tok = token_confidence(b.logprobs, b.ref_logprobs, b.response_mask)
    assert tok.shape == b.logprobs.shape and torch.equal(
        tok[b.response_mask == 0], torch.zeros_like(tok[b.response_mask == 0])
    )


@pytest.mark.parametrize("chunk_elements", [1, 7, 40, 1 << 17])
def test_confidence_chunked_pass_equals_whole_tensor(make_batch, chunk_elements):
    from acerl.algos.advantages import _masked_log_ratio_sums

    b = make_batch(seed=12, group_sizes=[8, 3, 1, 8], min_len=0)  # NaN/-inf garbage in padding
    sums, counts = _masked_log_ratio_sums(b.logprobs, b.ref_logprobs, b.response_mask, chunk_elements)
    whole = token_confidence(b.logprobs, b.ref_logprobs, b.response_mask).sum(-1)
    assert torch.equal(sums, whole) and torch.equal(counts, b.lengths.float())
    bool_mask = _masked_log_ratio_sums(b.logprobs, b.ref_logprobs, b.response_mask.bool(), chunk_elements)
    assert torch.equal(bool_mask[0], whole)


def test_confidence_fully_masked_and_length_one_rows():
    logprobs = torch.tensor([[-1.0, float("nan")], [float("nan"), float("nan")], [-0.5, -0.25]])
    ref = torch.tensor([[-3.0, -float("inf")], [-float("inf"), 0.0], [-1.0, -1.0]])
    mask = torch.tensor([[1, 0], [0, 0], [1, 1]])
    assert confidence_scores(logprobs, ref, mask).tolist() == [2.0, 0.0, 0.625]
    assert confidence_scores(logprobs, ref, mask, length_normalize=False).tolist() == [2.0, 0.0, 1.25]


def test_confidence_scores_is_differentiable():
    lp = torch.randn(3, 4, requires_grad=True)
    c = confidence_scores(lp, torch.zeros(3, 4), torch.ones(3, 4))
    c.sum().backward()
    torch.testing.assert_close(lp.grad, torch.full((3, 4), 0.25))


def test_token_confidence_subtracts_half_precision_log_probs_in_float32():
    """bfloat16 log-probs are upcast before the subtraction (the result is "at least float32"): -2^-9 - (-1)
    is 1 - 2^-9 exactly in float32, but rounds to 1.0 in bfloat16 (8 significant bits)."""
    lp = torch.tensor([[-(2.0**-9), 0.0]], dtype=torch.bfloat16)
    ref = torch.tensor([[-1.0, 0.0]], dtype=torch.bfloat16)
    out = token_confidence(lp, ref, torch.tensor([[1, 0]]))
    assert out.dtype == torch.float32
    assert out.tolist() == [[1.0 - 2.0**-9, 0.0]]
    wide = token_confidence(lp.double(), ref.float(), torch.ones(1, 2))
    assert wide.dtype == torch.float64


# ---------------------------------------------------------------------------------------------------------------
# ACE
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("modulation", ["softplus", "relu"])
@pytest.mark.parametrize("length_normalize", [True, False])
@pytest.mark.parametrize("reward_kind", ["binary", "pm1", "continuous"])
@pytest.mark.parametrize("alpha", [0.5, 1.0, 5.0])
def test_ace_matches_loop(make_batch, modulation, length_normalize, reward_kind, alpha):
    b = make_batch(seed=5, group_sizes=[8, 8, 1, 3, 8, 2], reward_kind=reward_kind, min_len=0)
    ours = ace_advantages(
        b.rewards,
        b.group_ids,
        b.logprobs,
        b.ref_logprobs,
        b.response_mask,
        alpha=alpha,
        modulation=modulation,
        length_normalize=length_normalize,
    )
    expected = loop_ace(b, alpha, modulation, length_normalize)
    assert ours.shape == b.rewards.shape and torch.isfinite(ours).all()
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("modulation", ["softplus", "relu"])
def test_ace_token_level_matches_loop(make_batch, modulation):
    b = make_batch(seed=8, group_sizes=[8, 4, 1, 6], reward_kind="binary", min_len=0)
    out = ace(
        b.rewards,
        b.group_ids,
        b.logprobs,
        b.ref_logprobs,
        b.response_mask,
        alpha=0.7,
        modulation=modulation,
        granularity="token",
    )
    assert out.advantages.shape == b.logprobs.shape and out.multiplier.shape == b.logprobs.shape
    assert torch.isfinite(out.advantages).all()
    torch.testing.assert_close(
        out.advantages.double(), loop_ace_token(b, 0.7, modulation), rtol=1e-5, atol=1e-6
    )
    assert (out.multiplier >= 1).all()


@pytest.mark.parametrize("layout", GROUP_LAYOUTS)
@pytest.mark.parametrize("reward_kind", ["binary", "pm1", "continuous"])
def test_ace_alpha_zero_is_grpo_exactly(make_batch, layout, reward_kind):
    b = make_batch(seed=2, group_sizes=layout, reward_kind=reward_kind)
    b.ref_logprobs[:, 0] = -float("inf")  # c = +inf must not matter when alpha = 0
    grpo = grpo_advantages(b.rewards, b.group_ids)
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    assert torch.equal(ace_advantages(*args, alpha=0.0), grpo)
    assert torch.equal(ace_advantages(*args, alpha=0, modulation="relu", length_normalize=False), grpo)
    token = ace(*args, alpha=0.0, granularity="token").advantages
    assert torch.equal(token, grpo[:, None] * b.response_mask)
    registered = ADVANTAGE_ESTIMATORS.get("ace")(*args, alpha=0.0, amplify="negative_advantage")
    assert torch.equal(registered.advantages, grpo)


def test_ace_is_grpo_on_nonnegative_advantages_and_amplifies_negatives(make_batch):
    b = make_batch(seed=21, group_sizes=[8] * 8, reward_kind="continuous", min_len=1)
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    grpo = grpo_advantages(b.rewards, b.group_ids)
    for modulation in ("softplus", "relu"):
        out = ace(*args, alpha=1.0, modulation=modulation)
        assert torch.equal(out.negative, grpo < 0)
        assert torch.equal(out.advantages[grpo >= 0], grpo[grpo >= 0])
        assert (out.multiplier >= 1).all()
        assert torch.equal(out.multiplier[grpo >= 0], torch.ones_like(grpo[grpo >= 0]))
        assert (out.advantages[grpo < 0] <= grpo[grpo < 0]).all()  # same sign, larger magnitude
    softplus = ace(*args, alpha=1.0)
    assert (softplus.multiplier[grpo < 0] > 1).all()  # softplus > 0 everywhere
    relu = ace(*args, alpha=1.0, modulation="relu")
    neg_nonpos_c = (grpo < 0) & (relu.confidence <= 0)
    assert neg_nonpos_c.any() and (relu.multiplier[neg_nonpos_c] == 1).all()


def test_ace_paper_worked_numbers():
    """Sec. 4.2 "Penalty differentiation": c = 2 -> 2.13, c = 0 -> 0.69, c = -3 -> 0.05 (alpha = 1)."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    group_ids = torch.zeros(4, dtype=torch.long)
    ref = torch.tensor([[-1.0], [-2.5], [-1.0], [-1.0]])
    logprobs = ref + torch.tensor([[0.0], [2.0], [0.0], [-3.0]])
    out = ace(rewards, group_ids, logprobs, ref, torch.ones(4, 1), alpha=1.0)
    assert out.confidence.tolist()[1:] == pytest.approx([2.0, 0.0, -3.0])
    assert [round(m - 1.0, 2) for m in out.multiplier.tolist()[1:]] == [2.13, 0.69, 0.05]
    grpo = grpo_advantages(rewards, group_ids)
    torch.testing.assert_close(out.advantages, grpo * out.multiplier)
    assert out.multiplier[0].item() == 1.0 and out.advantages[0].item() == grpo[0].item() > 0


def test_ace_estimator_defaults_to_alpha_one_and_passes_eps_through(make_batch):
    """:func:`ace_estimator` uses the paper's default alpha = 1 and forwards ``eps`` to GRPO (eps = 0.1 moves
    every A_i; the rollouts ACE leaves alone keep GRPO's advantage with that eps)."""
    b = make_batch(seed=5, group_sizes=[4, 4, 4])
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    correct = b.rewards == 1
    default = ace_estimator(*args, correct=correct).advantages
    assert torch.equal(default, ace_estimator(*args, alpha=1.0, correct=correct).advantages)
    assert not torch.equal(default, ace_estimator(*args, alpha=2.0, correct=correct).advantages)
    wide_eps = ace_estimator(*args, eps=0.1, correct=correct).advantages
    grpo_wide = grpo_advantages(b.rewards, b.group_ids, eps=0.1)
    kept = grpo_wide > 0
    assert kept.any() and torch.equal(wide_eps[kept], grpo_wide[kept])
    assert not torch.equal(wide_eps, default)


def test_ace_passes_eps_and_norm_by_std_to_grpo_and_keeps_the_rewards_dtype():
    """By hand, rewards 1, 0, 0, 0 (mean 1/4, unbiased std 1/2) with all c_i = 0, softplus(0) = ln 2:
    eps = 1/4 gives A = (3/4) / (3/4) = 1 and -(1/4) / (3/4) = -1/3; Dr. GRPO (no std) gives 3/4 and -1/4;
    the negatives are multiplied by 1 + ln 2. float32 rewards give float32 advantages, even from float64
    log-probs."""
    rewards, group_ids = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    lp = torch.full((4, 2), -0.5, dtype=torch.float64)
    args = (rewards, group_ids, lp, lp, torch.ones(4, 2, dtype=torch.float64))
    amplified = 1.0 + math.log(2.0)
    out = ace(*args, eps=0.25)
    assert out.advantages.dtype == torch.float32
    expected = torch.tensor([1.0, -amplified / 3, -amplified / 3, -amplified / 3])
    torch.testing.assert_close(out.advantages, expected)
    token = ace(*args, eps=0.25, granularity="token").advantages
    assert token.dtype == torch.float32
    torch.testing.assert_close(token, expected[:, None].expand(4, 2))
    dr_grpo = ace(*args, norm_by_std=False).advantages
    torch.testing.assert_close(
        dr_grpo, torch.tensor([0.75, -0.25 * amplified, -0.25 * amplified, -0.25 * amplified])
    )


def test_ace_matches_appendix_c_sketch_on_binary_rewards(make_batch):
    """App. C's code sketch ((n_prompts, G) layout, std + 1e-8, c / T) agrees on 0/1 rewards."""
    n_prompts, G = 12, 8
    gen = torch.Generator().manual_seed(4)
    rewards = torch.randint(0, 2, (n_prompts, G), generator=gen).float()
    rewards[0] = 1.0  # all correct
    rewards[1] = 0.0  # all wrong
    T = 10
    lengths = torch.randint(1, T + 1, (n_prompts, G), generator=gen)
    mask = (torch.arange(T) < lengths[..., None]).float()
    lp = -torch.rand(n_prompts, G, T, generator=gen) * 2 * mask
    ref = (lp + torch.randn(n_prompts, G, T, generator=gen)) * mask

    # --- the paper's sketch, verbatim apart from seq_lengths being passed in
    pass_rate = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, keepdim=True) + 1e-8
    std_advantage = (rewards - pass_rate) / std
    c = (lp.sum(-1) - ref.sum(-1)) / lengths
    ace_neg = std_advantage * (1.0 + 1.0 * F.softplus(c))
    is_correct = (rewards == 1).float()
    sketch = is_correct * std_advantage + (1 - is_correct) * ace_neg

    # our eps is added to the std exactly like the sketch's 1e-8
    ours = ace_advantages(
        rewards.reshape(-1),
        torch.arange(n_prompts).repeat_interleave(G),
        lp.reshape(-1, T),
        ref.reshape(-1, T),
        mask.reshape(-1, T),
        alpha=1.0,
        eps=1e-8,
    )
    torch.testing.assert_close(ours, sketch.reshape(-1), rtol=1e-5, atol=1e-6)


def test_ace_negatives_for_binary_mixed_groups_are_alg1_incorrect(make_batch):
    b = make_batch(seed=13, group_sizes=[8] * 10, reward_kind="binary")
    out = ace(b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    mean, std, _ = group_mean_std(b.rewards, b.group_ids)
    mixed = std > 0
    assert torch.equal(out.negative, (b.rewards == 0) & mixed)  # Alg. 1 "r_i = 0" within mixed groups
    assert torch.equal(out.advantages[~mixed], torch.zeros(int((~mixed).sum())))  # all-equal groups: A = 0


def test_ace_dapo_plus_minus_one_rewards(make_batch):
    b = make_batch(seed=17, group_sizes=[8] * 10, reward_kind="pm1")
    out = ace(b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    _, std, _ = group_mean_std(b.rewards, b.group_ids)
    mixed = std > 0
    assert mixed.any() and (~mixed).any()
    assert torch.equal(out.negative, (b.rewards == -1) & mixed)
    assert (out.multiplier[out.negative] > 1).all() and (out.multiplier[~out.negative] == 1).all()


def _overlong_group() -> tuple[torch.Tensor, ...]:
    """One DAPO group (+1/-1 rewards plus the overlong penalty): rollout 1 is correct and mildly overlong
    (1 - 0.3 = 0.7, above the mean), rollout 4 correct and far overlong (1 - 2 = -1, below the mean: A < 0)."""
    rewards = torch.tensor([1.0, 0.7, -1.0, -1.0, 1.0 - 2.0])
    correct = torch.tensor([True, True, False, False, True])
    group_ids = torch.zeros(5, dtype=torch.long)
    lp = torch.full((5, 2), -0.5)
    ref = torch.full((5, 2), -1.5)  # c = +1 for every rollout: an amplified rollout has multiplier 1 + sp(1)
    return rewards, correct, group_ids, lp, ref, torch.ones(5, 2)


@pytest.mark.parametrize("granularity", ["sequence", "token"])
def test_incorrect_rule_never_amplifies_a_correct_overlong_rollout(granularity):
    """Def. 2 / Alg. 1 amplify incorrect rollouts: a correct response pushed below its group's mean by the
    overlong penalty keeps its GRPO advantage; the sign rule amplifies it."""
    rewards, correct, group_ids, lp, ref, mask = _overlong_group()
    grpo = grpo_advantages(rewards, group_ids)
    assert grpo[4] < 0 and grpo[1] > 0
    inc = ace_estimator(rewards, group_ids, lp, ref, mask, correct=correct, granularity=granularity)
    sign = ace_estimator(
        rewards, group_ids, lp, ref, mask, amplify="negative_advantage", granularity=granularity
    )
    per_rollout = (lambda a: a) if granularity == "sequence" else (lambda a: a[:, 0])
    assert sign.negative.tolist() == inc.negative.tolist() == [False, False, True, True, True]
    assert inc.amplified.tolist() == [False, False, True, True, False]
    assert sign.amplified.tolist() == [False, False, True, True, True]
    torch.testing.assert_close(per_rollout(inc.advantages)[4], grpo[4])  # correct: plain GRPO advantage
    boost = 1 + F.softplus(torch.tensor(1.0))
    torch.testing.assert_close(per_rollout(sign.advantages)[4], grpo[4] * boost)
    torch.testing.assert_close(per_rollout(inc.advantages)[:4], per_rollout(sign.advantages)[:4])
    torch.testing.assert_close(per_rollout(inc.advantages)[2:4], grpo[2:4] * boost)  # incorrect: amplified
    assert metrics(inc, mask)["ace/multiplier_mean_neg"] == pytest.approx(float(boost))


@pytest.mark.parametrize("reward_kind", ["binary", "pm1"])
@pytest.mark.parametrize("granularity", ["sequence", "token"])
def test_incorrect_rule_equals_sign_rule_for_unshaped_rewards(make_batch, reward_kind, granularity):
    """With 0/1 or +1/-1 rewards (no overlong penalty) the two rules select exactly the same rollouts."""
    b = make_batch(seed=41, group_sizes=[8, 8, 1, 3, 8, 2], reward_kind=reward_kind)
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    inc = ace_estimator(*args, correct=b.rewards == 1, granularity=granularity)
    sign = ace_estimator(*args, amplify="negative_advantage", granularity=granularity)
    assert torch.equal(inc.amplified, sign.amplified) and inc.amplified.any()
    assert torch.equal(inc.advantages, sign.advantages)


def test_incorrect_rule_needs_the_verdicts(make_batch):
    b = make_batch(seed=43, group_sizes=[4, 4])
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    message = (
        "ACE with amplify='incorrect' needs correct=: a (B,) bool tensor of the grader's verdicts before any "
        "overlong penalty (verl: the reward manager's 'acc'); or pass amplify='negative_advantage' to "
        "amplify every rollout with a negative advantage"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ace_estimator(*args)
    with pytest.raises(ValueError, match="amplify='incorrect' needs correct="):
        ADVANTAGE_ESTIMATORS.get("ace")(*args)
    with pytest.raises(ValueError, match=r"correct must have shape \(B,\) = \(8,\), got \(7,\)"):
        ace_estimator(*args, correct=torch.ones(7, dtype=torch.bool))
    with pytest.raises(ValueError, match="amplify must be one of incorrect, negative_advantage; got 'all'"):
        ace_estimator(*args, amplify="all")  # type: ignore[arg-type]


def test_ace_stop_gradient(make_batch):
    b = make_batch(seed=19, group_sizes=[8, 8], min_len=1)
    lp = torch.where(b.response_mask.bool(), b.logprobs, 0.0).requires_grad_(True)
    ref = torch.where(b.response_mask.bool(), b.ref_logprobs, 0.0).requires_grad_(True)
    for granularity in ("sequence", "token"):
        out = ace(b.rewards, b.group_ids, lp, ref, b.response_mask, granularity=granularity)
        assert not out.advantages.requires_grad
        assert not out.confidence.requires_grad and not out.multiplier.requires_grad
    # a policy-gradient surrogate sum_i A_i * log pi(y_i): its gradient is A_i, with nothing through c_i
    adv = ace_advantages(b.rewards, b.group_ids, lp, ref, b.response_mask)
    surrogate = (adv[:, None] * lp * b.response_mask).sum()
    (grad,) = torch.autograd.grad(surrogate, lp)
    torch.testing.assert_close(grad, adv[:, None] * b.response_mask)


def test_ace_fully_masked_rows_and_length_one(make_batch):
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    group_ids = torch.tensor([3, 3, 3, 3])
    lp = torch.tensor([[-1.0, float("nan")], [float("nan")] * 2, [-0.2, float("nan")], [-1.0, -1.0]])
    ref = torch.tensor([[-1.0, 0.0], [-float("inf")] * 2, [-1.2, float("inf")], [-1.0, -2.0]])
    mask = torch.tensor([[1, 0], [0, 0], [1, 0], [1, 1]])
    out = ace(rewards, group_ids, lp, ref, mask, alpha=1.0)
    assert torch.isfinite(out.advantages).all()
    assert out.confidence.tolist() == pytest.approx([0.0, 0.0, 1.0, 0.5])
    assert out.multiplier[1].item() == pytest.approx(1 + math.log(2))  # T_i = 0 -> c_i = 0
    token = ace(rewards, group_ids, lp, ref, mask, granularity="token")
    assert torch.isfinite(token.advantages).all() and torch.equal(token.advantages[1], torch.zeros(2))


def test_ace_all_equal_groups_unchanged(make_batch):
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, -1.0, -1.0])
    group_ids = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    lp, ref = torch.zeros(7, 3), torch.full((7, 3), -5.0)
    out = ace(rewards, group_ids, lp, ref, torch.ones(7, 3), alpha=3.0)
    assert torch.equal(out.advantages, torch.zeros(7)) and not out.negative.any()


def test_ace_metrics(make_batch):
    b = make_batch(seed=23, group_sizes=[8] * 4)
    for granularity in ("sequence", "token"):
        out = ace(
            b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask, granularity=granularity
        )
        m = metrics(out, b.response_mask)
        assert set(m) == {
            "ace/negative_frac",
            "ace/confidence_mean_neg",
            "ace/overconfident_frac_neg",
            "ace/multiplier_mean_neg",
            "ace/multiplier_max",
        }
        assert m["ace/negative_frac"] == pytest.approx(out.negative.float().mean().item())
        assert 0 <= m["ace/overconfident_frac_neg"] <= 1
        assert m["ace/multiplier_max"] >= m["ace/multiplier_mean_neg"] >= 1
    zeros = torch.zeros(2, 1)
    empty = ace(torch.ones(2), torch.zeros(2, dtype=torch.long), zeros, zeros, zeros + 1)
    assert metrics(empty, zeros + 1)["ace/negative_frac"] == 0
    assert math.isnan(metrics(empty, zeros + 1)["ace/multiplier_mean_neg"])
    nothing = ace_metrics(torch.zeros(0), torch.zeros(0), torch.zeros(0, dtype=torch.bool),
                          torch.zeros(0, dtype=torch.bool), torch.zeros(0, 1))  # fmt: skip
    assert nothing["ace/negative_frac"] == 0.0 and math.isnan(nothing["ace/multiplier_max"])


def test_ace_input_validation(make_batch):
    b = make_batch(seed=1, group_sizes=[4])
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    with pytest.raises(ValueError, match="alpha"):
        ace_advantages(*args, alpha=-0.1)
    with pytest.raises(ValueError, match="unknown ACE modulation 'tanh'; valid names: relu, softplus"):
        ace_advantages(*args, modulation="tanh")
    with pytest.raises(ValueError, match="granularity"):
        ace(*args, granularity="step")
    with pytest.raises(ValueError, match="share shape"):
        ace_advantages(b.rewards, b.group_ids, b.logprobs, b.ref_logprobs[:, :-1], b.response_mask)
    rows, width = b.logprobs.shape
    assert rows != width  # the message must name the rows, not the width
    with pytest.raises(
        ValueError, match=rf"^logprobs has {rows} rows but rewards has {rows - 1} entries; both must be B$"
    ):
        ace_advantages(b.rewards[:-1], b.group_ids[:-1], b.logprobs, b.ref_logprobs, b.response_mask)


# ---------------------------------------------------------------------------------------------------------------
# Estimator registry
# ---------------------------------------------------------------------------------------------------------------


def test_registry_selects_by_config(make_batch):
    b = make_batch(seed=29, group_sizes=[8, 8, 8])
    cfg = {"estimator": "ace", "alpha": 0.5, "modulation": "relu"}
    params = {k: v for k, v in cfg.items() if k != "estimator"}
    out = ADVANTAGE_ESTIMATORS.get(cfg["estimator"])(
        b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask, correct=b.rewards == 1, **params
    )
    expected = ace_advantages(
        b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask, alpha=0.5, modulation="relu"
    )
    assert torch.equal(out.advantages, expected)
    assert out.confidence is not None and out.multiplier is not None and out.amplified is not None
    assert torch.equal(out.negative, grpo_advantages(b.rewards, b.group_ids) < 0)
    assert "ace/negative_frac" in metrics(out, b.response_mask)
    torch.testing.assert_close(out.token_level(b.response_mask), expected[:, None] * b.response_mask)
    verdicts = b.rewards == 1  # GRPO accepts the verdicts and leaves them unused
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")(b.rewards, b.group_ids, correct=verdicts)
    assert torch.equal(grpo.advantages, grpo_advantages(b.rewards, b.group_ids))
    assert torch.equal(grpo.negative, grpo.advantages < 0) and grpo.negative.any()
    assert grpo.confidence is None and grpo.multiplier is None and grpo.amplified is None
    token = ADVANTAGE_ESTIMATORS.get("ace")(
        b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask, granularity="token",
        amplify="negative_advantage",
    )  # fmt: skip
    assert torch.equal(token.token_level(b.response_mask), token.advantages)


def test_ace_estimator_needs_every_log_prob_input(make_batch):
    b = make_batch(seed=37, group_sizes=[8, 8])
    args = (b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask)
    for missing in range(2, 5):  # logprobs, ref_logprobs or response_mask alone missing
        partial_args = tuple(None if i == missing else a for i, a in enumerate(args))
        with pytest.raises(ValueError) as error:
            ADVANTAGE_ESTIMATORS.get("ace")(*partial_args, correct=b.rewards == 1)
        assert str(error.value) == (
            "the 'ace' advantage estimator needs logprobs, ref_logprobs and response_mask (B, T); got None "
            "(is the reference policy enabled? ACE-DAPO needs use_kl_loss=True with kl_loss_coef=0)"
        )


def test_registry_errors(make_batch):
    """An unknown name is the registry's one-line error; an unknown parameter is Python's (the config's schema
    names the key first: tests/test_estimator_config.py)."""
    b = make_batch(seed=31, group_sizes=[4])
    with pytest.raises(ValueError, match="unknown advantage estimator 'gae'; valid names: ace, grpo"):
        ADVANTAGE_ESTIMATORS.get("gae")
    with pytest.raises(TypeError, match="unexpected keyword argument 'alpah'"):
        ADVANTAGE_ESTIMATORS.get("ace")(
            b.rewards, b.group_ids, b.logprobs, b.ref_logprobs, b.response_mask, alpah=1
        )
    with pytest.raises(ValueError, match="needs logprobs"):
        ADVANTAGE_ESTIMATORS.get("ace")(b.rewards, b.group_ids, None, None, None)


def test_ace_metrics_by_hand_with_confidences_at_the_boundary():
    """The overconfident-error fraction counts ``c > 0`` only (Remark ``regimes``): ``c == 0`` (an error the
    policy is exactly as sure of as the reference, e.g. every error at step 1) is not overconfident. Only the
    amplified rollouts (negative and incorrect) count; values by hand."""
    # group 0: rewards 1, 0, 0, 0 -> rows 1-3 negative; group 1: 1, 1, 0, 0 -> rows 6-7 negative
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    c = [9.0, 0.0, 0.0, 0.5, 7.0, -2.0, 0.0, -1.0]  # per-token log-ratio, one token per row: c_i = c[i]
    lp, ref, mask = torch.tensor(c)[:, None], torch.zeros(8, 1), torch.ones(8, 1)
    correct = rewards > 0
    out = ace(rewards, group_ids, lp, ref, mask, alpha=1.0, correct=correct)
    m = metrics(out, mask)
    amplified = [0.0, 0.0, 0.5, 0.0, -1.0]  # c of rows 1, 2, 3, 6, 7
    assert m["ace/negative_frac"] == pytest.approx(5 / 8)
    assert m["ace/overconfident_frac_neg"] == pytest.approx(1 / 5)  # only c = 0.5; the three zeros are not
    assert m["ace/confidence_mean_neg"] == pytest.approx(sum(amplified) / 5)
    softplus = [math.log1p(math.exp(x)) for x in amplified]
    assert m["ace/multiplier_mean_neg"] == pytest.approx(1 + sum(softplus) / 5)
    assert m["ace/multiplier_max"] == pytest.approx(1 + math.log1p(math.exp(0.5)))
    every_zero = ace(rewards, group_ids, torch.zeros(8, 1), ref, mask, correct=correct)
    assert metrics(every_zero, mask)["ace/overconfident_frac_neg"] == 0.0


def test_ace_metrics_per_token_count_response_tokens_only():
    """With per-token confidences (B, T), the means over amplified errors run over their response tokens only:
    padding (mask 0) holds values that would move every mean if counted. Values by hand."""
    confidence = torch.tensor([[1.0, -1.0, 50.0], [0.5, 40.0, 40.0], [2.0, 2.0, 2.0]])
    multiplier = 1 + confidence.clamp(min=0)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    negative = torch.tensor([True, True, False])
    m = ace_metrics(confidence, multiplier, negative, negative, mask)
    assert m["ace/negative_frac"] == pytest.approx(2 / 3)
    assert m["ace/confidence_mean_neg"] == pytest.approx((1.0 - 1.0 + 0.5) / 3)  # not the padded 50 and 40s
    assert m["ace/overconfident_frac_neg"] == pytest.approx(2 / 3)
    assert m["ace/multiplier_mean_neg"] == pytest.approx((2.0 + 1.0 + 1.5) / 3)
    assert m["ace/multiplier_max"] == pytest.approx(2.0)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.long, torch.float64])
def test_token_level_advantages_keep_their_dtype_whatever_the_mask(mask_dtype):
    """verl's ``advantages`` keep the estimator's float32 whatever dtype the response mask arrives in (a float64
    mask must not promote them)."""
    out = AdvantageOutput(advantages=torch.tensor([0.5, -1.0]), negative=torch.tensor([False, True]))
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]]).to(mask_dtype)
    token = out.token_level(mask)
    assert token.dtype == torch.float32
    assert torch.equal(token, torch.tensor([[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0]]))


def test_grpo_estimator_by_hand_passes_eps_and_norm_by_std_and_marks_only_negative_advantages():
    """Registry entry ``grpo`` by hand: group 0 rewards 1, 1, 1, 0 (mean 3/4, unbiased std 1/2), group 1 all
    equal (A = 0). A = (r - 3/4) / (1/2 + eps), eps = 1e-6 by default; Dr. GRPO (``norm_by_std=False``)
    A = r - 3/4. ``negative`` is A < 0 only: a positive A below 1 and the all-equal group's A = 0 are not."""
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1])
    grpo = ADVANTAGE_ESTIMATORS.get("grpo")
    out = grpo(rewards, group_ids)
    torch.testing.assert_close(out.advantages, torch.tensor([0.5, 0.5, 0.5, -1.5, 0.0, 0.0]))
    assert out.negative.tolist() == [False, False, False, True, False, False]
    with_eps = grpo(rewards, group_ids, eps=0.25).advantages
    torch.testing.assert_close(with_eps, torch.tensor([1 / 3, 1 / 3, 1 / 3, -1.0, 0.0, 0.0]))
    dr_grpo = grpo(rewards, group_ids, norm_by_std=False).advantages
    torch.testing.assert_close(dr_grpo, torch.tensor([0.25, 0.25, 0.25, -0.75, 0.0, 0.0]))


def test_confidence_scores_of_empty_one_row_and_half_precision_batches():
    """An empty batch gives an empty (0,) result in the promoted dtype; a one-row batch its value; bfloat16
    log-probs are subtracted in float32: -2^-9 - (-1) is 1 - 2^-9 in float32 but rounds to 1 in bfloat16."""
    empty = torch.zeros(0, 3, dtype=torch.float64)
    c = confidence_scores(empty, empty, torch.zeros(0, 3))
    assert c.shape == (0,) and c.dtype == torch.float64
    one = confidence_scores(torch.tensor([[-0.5, -2.0, 9.0]]), torch.tensor([[-1.0, -1.0, 0.0]]),
                            torch.tensor([[1, 1, 0]]))  # fmt: skip
    torch.testing.assert_close(one, torch.tensor([(0.5 - 1.0) / 2]))
    lp = torch.full((2, 2), -(2.0**-9), dtype=torch.bfloat16)
    ref = torch.full((2, 2), -1.0, dtype=torch.bfloat16)
    half = confidence_scores(lp, ref, torch.ones(2, 2))
    assert half.dtype == torch.float32
    assert half.tolist() == [1 - 2.0**-9] * 2
    assert confidence_scores(lp, ref, torch.ones(2, 2), length_normalize=False).tolist() == [2 - 2.0**-8] * 2
