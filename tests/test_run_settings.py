"""``acerl.config.settings.resolve(cfg, run) -> RunSettings``: the one resolved, typed view of a run's settings.

The run specs (``run_spec.json``: what decides a run's result, the Snakemake / DVC rerun trigger) of every run
of the shipped grids are pinned by hash in ``tests/golden/run_spec_hashes.json``, recorded with ``train_policy``'s
result version 3: a refactor of the resolution must not rerun (or silently reuse) any result. Since the resource
keys (``RESOURCE_KEYS``: vLLM memory, token budget, checkpoint schedule) left the spec, the hashes are of the spec
with those keys put back: a spec recorded before equals today's less exactly those keys.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from support.perturb import candidates, leaves, nest

from acerl.config import ConfigError, Run, deep_merge, load_config, merged_dict, spec_json, validate
from acerl.config.settings import (
    RESOURCE_KEYS,
    RunSettings,
    local_run_spec,
    resolve,
    run_spec,
    spec_keys,
    without_resource_keys,
)

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "run_spec_hashes.json"
PAPER = [REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"]
GRIDS = {
    "default": (["config.yaml"], []),
    "ci": (["config.yaml", "test.yaml"], []),
    "paper": (["config.yaml", "paper.yaml"], []),
    "gpu": (["config.yaml", "gpu.yaml"], []),
    "bf16": (["config.yaml", "test.yaml"], ["compute.precision=bf16"]),
}


def _hash(spec: dict) -> str:
    return hashlib.sha256(spec_json(spec).encode()).hexdigest()[:16]


def _as_recorded_before(cfg, run: Run, spec: dict) -> dict:
    """``spec`` with the resource keys put back under ``train``, as version 3 recorded it (the golden hashes):
    the specs are the recorded ones less exactly those keys, so a run recorded then compares equal now."""
    if run.is_base:
        return spec
    knobs = cfg.models[run.model].train.model_dump(mode="json", include=set(RESOURCE_KEYS))
    assert not set(knobs) & set(spec["train"])
    return {**spec, "train": {**spec["train"], **knobs}}


@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_run_specs_unchanged(grid: str) -> None:
    """Every run's spec (and the local trainer's, with its ``trainer`` section) hashes as before."""
    files, overrides = GRIDS[grid]
    cfg = load_config([REPO / "config" / f for f in files], overrides)
    got: dict[str, str] = {}
    for run in cfg.base_runs() + cfg.runs():
        got[run.id] = _hash(_as_recorded_before(cfg, run, run_spec(cfg, run)))
        if not run.is_base:
            got[f"{run.id} local"] = _hash(_as_recorded_before(cfg, run, local_run_spec(resolve(cfg, run))))
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
    """``needs_reference`` of each estimator variant (read by both backends) is what the registered function
    requires: a ``ref_logprobs`` parameter without a default."""
    import inspect

    from acerl.algos.advantages import ADVANTAGE_ESTIMATORS
    from acerl.config import ESTIMATORS

    assert set(ESTIMATORS) == set(ADVANTAGE_ESTIMATORS.names())
    for name, variant in ESTIMATORS.items():
        param = inspect.signature(ADVANTAGE_ESTIMATORS.get(name)).parameters.get("ref_logprobs")
        required = param is not None and param.default is inspect.Parameter.empty
        assert variant().needs_reference == required, name


# ------------------------------------------------------------------------------ the keys the spec reads
SMALL_STUDY = {  # a training run of each kind: GRPO, ACE with diagnostics, an alpha-sweep variant
    "study": {
        "main": {"models": ["tiny"], "methods": ["grpo", "ace_grpo"], "seeds": [0], "include_base": False},
        "alpha_sweep": {"model": "tiny", "method": "ace_grpo", "alphas": [0.5], "seeds": [0]},
        "ablation": None,
        "diagnostics": {"models": ["tiny"], "methods": ["ace_grpo"], "seeds": [0]},
    },
}
RUNS = (Run("tiny", "grpo", 0), Run("tiny", "ace_grpo", 0), Run("tiny", "ace_grpo-alpha0.5", 0))


def _changed_config(base: dict[str, Any], old: Any, leaf: str, value: Any) -> Any | None:
    """The config with ``leaf`` set to one valid other value keeping the run grid (``None`` if there is none)."""
    for new in candidates(value):
        try:
            cfg = validate(deep_merge(base, nest(leaf, new)))
        except ConfigError:
            continue
        if cfg.runs() == old.runs() and cfg.diagnostic_runs() == old.diagnostic_runs():
            return cfg
    return None


def _covered(key: str, keys: list[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in keys)


def test_spec_keys_are_exactly_the_keys_the_spec_reads() -> None:
    """Every config value is changed in turn (one valid change each): a training run's spec changes exactly when
    the value lies under one of its :func:`spec_keys` (the stage table's deciding keys of the run), so DVC's params
    cannot drift from what ``RunSettings`` resolves (Snakemake records the spec itself)."""
    base = deep_merge(
        merged_dict([REPO / "config" / "config.yaml", REPO / "config" / "test.yaml"]), SMALL_STUDY
    )
    cfg = validate(base)
    assert cfg.runs() == list(RUNS)
    specs = {run: spec_json(run_spec(cfg, run)) for run in RUNS}
    keys = {run: spec_keys(cfg, run) for run in RUNS}
    checked: dict[Run, set[str]] = {run: set() for run in RUNS}
    for leaf, value in leaves(cfg.model_dump(mode="json")):
        changed = _changed_config(base, cfg, leaf, value)
        if changed is None:
            continue
        for run in RUNS:
            moved = spec_json(run_spec(changed, run)) != specs[run]
            assert moved == _covered(leaf, keys[run]), (
                f"{run.id}: {leaf} {'moves' if moved else 'keeps'} the spec"
            )
            if moved:
                checked[run].add(leaf)
    for run in RUNS:  # the sweep is not vacuous: each run's spec moved with dozens of keys, of every section
        assert len(checked[run]) >= 30, (run.id, sorted(checked[run]))
        diagnostics = {"study"} if run in cfg.diagnostic_runs() else set()  # study.diagnostics.every, ...
        sections = {leaf.split(".")[0] for leaf in checked[run]}
        assert sections == {"models", "families", "methods", "compute", *diagnostics}, run.id
    alpha = "methods.ace_grpo.estimator.alpha"
    assert alpha in checked[RUNS[1]] and alpha not in checked[RUNS[2]]  # the sweep variant fixes alpha itself
    assert "study.diagnostics.every" in keys[RUNS[1]] and "study.diagnostics.every" not in keys[RUNS[0]]


def test_resource_keys_leave_the_spec_and_old_records_still_match() -> None:
    """Changing a resource key (vLLM's memory share, the token budget, the checkpoint schedule) keeps the spec; a
    spec recorded with those keys compares equal to today's once they are dropped."""
    cfg = load_config(PAPER)
    run = Run("qwen25_math_7b", "ace_dapo", 0)
    spec = run_spec(cfg, run)
    assert not set(RESOURCE_KEYS) & set(spec["train"])
    for key, value in [
        ("gpu_memory_utilization", 0.6),
        ("max_tokens_per_gpu", 12000),
        ("save_every", 5),
        ("keep_checkpoints", 4),
    ]:
        changed = load_config(PAPER, [f"models.qwen25_math_7b.train.{key}={value}"])
        assert run_spec(changed, run) == spec, key
        assert f"models.qwen25_math_7b.train.{key}" not in spec_keys(changed, run)
    recorded = _as_recorded_before(cfg, run, spec)
    assert recorded != spec and without_resource_keys(recorded) == spec
