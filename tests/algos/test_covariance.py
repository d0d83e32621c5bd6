"""Clip-Cov and KL-Cov (arXiv 2505.22617): the local trainer's losses equal verl 0.9.1's own functions on random
inputs (value, gradient and metrics), and their config keys are validated like the others."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from acerl.algos import LOSS_AGG_MODES, POLICY_LOSS_FUNCTIONS
from acerl.algos.covariance import ClipCovParams, KlCovParams, token_covariance
from acerl.config import FamilyConfig

B, T = 16, 11


def inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random log-probs, token-level advantages (GRPO-like, constant per row) and a right-padded mask with a
    fully masked and a length-1 row; ratios well outside the clip range."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=gen) * 4
    new = old + torch.randn(B, T, generator=gen) * 0.5
    adv = (torch.randn(B, generator=gen) * 2)[:, None].expand(B, T).clone()
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0], lengths[1] = 0, 1
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return old, new, adv * mask, mask


def verl_config(policy_loss: dict, low: float, high: float, **global_batch_info):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_c": 3.0,
            "policy_loss": policy_loss,
            "global_batch_info": global_batch_info,
        }
    )


CASES = [
    ("clip_cov", {}),  # verl's defaults: one token of 2 x 10^-4
    ("clip_cov", {"clip_cov_ratio": 0.2, "clip_cov_lb": 0.5, "clip_cov_ub": 6.0}),
    ("clip_cov", {"clip_cov_ratio": 0.05, "clip_cov_lb": -1.0, "clip_cov_ub": 1.0}),
    ("kl_cov", {}),
    ("kl_cov", {"kl_cov_ratio": 0.2, "ppo_kl_coef": 1.0}),
    ("kl_cov", {"kl_cov_ratio": 0.5, "ppo_kl_coef": 0.3}),
]


def _ours_and_verls(verl_core, name: str, keys: dict, mode: str, seed: int, low=0.2, high=0.28, **info):
    old, new, adv, mask = inputs(seed)
    params = FamilyConfig.model_validate({"policy_loss": {"name": name, **keys}}).policy_loss
    fn = {"clip_cov": verl_core.compute_policy_loss_clip_cov, "kl_cov": verl_core.compute_policy_loss_kl_cov}
    new_ours = new.clone().requires_grad_(True)
    torch.manual_seed(seed)  # Clip-Cov draws its tokens from torch's global generator, as verl's does
    ours = POLICY_LOSS_FUNCTIONS.get(name)(
        old,
        new_ours,
        adv,
        mask,
        mode,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=3.0,
        **info,
        **params.kwargs(),
    )
    new_verl = new.clone().requires_grad_(True)
    torch.manual_seed(seed)
    loss, metrics = fn[name](
        old, new_verl, adv, mask, mode, config=verl_config(params.kwargs(), low, high, **info)
    )
    ours.loss.backward()
    loss.backward()
    return ours, (loss, metrics), new_ours.grad, new_verl.grad


@pytest.mark.verl
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize(("name", "keys"), CASES)
def test_covariance_losses_equal_verls(verl_core, name: str, keys: dict, mode: str) -> None:
    seed = CASES.index((name, keys)) * 10 + LOSS_AGG_MODES.index(mode)
    ours, (loss, metrics), grad_ours, grad_verl = _ours_and_verls(verl_core, name, keys, mode, seed)
    assert torch.allclose(ours.loss, loss, rtol=0, atol=1e-6), (ours.loss, loss)
    assert torch.allclose(grad_ours, grad_verl, rtol=0, atol=1e-6)
    assert ours.metrics == pytest.approx(metrics, abs=1e-6)


@pytest.mark.verl
@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_covariance_losses_equal_verls_with_global_batch_info(verl_core, name: str) -> None:
    """Gradient accumulation: the micro-batch loss aggregated with mini-batch counts, as verl's actor does."""
    keys = {"clip_cov_ratio": 0.2} if name == "clip_cov" else {"kl_cov_ratio": 0.2}
    info = {"dp_size": 1, "batch_num_tokens": 200, "global_batch_size": 40, "loss_scale_factor": None}
    ours, (loss, _), grad_ours, grad_verl = _ours_and_verls(verl_core, name, keys, "token-mean", 3, **info)
    assert torch.allclose(ours.loss, loss, rtol=0, atol=1e-6)
    assert torch.allclose(grad_ours, grad_verl, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "keys"), [("clip_cov", {"clip_cov_ratio": 0.3}), ("kl_cov", {"kl_cov_ratio": 0.3})]
)
def test_the_intervention_changes_the_gradient_of_the_selected_tokens_only(name: str, keys: dict) -> None:
    """Against the vanilla surrogate without dual clip (Clip-Cov's base) or without any clip (KL-Cov's): the
    gradient differs exactly on the tokens the covariance selects, and they are among the largest covariances
    (KL-Cov) or inside the bounds (Clip-Cov)."""
    old, new, adv, mask = inputs(5)
    params = FamilyConfig.model_validate({"policy_loss": {"name": name, **keys}}).policy_loss
    lp = new.clone().requires_grad_(True)
    POLICY_LOSS_FUNCTIONS.get(name)(old, lp, adv, mask, "token-sum", **params.kwargs()).loss.backward()
    base = new.clone().requires_grad_(True)
    ratio = torch.exp(base - old)
    if name == "clip_cov":
        surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    else:
        surrogate = -adv * ratio
    (surrogate * mask).sum().backward()
    changed = (lp.grad - base.grad).abs() > 1e-9
    cov = token_covariance(adv, new, mask)
    n = int(mask.sum())
    assert changed.sum() >= 1 and not (changed & (mask == 0)).any()
    if name == "clip_cov":
        assert int(changed.sum()) <= max(int(0.3 * n), 1)
        assert ((cov[changed] > 1.0) & (cov[changed] < 5.0)).all()
        assert (lp.grad[changed] == 0).all()  # detached: no gradient at all
    else:
        k = max(1, int(0.3 * n))
        threshold = cov[mask.bool()].topk(k).values.min()
        assert (cov[changed] >= threshold - 1e-6).all()


def test_covariance_keys_are_validated_like_the_others() -> None:
    fam = FamilyConfig.model_validate({"policy_loss": {"name": "kl_cov"}})
    assert isinstance(fam.policy_loss, KlCovParams) and fam.policy_loss.kwargs() == {
        "kl_cov_ratio": 0.0002,
        "ppo_kl_coef": 0.1,
    }
    assert fam.model_dump()["policy_loss"] == {"name": "kl_cov", "kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1}
    assert ClipCovParams().kwargs() == {"clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    with pytest.raises(ValidationError, match="clip_cov_ratio"):
        FamilyConfig.model_validate({"policy_loss": {"name": "clip_cov", "clip_cov_ratio": 0}})
    with pytest.raises(ValidationError, match="clip_cov_lb .* must be below clip_cov_ub"):
        FamilyConfig.model_validate({"policy_loss": {"name": "clip_cov", "clip_cov_lb": 5, "clip_cov_ub": 1}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        FamilyConfig.model_validate({"policy_loss": {"name": "kl_cov", "clip_cov_ratio": 0.1}})


@pytest.mark.verl
def test_the_defaults_are_verls_actor_config() -> None:
    from verl.workers.config.actor import PolicyLossConfig

    verl = PolicyLossConfig()
    for params in (ClipCovParams(), KlCovParams()):
        for key, value in params.kwargs().items():
            assert getattr(verl, key) == value, key
