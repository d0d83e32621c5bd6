"""Losses, KL estimators, entropy and log-probs: equality with verl 0.9.1's functions plus edge cases."""

from __future__ import annotations

import math
import re

import pytest
import torch

from acerl.algos import (
    KL_KINDS,
    LOSS_AGG_MODES,
    POLICY_LOSS_FUNCTIONS,
    agg_loss,
    entropy_from_logits,
    kl_penalty,
    masked_mean,
    masked_sum,
    token_logprobs,
    vanilla_policy_loss,
)
from acerl.algos.losses import POLICY_LOSS_METRIC_KEYS

B, T = 12, 9


def random_mask(seed: int) -> torch.Tensor:
    """(B, T) right-padded mask with a fully masked row and a length-1 row."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0], lengths[1] = 0, 1
    return (torch.arange(T)[None, :] < lengths[:, None]).float()


def policy_inputs(seed: int):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=gen) * 3
    new = old + torch.randn(B, T, generator=gen) * 0.6  # ratios well outside [0.72, 1.28] too
    adv = torch.randn(B, generator=gen)[:, None].expand(B, T).clone() * 2
    adv[2] = -5.0  # with large ratios below, triggers the dual clip
    new[2, :3] = old[2, :3] + 2.0
    return old, new, adv, random_mask(seed)


@pytest.fixture(scope="module")
def verl_agg(verl_core):
    return verl_core.agg_loss


def verl_actor_config(clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, **global_batch_info):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "clip_ratio": clip_ratio,
            "clip_ratio_low": clip_ratio_low,
            "clip_ratio_high": clip_ratio_high,
            "clip_ratio_c": clip_ratio_c,
            "global_batch_info": global_batch_info,
        }
    )


# ---------------------------------------------------------------------------------------------------------------
# agg_loss
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.verl
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("bool_mask", [False, True])
def test_agg_loss_matches_verl(verl_agg, mode, bool_mask):
    gen = torch.Generator().manual_seed(0)
    loss_mat = torch.randn(B, T, generator=gen)
    mask = random_mask(1)
    mask = mask.bool() if bool_mask else mask
    assert torch.equal(agg_loss(loss_mat, mask, mode), verl_agg(loss_mat, mask, mode))


@pytest.mark.verl
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_matches_verl_with_global_batch_info(verl_agg, mode):
    gen = torch.Generator().manual_seed(2)
    loss_mat = torch.randn(B, T, generator=gen)
    mask = random_mask(3)
    info = {"dp_size": 4, "batch_num_tokens": 250, "global_batch_size": 40, "loss_scale_factor": 64}
    assert torch.equal(agg_loss(loss_mat, mask, mode, **info), verl_agg(loss_mat, mask, mode, **info))


def test_agg_loss_by_hand():
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert agg_loss(loss_mat, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss_mat, mask, "token-sum").item() == pytest.approx(10)
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert agg_loss(loss_mat, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert agg_loss(loss_mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 4) / 2 / 3)


def test_agg_loss_errors():
    x, m = torch.ones(2, 2), torch.ones(2, 2)
    modes = "token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm"
    with pytest.raises(ValueError, match=f"^unknown loss_agg_mode 'mean'; valid: {modes}$"):
        agg_loss(x, m, "mean")
    with pytest.raises(
        ValueError, match=r"^agg_loss: batch_num_tokens \(global\) is required when dp_size > 1$"
    ):
        agg_loss(x, m, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="^agg_loss: global_batch_size is required when dp_size > 1$"):
        agg_loss(x, m, "seq-mean-token-mean", dp_size=2)


def test_masked_mean_ignores_nan_outside_mask():
    values = torch.tensor([1.0, float("nan"), 3.0])
    assert masked_mean(values, torch.tensor([1, 0, 1])).item() == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------------------------
# Vanilla (clipped surrogate) policy loss
# ---------------------------------------------------------------------------------------------------------------

CLIP_SETTINGS = [
    # clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c
    (0.2, None, None, 3.0),  # GRPO: symmetric clip
    (0.2, 0.2, 0.28, 3.0),  # DAPO clip-higher
    (0.2, 0.2, 0.28, 10.0),  # DAPO recipe's dual clip constant
    (0.1, 0.3, 0.15, 1.5),
]


@pytest.mark.verl
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("clip", CLIP_SETTINGS)
@pytest.mark.parametrize("with_is_weights", [False, True])
def test_vanilla_policy_loss_matches_verl(verl_core, mode, clip, with_is_weights):
    clip_ratio, low, high, clip_c = clip
    old, new, adv, mask = policy_inputs(seed=LOSS_AGG_MODES.index(mode) * 10 + CLIP_SETTINGS.index(clip))
    weights = torch.rand(B, T, generator=torch.Generator().manual_seed(9)) if with_is_weights else None

    new_ours = new.clone().requires_grad_(True)
    ours = vanilla_policy_loss(
        old,
        new_ours,
        adv,
        mask,
        mode,
        clip_ratio=clip_ratio,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=clip_c,
        rollout_is_weights=weights,
    )
    new_verl = new.clone().requires_grad_(True)
    config = verl_actor_config(clip_ratio, low, high, clip_c)
    ref_loss, ref_metrics = verl_core.compute_policy_loss_vanilla(
        old_log_prob=old,
        log_prob=new_verl,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=mode,
        config=config,
        rollout_is_weights=weights,
    )
    assert torch.equal(ours.loss, ref_loss)
    assert ours.metrics == ref_metrics
    ours.loss.backward()
    ref_loss.backward()
    assert torch.equal(new_ours.grad, new_verl.grad)


@pytest.mark.verl
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_vanilla_policy_loss_matches_verl_with_global_batch_info(verl_core, mode):
    old, new, adv, mask = policy_inputs(seed=4)
    info = {"dp_size": 2, "batch_num_tokens": 123, "global_batch_size": 30, "loss_scale_factor": 50}
    ours = vanilla_policy_loss(old, new, adv, mask, mode, clip_ratio_low=0.2, clip_ratio_high=0.28, **info)
    ref, _ = verl_core.compute_policy_loss_vanilla(
        old, new, adv, mask, mode, config=verl_actor_config(0.2, 0.2, 0.28, 3.0, **info)
    )
    assert torch.equal(ours.loss, ref)


def test_vanilla_policy_loss_clip_metrics_and_dual_clip():
    old, new, adv, mask = policy_inputs(seed=5)
    out = vanilla_policy_loss(old, new, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    assert 0 < out.metrics["actor/pg_clipfrac"] < 1
    assert out.metrics["actor/pg_clipfrac_lower"] > 0  # row 2: A = -5 with ratio e^2 > 3
    assert out.metrics["actor/ppo_kl"] == pytest.approx(
        ((old - new) * mask).sum().item() / mask.sum().item(), rel=1e-5
    )


def test_vanilla_policy_loss_by_hand():
    """One token per case; A = +1 / -1, eps = 0.2, clip_ratio_c = 3."""
    old = torch.zeros(4, 1)
    new = torch.log(torch.tensor([[1.5], [0.5], [1.5], [5.0]]))
    adv = torch.tensor([[1.0], [-1.0], [-1.0], [-1.0]])
    out = vanilla_policy_loss(old, new, adv, torch.ones(4, 1), "token-sum", clip_ratio_c=3.0)
    # A>0, rho=1.5: -min(1.5, 1.2) = -1.2 | A<0, rho=0.5: max(0.5, 0.8) = 0.8 | rho=1.5: 1.5 | rho=5: min(5, 3) = 3
    assert out.loss.item() == pytest.approx(-1.2 + 0.8 + 1.5 + 3.0, rel=1e-6)


def test_vanilla_policy_loss_clamps_the_log_ratio_at_twenty():
    """``log_prob - old_log_prob`` is clamped to [-20, 20] before ``exp`` (verl): a zero-advantage token with a
    log-ratio of 100 (``exp`` overflows float32 to inf, and 0 * inf is NaN) still gives a finite zero loss, and
    ``actor/ppo_kl`` (mean ``old - log_prob``) sees the clamped log-ratio, -20 or 20."""
    one = torch.ones(1, 1)
    up = vanilla_policy_loss(torch.zeros(1, 1), torch.full((1, 1), 100.0), torch.zeros(1, 1), one)
    assert up.loss.item() == 0.0
    assert up.metrics["actor/ppo_kl"] == -20.0
    down = vanilla_policy_loss(torch.zeros(1, 1), torch.full((1, 1), -30.0), torch.ones(1, 1), one)
    assert down.metrics["actor/ppo_kl"] == 20.0
    assert down.loss.item() == pytest.approx(-math.exp(-20.0), rel=1e-6)  # A > 0, rho = e^-20: -rho


def test_vanilla_policy_loss_sequence_advantages_broadcast():
    old, new, adv, mask = policy_inputs(seed=6)
    seq_adv = adv[:, 0].contiguous()
    a = vanilla_policy_loss(old, new, seq_adv, mask)
    b = vanilla_policy_loss(old, new, adv, mask)
    assert torch.equal(a.loss, b.loss) and a.metrics == b.metrics


def test_policy_loss_config_and_validation():
    """The config names the one policy loss (``vanilla``, :func:`vanilla_policy_loss`); another name fails the
    schema, listing the valid one."""
    from pydantic import ValidationError

    from acerl.config import FamilyConfig

    assert FamilyConfig().policy_loss.name == "vanilla"
    assert FamilyConfig().model_dump()["policy_loss"] == "vanilla"  # a loss without keys dumps as its name
    with pytest.raises(ValidationError, match="unknown policy loss 'gspo'; valid: 'vanilla', 'clip_cov'"):
        FamilyConfig.model_validate({"policy_loss": "gspo"})
    x = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        vanilla_policy_loss(x, x, x, torch.ones(2, 2), clip_ratio_c=1.0)


# ---------------------------------------------------------------------------------------------------------------
# KL penalty
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.verl
@pytest.mark.parametrize("kind", KL_KINDS + ("k1+", "k2+", "k3+", "low_var_kl+", "abs+"))
def test_kl_penalty_matches_verl(verl_core, kind):
    gen = torch.Generator().manual_seed(10)
    logprob = -torch.rand(B, T, generator=gen) * 5
    ref = logprob + torch.randn(B, T, generator=gen) * 3
    ref[0, 0], ref[0, 1] = logprob[0, 0] + 30.0, logprob[0, 1] - 30.0  # hit the clamps
    lp_ours = logprob.clone().requires_grad_(True)
    lp_verl = logprob.clone().requires_grad_(True)
    ours = kl_penalty(lp_ours, ref, kind)
    theirs = verl_core.kl_penalty(lp_verl, ref, kind)
    assert torch.equal(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    assert torch.equal(lp_ours.grad, lp_verl.grad)


def test_kl_penalty_values():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # d = 1
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(ref, lp, "abs").item() == pytest.approx(1.0)
    assert kl_penalty(lp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(math.exp(-1) + 1 - 1)
    # the default kind is verl's actor default, low_var_kl
    assert kl_penalty(lp, ref).item() == kl_penalty(lp, ref, "low_var_kl").item()
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([-50.0]), "k3").item() == 10.0  # clamped
    # verl clamps the log-ratio to [-20, 20] before exp: a policy log-prob of -inf gives the clamped 10, not
    # exp(inf) - inf = NaN, and a reference log-prob of -inf the same 10
    assert kl_penalty(torch.tensor([-math.inf]), torch.tensor([0.0]), "k3").item() == 10.0
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([-math.inf]), "k3").item() == 10.0
    valid = "kl, k1, abs, mse, k2, low_var_kl, k3, kl+, k1+, abs+, mse+, k2+, low_var_kl+, k3+"
    with pytest.raises(ValueError, match=rf"^unknown KL estimator 'full'; valid: {re.escape(valid)}$"):
        kl_penalty(lp, ref, "full")


def test_masked_sum_and_mean_along_a_dimension_by_hand():
    """``dim`` reduces one axis only; values outside the mask (NaN here) count 0, an empty row has mean 0."""
    values = torch.tensor([[1.0, 2.0, math.nan], [4.0, math.nan, math.nan], [math.nan, math.nan, math.nan]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(masked_sum(values, mask, dim=-1), torch.tensor([3.0, 4.0, 0.0]))
    assert torch.equal(masked_sum(values, mask, dim=0), torch.tensor([5.0, 2.0, 0.0]))
    assert masked_sum(values, mask).item() == 7.0
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([1.5, 4.0, 0.0]))
    torch.testing.assert_close(masked_mean(values, mask, dim=0), torch.tensor([2.5, 2.0, 0.0]))
    assert masked_mean(values, mask).item() == pytest.approx(7.0 / 3.0)


# ---------------------------------------------------------------------------------------------------------------
# Entropy and log-probs
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.verl
def test_entropy_matches_verl(verl_core):
    import verl.utils.torch_functional as verl_F

    logits = torch.randn(3, 5, 50, generator=torch.Generator().manual_seed(11)) * 4
    torch.testing.assert_close(
        entropy_from_logits(logits), verl_F.entropy_from_logits(logits), rtol=1e-5, atol=1e-5
    )


def test_entropy_properties():
    V = 32
    assert entropy_from_logits(torch.zeros(2, 3, V)).allclose(torch.full((2, 3), math.log(V)))
    one_hot = torch.full((V,), -1e4)
    one_hot[3] = 0.0
    assert entropy_from_logits(one_hot).item() == pytest.approx(0.0, abs=1e-6)
    masked = torch.tensor([0.0, 0.0, -float("inf"), -float("inf")], requires_grad=True)
    h = entropy_from_logits(masked)
    assert h.item() == pytest.approx(math.log(2))
    h.backward()
    assert torch.isfinite(masked.grad).all()
    big = torch.tensor([1e4, 1e4 - 1.0, -1e4])  # no overflow
    p = torch.softmax(big.double(), -1)
    assert entropy_from_logits(big).item() == pytest.approx(
        float(-(p * p.log().nan_to_num()).sum()), rel=1e-5
    )
    half = torch.randn(4, 16).bfloat16()
    assert entropy_from_logits(half).dtype == torch.float32


def test_token_logprobs():
    gen = torch.Generator().manual_seed(12)
    logits = torch.randn(2, 4, 10, generator=gen)
    tokens = torch.randint(0, 10, (2, 4), generator=gen)
    for temperature in (1.0, 0.6):
        expected = torch.log_softmax(logits / temperature, -1).gather(-1, tokens[..., None]).squeeze(-1)
        torch.testing.assert_close(token_logprobs(logits, tokens, temperature), expected)
    assert token_logprobs(logits.bfloat16(), tokens).dtype == torch.float32
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, tokens, 0.0)
    with pytest.raises(ValueError, match="disagree"):
        token_logprobs(logits, tokens[:, :3])


@pytest.mark.verl
def test_token_logprobs_matches_verl_naive(verl_core):
    import verl.utils.torch_functional as verl_F

    gen = torch.Generator().manual_seed(13)
    logits = torch.randn(3, 6, 40, generator=gen) * 3
    tokens = torch.randint(0, 40, (3, 6), generator=gen)
    torch.testing.assert_close(
        token_logprobs(logits, tokens, 0.7), verl_F.logprobs_from_logits_naive(logits / 0.7, tokens)
    )


def test_log_probs_and_entropy_keep_float64_and_upcast_half_precision():
    """float64 logits stay float64 (diagnostics and references compute in double); bfloat16 / float16 logits
    are upcast to float32; float32 stays float32."""
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]], dtype=torch.float64)
    tokens = torch.tensor([1, 0])
    expected = torch.log_softmax(logits, dim=-1)[torch.arange(2), tokens]
    lp = token_logprobs(logits, tokens)
    assert lp.dtype == torch.float64
    torch.testing.assert_close(lp, expected, rtol=0, atol=1e-15)
    assert entropy_from_logits(logits).dtype == torch.float64
    for dtype, out in [
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
        (torch.float32, torch.float32),
    ]:
        assert token_logprobs(logits.to(dtype), tokens).dtype == out
        assert entropy_from_logits(logits.to(dtype)).dtype == out


@pytest.mark.parametrize("name", POLICY_LOSS_FUNCTIONS.names())
def test_every_policy_loss_reports_only_the_declared_metric_keys(name):
    """The trainer fills the ``actor/`` keys of a step without an update from POLICY_LOSS_METRIC_KEYS, so a loss
    reporting a key outside it would make the metrics' columns differ between steps."""
    g = torch.Generator().manual_seed(3)
    old, new = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    adv, mask = torch.randn(4, generator=g), torch.ones(4, 6)
    out = POLICY_LOSS_FUNCTIONS.get(name)(old, new, adv, mask, "token-mean")
    assert out.metrics and set(out.metrics) <= set(POLICY_LOSS_METRIC_KEYS), out.metrics
