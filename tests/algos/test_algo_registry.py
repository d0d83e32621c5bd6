"""Tests for acerl.algos.registry.Registry."""

from __future__ import annotations

import pytest

from acerl.algos import ADVANTAGE_ESTIMATORS, MODULATIONS, Registry


def test_register_and_get():
    reg: Registry[int] = Registry("thing")
    reg.register("a")(1)

    @reg.register("f")
    def f() -> int:
        return 2

    assert reg.get("a") == 1
    assert reg.get("f") is f
    assert "a" in reg and "zz" not in reg
    assert reg.names() == ("a", "f")
    assert list(reg) == ["a", "f"]
    assert len(reg) == 2


def test_duplicate_name_rejected():
    reg: Registry[int] = Registry("thing")
    reg.register("a")(1)
    with pytest.raises(ValueError, match="thing 'a' is already registered .*; pick another name"):
        reg.register("a")(2)
    assert reg.get("a") == 1


def test_unknown_name_lists_valid_names():
    reg: Registry[int] = Registry("widget")
    reg.register("beta")(1)
    reg.register("alpha")(2)
    with pytest.raises(ValueError, match=r"unknown widget 'gamma'; valid names: alpha, beta"):
        reg.get("gamma")
    with pytest.raises(ValueError, match=r"^unknown widget 'a'; valid names: \(none registered\)$"):
        Registry[int]("widget").get("a")


def test_empty_name_rejected():
    with pytest.raises(ValueError, match="thing name must be a non-empty string, got ''"):
        Registry("thing").register("")


def test_repr_names_the_kind_and_the_sorted_names():
    reg: Registry[int] = Registry("widget")
    reg.register("beta")(1)
    reg.register("alpha")(2)
    assert repr(reg) == "Registry('widget', names=['alpha', 'beta'])"


def test_project_registries():
    assert set(ADVANTAGE_ESTIMATORS.names()) >= {"grpo", "ace"}
    assert set(MODULATIONS.names()) == {"softplus", "relu"}


def _choices(model, field: str) -> set[str]:
    from typing import get_args

    return set(get_args(model.model_fields[field].annotation))


def test_config_names_are_the_registries_names():
    """Every config key that names a registry entry is validated against exactly that registry's names, so a
    bad name fails `acerl config` (listing the valid ones) instead of a job."""
    from acerl.algos.advantages import AMPLIFY_RULES
    from acerl.algos.losses import KL_KINDS, LOSS_AGG_MODES
    from acerl.config import ESTIMATORS, AceEstimator, FamilyConfig

    assert set(ESTIMATORS) == set(ADVANTAGE_ESTIMATORS.names())
    assert all(_choices(variant, "name") == {name} for name, variant in ESTIMATORS.items())
    assert _choices(AceEstimator, "modulation") == set(MODULATIONS.names())
    assert _choices(AceEstimator, "amplify") == set(AMPLIFY_RULES)
    from acerl.algos.losses import POLICY_LOSS_FUNCTIONS
    from acerl.config import POLICY_LOSSES

    assert set(POLICY_LOSSES) == set(POLICY_LOSS_FUNCTIONS.names()) >= {"vanilla", "clip_cov", "kl_cov"}
    assert all(_choices(variant, "name") == {name} for name, variant in POLICY_LOSSES.items())
    assert FamilyConfig().policy_loss.name == "vanilla"
    assert _choices(FamilyConfig, "loss_agg_mode") == set(LOSS_AGG_MODES)
    assert _choices(FamilyConfig, "kl_type") <= set(KL_KINDS)
