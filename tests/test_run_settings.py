"""``acerl.settings.resolve(cfg, run) -> RunSettings``: the one resolved, typed view of a run's settings.

The run specs (``run_spec.json``: what decides a run's result, the Snakemake / DVC rerun trigger) of every run
of the shipped grids are pinned by hash in ``tests/golden/run_spec_hashes.json``, recorded with the code before
``RunSettings`` existed: moving the resolution into one object must not rerun (or silently reuse) any result.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from acerl.config import ConfigError, Run, load_config, spec_json
from acerl.settings import RunSettings, local_run_spec, resolve, run_spec

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "run_spec_hashes.json"
GRIDS = {
    "default": (["config.yaml"], []),
    "ci": (["config.yaml", "test.yaml"], []),
    "paper": (["config.yaml", "paper.yaml"], []),
    "gpu": (["config.yaml", "gpu.yaml"], []),
    "bf16": (["config.yaml", "test.yaml"], ["compute.precision=bf16"]),
}


def _hash(spec: dict) -> str:
    return hashlib.sha256(spec_json(spec).encode()).hexdigest()[:16]


@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_run_specs_unchanged(grid: str) -> None:
    """Every run's spec (and the local trainer's, with its ``trainer`` section) hashes as before."""
    files, overrides = GRIDS[grid]
    cfg = load_config([REPO / "config" / f for f in files], overrides)
    got: dict[str, str] = {}
    for run in cfg.base_runs() + cfg.runs():
        got[run.id] = _hash(run_spec(cfg, run))
        if not run.is_base:
            got[f"{run.id} local"] = _hash(local_run_spec(resolve(cfg, run)))
    assert got == json.loads(GOLDEN.read_text())[grid]


def test_resolve_is_frozen_and_typed() -> None:
    cfg = load_config(REPO / "config" / "config.yaml")
    s = resolve(cfg, Run("tiny", "ace_grpo", 0))
    assert isinstance(s, RunSettings)
    assert s.estimator.name == "ace" and s.needs_reference
    assert s.kl_coef == cfg.models["tiny"].train.kl_coef
    with pytest.raises(AttributeError):
        s.kl_coef = 0.5  # type: ignore[misc]
    assert not resolve(cfg, Run("tiny", "grpo", 0)).estimator.name == "ace"


def test_kl_off_means_beta_zero_everywhere() -> None:
    """DAPO's ``use_kl_loss: false``: the effective beta is 0 (the loss and the logged ``actor/kl_coef``)."""
    cfg = load_config(REPO / "config" / "config.yaml", ["families.grpo.use_kl_loss=false"])
    s = resolve(cfg, Run("tiny", "grpo", 0))
    assert s.kl_loss_coef == 0.0 and not s.needs_reference
    assert resolve(cfg, Run("tiny", "ace_grpo", 0)).needs_reference  # ACE's c_i needs pi_ref regardless


def test_bad_overrides_and_runs_fail_with_the_key() -> None:
    cfg = load_config(REPO / "config" / "config.yaml")
    with pytest.raises(ConfigError, match="reference"):
        resolve(cfg, Run("tiny", "grpo", 0), reference="bogus")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ref_ema_decay"):
        resolve(cfg, Run("tiny", "grpo", 0), ref_ema_decay=1.5)
    with pytest.raises(ConfigError, match="base model"):
        resolve(cfg, Run("tiny", "base", 0))
    with pytest.raises(ConfigError, match="unknown model"):
        resolve(cfg, Run("nope", "grpo", 0))


def test_needs_reference_agrees_with_the_estimator_registry() -> None:
    """``EstimatorConfig.needs_reference`` (read by both backends) is what the registered function requires:
    a ``ref_logprobs`` parameter without a default."""
    import inspect
    import typing

    from acerl.algos.advantages import ADVANTAGE_ESTIMATORS
    from acerl.config import EstimatorConfig

    names = typing.get_args(EstimatorConfig.model_fields["name"].annotation)
    assert set(names) == set(ADVANTAGE_ESTIMATORS.names())
    for name in names:
        param = inspect.signature(ADVANTAGE_ESTIMATORS.get(name)).parameters.get("ref_logprobs")
        required = param is not None and param.default is inspect.Parameter.empty
        assert EstimatorConfig(name=name).needs_reference == required, name
