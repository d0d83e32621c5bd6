"""The verl command line of every method, pinned: ``verl_overrides`` for each method of the paper's grid
(``config.yaml`` + ``paper.yaml`` + ``paper_methods.yaml``, the Qwen2.5-Math-7B run of seed 0, work directory
``{root}`` in the file) equals ``tests/golden/verl_overrides.json``, recorded before ACE moved onto the registered-estimator
path (docs/verl.md, "The ACE plugin and why it is needed"). A refactor of the launcher must leave every line of
every command as it was; a deliberate change rewrites the file in the same commit.

Builds the commands only: verl is not imported."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from acerl.config import Run, load_config
from acerl.verl_backend.launcher import EXTRA_MODULES_ENV, EXTRA_OVERRIDES_ENV, verl_overrides

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "verl_overrides.json"
CONFIGS = [REPO / "config" / f for f in ("config.yaml", "paper.yaml", "paper_methods.yaml")]
ROOT = re.compile(r"(?<=[=,])/w/")  # the work directory at the start of a value or of a list item
METHODS = ("grpo", "dapo", "ace_grpo", "ace_dapo", "psr", "nsr", "w_reinforce", "clip_cov", "kl_cov")


@pytest.fixture(scope="module")
def overrides() -> dict[str, list[str]]:
    saved = {k: os.environ.pop(k) for k in (EXTRA_MODULES_ENV, EXTRA_OVERRIDES_ENV) if k in os.environ}
    try:
        cfg = load_config(CONFIGS)
        return {
            m: [ROOT.sub("{root}/", o) for o in verl_overrides(cfg, Run("qwen25_math_7b", m, 0), "/w")]
            for m in METHODS
        }
    finally:
        os.environ.update(saved)


def test_the_golden_file_covers_every_method(overrides: dict[str, list[str]]) -> None:
    assert sorted(json.loads(GOLDEN.read_text(encoding="utf-8"))) == sorted(METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_verl_overrides_unchanged(overrides: dict[str, list[str]], method: str) -> None:
    assert overrides[method] == json.loads(GOLDEN.read_text(encoding="utf-8"))[method]


def test_ace_and_the_other_plugin_estimators_take_one_path(overrides: dict[str, list[str]]) -> None:
    """Every acerl estimator but verl's own GRPO selects the plugin's config class and carries its keys in one
    section: ACE's typed ``algorithm.ace``, the others' ``algorithm.estimator_params``."""
    target = "algorithm._target_=acerl.verl_backend.plugin.AceAlgoConfig"
    for method, section in [("ace_grpo", "ace"), ("ace_dapo", "ace"), ("psr", "estimator_params")]:
        assert target in overrides[method]
        assert any(o.startswith(f"+algorithm.{section}.") for o in overrides[method]), method
    for method in ("grpo", "dapo", "clip_cov", "kl_cov"):
        assert target not in overrides[method]
        assert not any(
            o.startswith(("+algorithm.ace.", "+algorithm.estimator_params.")) for o in overrides[method]
        )
