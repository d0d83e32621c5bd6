"""A method of one's own from a module outside the package: registered by one call, listed under the config's
``plugins``, validated by ``acerl config`` like acerl's own keys, recorded in the run spec (with its code version),
and refused with one-line errors when misspelt, missing or registered twice. (Training it through the CI-scale
study: tests/workflow/test_method_plugin.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import yaml

from acerl.algos import ADVANTAGE_ESTIMATORS, POLICY_LOSS_FUNCTIONS, register_estimator
from acerl.cli import main
from acerl.config import ESTIMATORS, POLICY_LOSSES, ConfigError, EstimatorParams, Run, load_config
from acerl.config.reference import reference_markdown
from acerl.config.settings import run_spec

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "config" / "config.yaml"
MODULE = "acerl_test_lab_methods"

PLUGIN = '''
from typing import Literal

from pydantic import Field

from acerl.algos import AdvantageOutput, grpo_advantages, register_estimator, register_policy_loss
from acerl.algos import vanilla_policy_loss
from acerl.config import EstimatorParams, PolicyLossParams


class SignParams(EstimatorParams):
    """name: lab_sign: the sign of GRPO's advantage times a scale."""

    name: Literal["lab_sign"] = "lab_sign"
    scale: float = Field(1.0, gt=0, description="the advantages' magnitude")
    code_version = 3


@register_estimator(SignParams)
def lab_sign(rewards, group_ids, logprobs=None, ref_logprobs=None, response_mask=None, *, eps=1e-6,
             norm_by_std=True, scale=1.0, correct=None):
    adv = grpo_advantages(rewards, group_ids, eps, norm_by_std).sign() * scale
    return AdvantageOutput(advantages=adv, negative=adv < 0)


class PlainParams(PolicyLossParams):
    name: Literal["lab_plain"] = "lab_plain"


@register_policy_loss(PlainParams)
def lab_plain(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", **family):
    return vanilla_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, **family)
'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin module on ``sys.path`` (imported once per session: registrations are global)."""
    folder = tmp_path_factory.mktemp("lab")
    (folder / f"{MODULE}.py").write_text(PLUGIN)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def _overlay(tmp_path: Path, **extra) -> Path:
    data = {
        "plugins": [MODULE],
        "families": {"lab_family": {"policy_loss": "lab_plain"}},
        "methods": {
            "lab": {"display": "Lab", "family": "lab_family", "estimator": {"name": "lab_sign", "scale": 0.5}}
        },
        "study": {
            "main": {"models": ["tiny"], "methods": ["grpo", "lab"], "seeds": [0], "include_base": True}
        },
        **extra,
    }
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_plugin_method_is_a_config_entry_like_acerls_own(lab: Path, tmp_path: Path) -> None:
    cfg = load_config([DEFAULT, _overlay(tmp_path)])
    est = cfg.methods["lab"].estimator
    assert type(est) is ESTIMATORS["lab_sign"] and est.kwargs() == {
        "eps": 1e-6,
        "norm_by_std": True,
        "scale": 0.5,
    }
    assert cfg.families["lab_family"].policy_loss.name == "lab_plain"
    assert "lab_sign" in ADVANTAGE_ESTIMATORS and "lab_plain" in POLICY_LOSS_FUNCTIONS
    spec = run_spec(cfg, Run("tiny", "lab", 0))
    assert spec["estimator"] == {
        "name": "lab_sign",
        "eps": 1e-6,
        "norm_by_std": True,
        "scale": 0.5,
        "code_version": 3,
    }
    assert spec["family"]["policy_loss"] == "lab_plain"  # a loss without keys is recorded as its name
    assert run_spec(cfg, Run("tiny", "grpo", 0))["family"]["policy_loss"] == "vanilla"  # unchanged
    out = ADVANTAGE_ESTIMATORS.get("lab_sign")(
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), None, None, None, **est.kwargs()
    )
    assert out.advantages.tolist() == [0.5, -0.5]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "methods.lab.estimator.scael",
            1.0,
            "methods.lab.estimator.scael: not a key of the 'lab_sign' estimator",
        ),
        ("methods.lab.estimator.scale", -1, "methods.lab.estimator.scale: Input should be greater than 0"),
        (
            "families.lab_family.policy_loss",
            {"name": "lab_plain", "x": 1},
            "families.lab_family.policy_loss.x: not a key of the 'lab_plain' policy loss",
        ),
        (
            "methods.lab.estimator.name",
            "lab_sgn",
            "unknown advantage estimator 'lab_sgn'; valid: 'grpo', 'ace'",
        ),
    ],
)
def test_a_bad_plugin_key_is_a_one_line_error(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: object, message: str
) -> None:
    path = _overlay(tmp_path)
    data = yaml.safe_load(path.read_text())
    node = data
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="invalid config") as err:
        load_config([DEFAULT, path])
    assert message in str(err.value) and "\n" not in str(err.value)
    assert main(["config", "--config", str(path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_plugin_that_does_not_import_names_its_entry(tmp_path: Path) -> None:
    path = _overlay(tmp_path, plugins=["acerl_no_such_lab_module"])
    with pytest.raises(
        ConfigError, match=r"plugins\[0\]: cannot import 'acerl_no_such_lab_module'.*PYTHONPATH"
    ):
        load_config([DEFAULT, path])


def test_a_name_registered_twice_is_refused(lab: Path, tmp_path: Path) -> None:
    load_config([DEFAULT, _overlay(tmp_path)])
    from typing import Literal

    class Again(EstimatorParams):
        name: Literal["lab_sign"] = "lab_sign"

    with pytest.raises(ValueError, match="advantage estimator 'lab_sign' is already registered"):
        register_estimator(Again)(lambda *a, **k: None)
    with pytest.raises(ValueError, match="advantage estimator 'grpo' is already registered"):

        class Grpo(EstimatorParams):
            name: Literal["grpo"] = "grpo"

        register_estimator(Grpo)(lambda *a, **k: None)
    assert ESTIMATORS["lab_sign"].__name__ == "SignParams"


def test_a_parameter_the_function_does_not_take_is_refused() -> None:
    from typing import Literal

    class Params(EstimatorParams):
        name: Literal["lab_unused"] = "lab_unused"
        weight: float = 1.0

    def fn(rewards, group_ids, logprobs, ref_logprobs, response_mask, *, eps, norm_by_std, correct=None): ...

    with pytest.raises(TypeError, match=r"\['weight'\] are not keywords of the function"):
        register_estimator(Params)(fn)
    assert "lab_unused" not in ESTIMATORS


def test_the_reference_lists_acerls_own_methods_not_a_users() -> None:
    text = reference_markdown()
    for cls in ("PsrParams", "NsrParams", "WReinforceParams", "ClipCovParams", "KlCovParams"):
        assert f"({cls})" in text
    assert "SignParams" not in text and "lab_sign" not in text
    assert set(POLICY_LOSSES) >= {"vanilla", "clip_cov", "kl_cov"}
