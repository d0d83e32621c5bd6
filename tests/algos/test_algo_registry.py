"""Tests for acerl.algos.registry.Registry."""

from __future__ import annotations

import pytest

from acerl.algos import ADVANTAGE_ESTIMATORS, MODULATIONS, POLICY_LOSSES, Registry


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
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        reg.register("a")(2)
    assert reg.get("a") == 1


def test_unknown_name_lists_valid_names():
    reg: Registry[int] = Registry("widget")
    reg.register("beta")(1)
    reg.register("alpha")(2)
    with pytest.raises(ValueError, match=r"unknown widget 'gamma'; valid names: alpha, beta"):
        reg.get("gamma")


def test_empty_name_rejected():
    with pytest.raises(ValueError):
        Registry("thing").register("")


def test_project_registries():
    assert set(ADVANTAGE_ESTIMATORS.names()) >= {"grpo", "ace"}
    assert set(MODULATIONS.names()) == {"softplus", "relu"}
    assert "vanilla" in POLICY_LOSSES
