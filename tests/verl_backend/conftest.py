"""Shared helpers for the verl backend tests: the paper config and verl's Hydra config (composed once)."""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.ci_inputs import skip_or_fail_in_ci

from acerl.config import Config, load_config

REPO = Path(__file__).resolve().parents[2]
PAPER_CONFIGS = [REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"]


def verl_config_dir() -> Path:
    """``verl/trainer/config`` of the installed verl (found without importing verl)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        skip_or_fail_in_ci("verl is not installed", module_level=True)
    return Path(spec.origin).parent / "trainer" / "config"


@pytest.fixture(scope="session")
def paper_cfg() -> Config:
    return load_config(PAPER_CONFIGS)


def _hydra_compose(overrides: Sequence[str]):
    """verl's real ``ppo_trainer`` config with ``overrides``, through Hydra's ``compose`` (about 3 s)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose("ppo_trainer", overrides=list(overrides))


@pytest.fixture(scope="session")
def verl_base_config():
    """verl's ``ppo_trainer`` config composed once with no overrides (struct mode, as Hydra leaves it)."""
    return _hydra_compose([])


@pytest.fixture(scope="session")
def hydra_compose():
    """``hydra_compose(overrides)``: verl's real config through Hydra's ``compose`` (about 3 s per call)."""
    return _hydra_compose


def _apply_overrides(base, overrides: Sequence[str]):
    """Apply command-line overrides to a copy of a composed config with Hydra's own override machinery.

    This is the last step of ``compose`` (parse, then ``ConfigLoaderImpl._apply_overrides_to_config`` in
    struct mode); ``test_fast_compose_equals_hydra_compose`` checks it gives ``compose``'s result.
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = copy.deepcopy(base)
    parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
    return cfg


@pytest.fixture(scope="session")
def apply_overrides():
    """``apply_overrides(base, overrides)``: see :func:`_apply_overrides`."""
    return _apply_overrides
