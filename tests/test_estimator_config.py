"""A method's estimator is a discriminated union on ``name``: each variant has its own typed keys, its dump is the
registry's keyword arguments, and run specs keep the flat layout they recorded before the union."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from acerl.algos.advantages import ADVANTAGE_ESTIMATORS
from acerl.cli import main
from acerl.config import (
    ESTIMATORS,
    AceEstimator,
    ConfigError,
    GrpoEstimator,
    Run,
    load_config,
    read_yaml,
)
from acerl.config.settings import run_spec

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "config" / "config.yaml"


def _registry_kwargs(name: str) -> set[str]:
    """The keyword-only parameters of the registered estimator, less the per-batch verdicts ``correct``."""
    params = inspect.signature(ADVANTAGE_ESTIMATORS.get(name)).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY} - {"correct"}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_a_variants_dump_is_its_registry_kwargs(name: str) -> None:
    est = ESTIMATORS[name]()
    assert set(est.kwargs()) == _registry_kwargs(name)
    assert est.kwargs() == {k: v for k, v in est.model_dump().items() if k != "name"}
    defaults = {
        k: p.default
        for k, p in inspect.signature(ADVANTAGE_ESTIMATORS.get(name)).parameters.items()
        if k in est.kwargs()
    }
    assert est.kwargs() == defaults  # the schema's defaults are the algorithm's (the paper's)


def test_the_registry_accepts_every_variants_kwargs() -> None:
    import torch

    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    lp = torch.zeros(4, 3)
    mask = torch.ones(4, 3)
    for name, variant in ESTIMATORS.items():
        est = variant()
        out = ADVANTAGE_ESTIMATORS.get(name)(
            rewards, groups, lp, lp, mask, correct=rewards > 0, **est.kwargs()
        )
        assert out.advantages.shape[0] == 4


@pytest.mark.parametrize(
    ("method", "estimator", "key"),
    [
        ("grpo", {"name": "grpo", "alpha": 0.5}, "alpha"),  # an ACE key on GRPO
        ("grpo", {"alpha": 0.5}, "alpha"),  # no name: GRPO, as before the union
        ("ace_grpo", {"name": "ace", "alpah": 0.5}, "alpah"),  # a typo
    ],
)
def test_a_key_the_named_estimator_does_not_take_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], method: str, estimator: dict, key: str
) -> None:
    data = read_yaml(DEFAULT)
    data["methods"][method]["estimator"] = estimator
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data))
    variant = estimator.get("name", "grpo")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert f"methods.{method}.estimator.{key}: not a key of the {variant!r} estimator" in message
    assert "\n" not in message and ", ".join(ESTIMATORS[variant].model_fields) in message
    assert main(["config", "--no-default-config", "--config", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"methods.{method}.estimator.{key}" in lines[0], lines


def test_unknown_estimator_name_and_negative_alpha_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"methods\.grpo\.estimator: .*'acx'.*'grpo', 'ace'"):
        load_config(DEFAULT, ["methods.grpo.estimator.name=acx"])
    with pytest.raises(
        ConfigError, match=r"methods\.ace_grpo\.estimator\.alpha: .*greater than or equal to 0"
    ):
        load_config(DEFAULT, ["methods.ace_grpo.estimator.alpha=-1"])


def test_shipped_configs_load_into_the_variants() -> None:
    for extra in ([], [REPO / "config" / "test.yaml"], [REPO / "config" / "paper.yaml"]):
        cfg = load_config([DEFAULT, *extra])
        for key, method in cfg.resolved_methods.items():
            assert type(method.estimator) is (AceEstimator if key.startswith("ace") else GrpoEstimator), key
    assert load_config(DEFAULT, ["methods.grpo.estimator={}"]).methods["grpo"].estimator == GrpoEstimator()


def test_run_specs_record_each_variant_in_its_own_layout() -> None:
    """A run spec records the estimator's own fields: a GRPO run's spec holds no ACE key (the golden hashes pin
    the bytes; this names the layout)."""
    cfg = load_config(DEFAULT)
    grpo = run_spec(cfg, Run("tiny", "grpo", 0))["estimator"]
    assert grpo == {"name": "grpo", "eps": 1e-6, "norm_by_std": True}
    ace = run_spec(cfg, Run("tiny", "ace_grpo-alpha0.5", 0))["estimator"]
    assert ace == AceEstimator(alpha=0.5).model_dump(mode="json")


def test_verl_refuses_a_grpo_eps_its_builtin_does_not_use() -> None:
    with pytest.raises(
        ConfigError, match=r"methods\.grpo\.estimator\.eps: 0\.001 is not what verl's built-in GRPO"
    ):
        load_config(
            [DEFAULT, REPO / "config" / "paper.yaml"],
            ["compute.backend=verl", "methods.grpo.estimator.eps=0.001"],
        )
    assert load_config(DEFAULT, ["methods.grpo.estimator.eps=0.001"]).methods["grpo"].estimator.eps == 0.001


def test_snakemake_params_of_a_training_job_are_its_run_spec() -> None:
    """Snakemake reruns a job whose recorded params changed: a training job records its resolved run spec (what
    ``run_spec.json`` holds), so Snakemake reruns a run exactly when its spec changes."""
    from acerl.pipeline.stages import Job, param_values

    cfg = load_config(DEFAULT)
    for method in ("grpo", "ace_grpo", "ace_grpo-alpha0.5"):
        run = Run("tiny", method, 0)
        params = param_values(cfg, Job("train_policy", "tiny", run))
        assert params["run_spec"] == run_spec(cfg, run), method
        assert set(params) == {"version", "run_spec", "grading.timeout_s", "compute.backend"}, method


def test_a_group_of_one_is_refused_for_an_estimator_with_a_group_baseline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``group_size: 1`` was accepted: GRPO's group mean is then the rollout's own reward, every advantage is 0
    and ``train/mixed_groups_frac`` read 1.0."""
    with pytest.raises(ConfigError) as err:
        load_config(DEFAULT, ["models.tiny.train.group_size=1"])
    message = str(err.value)
    assert "models.tiny.train.group_size: 1 rollout per prompt" in message and "'grpo'" in message
    assert "\n" not in message
    assert main(["config", "--set", "models.tiny.train.group_size=1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "models.tiny.train.group_size" in lines[0], lines


def test_a_group_of_one_is_accepted_for_the_estimators_without_a_group_baseline() -> None:
    """PSR, NSR and W-REINFORCE score each rollout alone (no group baseline): one rollout per prompt is a
    meaningful setting for them."""
    alone = ["psr", "nsr", "w_reinforce"]
    cfg = load_config(
        [DEFAULT, REPO / "config" / "methods.yaml"],
        [
            f"study.main.methods=[{','.join(alone)}]",
            "study.alpha_sweep=null",
            "study.ablation=null",
            "study.diagnostics=null",
            "report.methods=null",
            "models.tiny.train.group_size=1",
        ],
    )
    assert {r.method for r in cfg.runs()} == set(alone)
    assert [ESTIMATORS[m].needs_group for m in ("grpo", "ace", *alone)] == [True, True, False, False, False]
