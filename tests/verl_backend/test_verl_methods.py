"""The methods beyond the paper at paper scale (config/paper.yaml + config/paper_methods.yaml): the launcher renders
each for verl 0.9.1, verl's own config machinery composes and types it, verl runs Clip-Cov and KL-Cov as its own
losses, and the ACE plugin computes PSR, NSR and W-REINFORCE with the local trainer's registry entries, dropping
PSR's and NSR's excluded rollouts from the loss as the authors' trainer does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from support.ci_inputs import import_or_skip, skip_or_fail_in_ci

from acerl.algos import ADVANTAGE_ESTIMATORS
from acerl.config import ConfigError, Run, load_config
from acerl.verl_backend.launcher import verl_env, verl_overrides

pytestmark = pytest.mark.verl

verl = import_or_skip("verl")
try:
    import verl.trainer.ppo.ray_trainer as ray_trainer
except ImportError as err:  # pragma: no cover - depends on the environment
    skip_or_fail_in_ci(f"verl.trainer.ppo.ray_trainer does not import: {err}", module_level=True)

from verl import DataProto  # noqa: E402

from acerl.verl_backend import plugin  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [REPO / "config" / f for f in ("config.yaml", "paper.yaml", "paper_methods.yaml")]
METHODS = ("psr", "nsr", "w_reinforce", "clip_cov", "kl_cov")


@pytest.fixture(scope="module")
def methods_cfg():
    return load_config(CONFIGS)


@pytest.mark.parametrize("method", METHODS)
def test_each_method_composes_and_types_in_verl(
    methods_cfg, verl_base_config, apply_overrides, method: str
) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config.actor import PolicyLossConfig

    cfg = apply_overrides(
        verl_base_config, verl_overrides(methods_cfg, Run("qwen25_math_7b", method, 0), "/w")
    )
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    OmegaConf.resolve(cfg)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    typed_loss = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.policy_loss, PolicyLossConfig)
    loss = methods_cfg.families[methods_cfg.methods[method].family].policy_loss
    assert typed_loss.loss_mode == loss.name
    for key, value in loss.kwargs().items():  # verl's own loss gets the config's keys
        assert getattr(typed_loss, key) == value, key
    est = methods_cfg.methods[method].estimator
    assert algo.adv_estimator == est.name
    if method in ("psr", "nsr", "w_reinforce"):  # through the plugin, with the estimator's own keys
        assert isinstance(algo, plugin.AceAlgoConfig)
        params = {k: v for k, v in est.kwargs().items() if k != "norm_by_std"}
        assert dict(algo.estimator_params or {}) == params
        assert method in plugin.plugin_estimators()


def test_clip_cov_and_kl_cov_are_verls_own_losses(methods_cfg) -> None:
    from verl.trainer.ppo import core_algos

    for method in ("clip_cov", "kl_cov"):
        overrides = verl_overrides(methods_cfg, Run("qwen3_8b_base", method, 0), "/w")
        assert f"actor_rollout_ref.actor.policy_loss.loss_mode={method}" in overrides
        assert core_algos.get_policy_loss_fn(method).__module__ == "verl.trainer.ppo.core_algos"


def test_a_policy_loss_verl_lacks_is_a_one_line_error(methods_cfg) -> None:
    from acerl.config import register_policy_loss_params
    from acerl.config.schema import POLICY_LOSSES, PolicyLossParams

    class OnlyLocal(PolicyLossParams):
        name: str = "only_local_loss"

    register_policy_loss_params(OnlyLocal)
    try:
        cfg = load_config(CONFIGS, ["families.grpo_kl_cov.policy_loss={name: only_local_loss}"])
        with pytest.raises(ConfigError, match="policy loss 'only_local_loss' has no verl counterpart"):
            verl_overrides(cfg, Run("qwen25_math_7b", "kl_cov", 0), "/w")
    finally:
        POLICY_LOSSES.pop("only_local_loss")


def test_the_configs_plugins_load_first_in_every_verl_process(methods_cfg) -> None:
    cfg = methods_cfg.model_copy(update={"plugins": ["my_lab.methods"]})
    env = verl_env(cfg, Run("qwen25_math_7b", "psr", 0), "/w")
    assert env["VERL_USE_EXTERNAL_MODULES"].split(",")[:2] == ["my_lab.methods", "acerl.verl_backend.plugin"]


def _batch(seed: int) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    bs, resp_len = 24, 9
    lengths = torch.randint(1, resp_len + 1, (bs,), generator=g)
    mask = (torch.arange(resp_len)[None, :] < lengths[:, None]).to(torch.int64)
    scores = torch.randint(0, 2, (bs,), generator=g).float()
    token_rewards = torch.zeros(bs, resp_len)
    token_rewards[torch.arange(bs), lengths - 1] = scores
    old = -torch.rand(bs, resp_len, generator=g) * 3
    uids = np.array([f"uid-{i // 6}" for i in range(bs)], dtype=object)
    return DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask, "old_log_probs": old},
        non_tensors={"uid": uids, "acc": (scores > 0).numpy()},
    )


@pytest.mark.parametrize(
    ("method", "params"), [("psr", {}), ("nsr", {}), ("w_reinforce", {"positive_weight": 0.3})]
)
def test_the_shim_runs_the_registered_estimator_and_drops_the_excluded_rows(
    method: str, params: dict
) -> None:
    data = _batch(seed=len(method))
    mask = data.batch["response_mask"].clone()
    correct = torch.from_numpy(data.non_tensor_batch["acc"].astype(bool))
    config = OmegaConf.create(
        {"adv_estimator": method, "norm_adv_by_std_in_grpo": True, "estimator_params": params or None}
    )
    out = ray_trainer.compute_advantage(data, adv_estimator=method, config=config)
    local = ADVANTAGE_ESTIMATORS.get(method)(
        data.batch["token_level_rewards"].sum(-1), torch.zeros(24, dtype=torch.long), None, None, mask,
        correct=correct, **params,
    )  # fmt: skip
    torch.testing.assert_close(out.batch["advantages"], local.token_level(mask), rtol=0, atol=0)
    kept = {"psr": correct, "nsr": ~correct, "w_reinforce": torch.ones_like(correct)}[method]
    assert torch.equal(out.batch["response_mask"], mask * kept[:, None])


def test_estimator_params_are_validated_by_the_estimators_own_class() -> None:
    config = OmegaConf.create(
        {"adv_estimator": "w_reinforce", "norm_adv_by_std_in_grpo": True, "estimator_params": {"lam": 0.1}}
    )
    with pytest.raises(ValueError, match="algorithm.estimator_params.lam: Extra inputs"):
        ray_trainer.compute_advantage(_batch(0), adv_estimator="w_reinforce", config=config)
