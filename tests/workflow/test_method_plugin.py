"""A method of one's own, outside the package: a module registers an estimator and a policy loss, a config lists it
under ``plugins``, and the CI-scale study trains and evaluates it (``acerl train`` and the DAG's evaluation of
that run), beside acerl's own methods beyond the paper (PSR, NSR, W-REINFORCE, Clip-Cov, KL-Cov) trained by
``acerl train`` end to end."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from support.study import SNAKEMAKE, run_bounded, snakemake_env

from acerl.config import Run
from acerl.pipeline import paths

pytestmark = pytest.mark.slow

PLUGIN = '''"""A method of one's own: GRPO with advantages clipped to +-bound, and the vanilla loss scaled."""

from typing import Literal

from pydantic import Field

from acerl.algos import (
    AdvantageOutput,
    PolicyLossOutput,
    grpo_advantages,
    register_estimator,
    register_policy_loss,
    vanilla_policy_loss,
)
from acerl.config import EstimatorParams, PolicyLossParams


class ClippedParams(EstimatorParams):
    name: Literal["toy_clipped"] = "toy_clipped"
    bound: float = Field(0.5, gt=0, description="the advantages' bound")
    code_version = 2


@register_estimator(ClippedParams)
def toy_clipped(rewards, group_ids, logprobs=None, ref_logprobs=None, response_mask=None, *, eps=1e-6,
                norm_by_std=True, bound=0.5, correct=None):
    adv = grpo_advantages(rewards, group_ids, eps, norm_by_std).clamp(-bound, bound)
    return AdvantageOutput(advantages=adv, negative=adv < 0)


class ScaledParams(PolicyLossParams):
    name: Literal["toy_scaled"] = "toy_scaled"
    scale: float = Field(0.5, gt=0)


@register_policy_loss(ScaledParams)
def toy_scaled(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", *, scale=0.5,
               **family):
    out = vanilla_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, **family)
    return PolicyLossOutput(loss=out.loss * scale, metrics=out.metrics)
'''

OVERLAY = {
    "plugins": ["toy_method"],
    "families": {"toy_family": {"policy_loss": {"name": "toy_scaled", "scale": 0.5}}},
    "methods": {
        "toy": {"display": "Toy", "family": "toy_family", "estimator": {"name": "toy_clipped", "bound": 0.25}}
    },
    "study": {
        "main": {"models": ["tiny"], "methods": ["toy"], "seeds": [0], "include_base": False},
        "alpha_sweep": None,
        "ablation": None,
        "diagnostics": None,
    },
    # config/methods.yaml's comparison names methods this study does not train; CI scale evaluates k <= 8
    "report": {"methods": None, "primary": {"benchmark": "synth_easy", "k": 8}},
}
CONFIGS = ("config/test.yaml", "config/methods.yaml", "plugin.yaml")


@pytest.fixture(scope="module")
def study(prepared_study: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    wd = tmp_path_factory.mktemp("plugin") / "study"
    shutil.copytree(prepared_study, wd, symlinks=True)
    plugins = wd.parent / "plugins"
    plugins.mkdir()
    (plugins / "toy_method.py").write_text(PLUGIN)
    methods = yaml.safe_load((wd / "config/methods.yaml").read_text())
    overlay = {
        **OVERLAY,
        "models": methods["models"],
        "methods": {**methods["methods"], **OVERLAY["methods"]},
    }
    (wd / "plugin.yaml").write_text(yaml.safe_dump(overlay))
    env = snakemake_env(extra={"PYTHONPATH": os.pathsep.join([str(wd / "src"), str(plugins)])})
    return wd, env


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_plugin_method_trains_and_is_evaluated_through_the_dag(study: tuple[Path, dict[str, str]]) -> None:
    wd, env = study
    cfg_args = ["--configfile", *CONFIGS]
    run = Run("tiny", "toy", 0)
    targets = [str(paths.passk_file(".", b, run)) for b in ("synth_easy", "synth_hard")]
    # the targets first: Snakemake 9 reads what follows --configfile as config files
    proc = run_bounded(
        [str(SNAKEMAKE), "-c2", *targets, *cfg_args], cwd=wd, env=env, timeout_s=1800, log=wd / "plugin.log"
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    spec = json.loads(paths.run_spec_file(wd, run).read_text())
    assert spec["estimator"] == {"name": "toy_clipped", "eps": 1e-6, "norm_by_std": True, "bound": 0.25,
                                 "code_version": 2}  # fmt: skip
    assert spec["family"]["policy_loss"] == {"name": "toy_scaled", "scale": 0.5}
    records = _records(paths.train_metrics_file(wd, run))
    assert len(records) == 4
    # the plugin's estimator trained the run: every advantage within its bound, some at it
    assert all(-0.25 <= r["actor/advantage_min"] and r["actor/advantage_max"] <= 0.25 for r in records)
    assert any(abs(r["actor/advantage_max"]) == 0.25 or r["actor/advantage_min"] == -0.25 for r in records)
    for target in targets:
        assert set(json.loads((wd / target).read_text())["pass_at_k"]) == {"1", "2", "4", "8"}


@pytest.mark.parametrize("method", ["psr", "nsr", "w_reinforce", "clip_cov", "kl_cov"])
def test_the_methods_beyond_the_paper_train_at_ci_scale(
    study: tuple[Path, dict[str, str]], method: str
) -> None:
    wd, env = study
    args = [
        sys.executable,
        "-m",
        "acerl.cli",
        "train",
        "--no-progress",
        "--model",
        "tiny",
        "--method",
        method,
    ]
    args += [a for f in CONFIGS for a in ("--config", f)]
    proc = run_bounded(args, cwd=wd, env=env, timeout_s=900, log=wd / f"train-{method}.log")
    assert proc.returncode == 0, proc.stdout[-3000:]
    run = Run("tiny", method, 0)
    records = _records(paths.train_metrics_file(wd, run))
    assert len(records) == 4 and all(r["train/groups"] > 0 for r in records)
    adv = [(r["actor/advantage_min"], r["actor/advantage_max"]) for r in records]
    if method == "psr":
        assert all(lo >= 0 for lo, _ in adv)  # PSR: no negative advantage
    if method == "nsr":
        assert all(hi <= 0 for _, hi in adv)  # NSR: no positive advantage
    if method == "w_reinforce":
        assert all(hi <= 0.1 + 1e-6 for _, hi in adv)  # lambda = 0.1 on the correct ones
    spec = json.loads(paths.run_spec_file(wd, run).read_text())
    if method in ("clip_cov", "kl_cov"):
        assert spec["family"]["policy_loss"]["name"] == method
