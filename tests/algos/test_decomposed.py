"""PSR, NSR and W-REINFORCE (arXiv 2506.01347) equal an independent reference written from the published
objective as the authors implement it (RLVR-Decomposed a5d4e7c1: advantages ``r``, ``r - 1`` and ``lambda r`` /
``r - 1`` without a group baseline; PSR and NSR subset the batch to the correct / incorrect rollouts before the
token-mean PPO loss), value and gradient, to 1e-6."""

from __future__ import annotations

import pytest
import torch

from acerl.algos import ADVANTAGE_ESTIMATORS, vanilla_policy_loss
from acerl.algos.decomposed import WReinforceParams, decomposed_advantages
from acerl.config import ESTIMATORS, MethodConfig

B, T, CLIP = 14, 7, 0.2


def batch(seed: int) -> tuple[torch.Tensor, ...]:
    """Random 0/1 scores (both kinds present), log-probs with ratios inside (0, 3) (the authors' clip has no dual
    clip), a right-padded mask with a fully masked row."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 2, (B,), generator=gen).float()
    scores[0], scores[1] = 0.0, 1.0
    old = -torch.rand(B, T, generator=gen) * 3
    new = old + (torch.rand(B, T, generator=gen) - 0.5) * 1.2
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[2] = 0
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    groups = torch.arange(B) // 7
    return scores, groups, old, new, mask


def reference_loss(name: str, scores: list[float], old, new, mask, lam: float = 0.1) -> torch.Tensor:
    """The authors' objective, one token at a time: ``A = r`` (PSR), ``r - 1`` (NSR), ``lambda r`` for r = 1 and
    ``r - 1`` for r = 0 (W-REINFORCE); PSR keeps only r = 1 rows, NSR only r = 0 rows; loss = mean over the kept
    rows' tokens of ``max(-A rho, -A clip(rho, 1 - 0.2, 1 + 0.2))``."""
    total, tokens = torch.zeros(()), 0
    for i, r in enumerate(scores):
        if (name == "psr" and r != 1) or (name == "nsr" and r != 0):
            continue
        adv = {"psr": r, "nsr": r - 1, "w_reinforce": lam * r if r == 1 else r - 1}[name]
        for t in range(old.shape[1]):
            if mask[i, t] == 0:
                continue
            rho = torch.exp(new[i, t] - old[i, t])
            total = total + torch.maximum(-adv * rho, -adv * rho.clamp(1 - CLIP, 1 + CLIP))
            tokens += 1
    return total / tokens


def ours(name: str, scores, groups, old, new, mask, **keys) -> torch.Tensor:
    """The trainer's path: the method's config -> the registered estimator -> its loss rows -> the policy loss."""
    est = MethodConfig.model_validate(
        {"display": name, "family": "grpo", "estimator": {"name": name, **keys}}
    )
    out = ADVANTAGE_ESTIMATORS.get(name)(
        scores, groups, old, None, mask, correct=scores == 1, **est.estimator.kwargs()
    )
    return vanilla_policy_loss(
        old, new, out.token_level(mask), out.loss_mask(mask), "token-mean", clip_ratio=CLIP
    ).loss


@pytest.mark.parametrize("name", ["psr", "nsr", "w_reinforce"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decomposed_methods_equal_the_reference(name: str, seed: int) -> None:
    scores, groups, old, new, mask = batch(seed)
    a, b = new.clone().requires_grad_(True), new.clone().requires_grad_(True)
    got, want = ours(name, scores, groups, old, a, mask), reference_loss(name, scores.tolist(), old, b, mask)
    got.backward()
    want.backward()
    assert torch.allclose(got, want, rtol=0, atol=1e-6), (got, want)
    assert torch.allclose(a.grad, b.grad, rtol=0, atol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_w_reinforce_weight_reaches_the_loss(lam: float) -> None:
    scores, groups, old, new, mask = batch(7)
    got = ours("w_reinforce", scores, groups, old, new, mask, positive_weight=lam)
    assert torch.allclose(got, reference_loss("w_reinforce", scores.tolist(), old, new, mask, lam), atol=1e-6)


def test_advantages_and_loss_rows_by_hand() -> None:
    correct = torch.tensor([True, False, True, False])
    assert decomposed_advantages(correct, 1.0, 0.0).tolist() == [1.0, 0.0, 1.0, 0.0]
    rewards, groups = correct.float(), torch.tensor([0, 0, 1, 1])
    psr = ADVANTAGE_ESTIMATORS.get("psr")(rewards, groups, None, None, None, correct=correct)
    nsr = ADVANTAGE_ESTIMATORS.get("nsr")(rewards, groups, None, None, None, correct=correct)
    w = ADVANTAGE_ESTIMATORS.get("w_reinforce")(rewards, groups, None, None, None, correct=correct)
    assert psr.advantages.tolist() == [1.0, 0.0, 1.0, 0.0] and psr.loss_rows.tolist() == correct.tolist()
    assert nsr.advantages.tolist() == [0.0, -1.0, 0.0, -1.0] and nsr.loss_rows.tolist() == (~correct).tolist()
    assert w.advantages.tolist() == pytest.approx([0.1, -1.0, 0.1, -1.0]) and w.loss_rows is None
    mask = torch.ones(4, 2)
    assert psr.loss_mask(mask).tolist() == [[1, 1], [0, 0], [1, 1], [0, 0]]
    assert w.loss_mask(mask) is mask


def test_the_verdicts_are_required() -> None:
    with pytest.raises(ValueError, match="'nsr' estimator needs correct="):
        ADVANTAGE_ESTIMATORS.get("nsr")(torch.zeros(2), torch.zeros(2, dtype=torch.long), None, None, None)


def test_defaults_and_validation() -> None:
    assert ESTIMATORS["w_reinforce"] is WReinforceParams and WReinforceParams().positive_weight == 0.1
    with pytest.raises(ValueError, match="positive_weight"):
        MethodConfig.model_validate(
            {"display": "W", "family": "grpo", "estimator": {"name": "w_reinforce", "positive_weight": -1}}
        )
