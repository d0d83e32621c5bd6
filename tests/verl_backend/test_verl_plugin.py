"""The ACE plugin inside verl 0.9.1 (acerl.verl_backend.plugin): registry, compute_advantage shim, config.

Imports verl once for the module (about 10-20 s); the fresh-process check runs verl's own plugin loading.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from support.ci_inputs import import_or_skip, skip_or_fail_in_ci

pytestmark = pytest.mark.verl

verl = import_or_skip("verl")
try:  # ray_trainer needs verl[verl-core] pieces (cachetools, uvicorn, fastapi) that the base wheel omits
    import verl.trainer.ppo.ray_trainer as ray_trainer
except ImportError as err:  # pragma: no cover - depends on the environment
    skip_or_fail_in_ci(f"verl.trainer.ppo.ray_trainer does not import: {err}", module_level=True)
try:  # the V1 trainer's utils imported compute_advantage by name before the plugin (needs TransferQueue)
    import verl.trainer.ppo.v1.utils as v1_utils
except ImportError:  # pragma: no cover - depends on the environment
    v1_utils = None

from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from acerl.algos.advantages import ace_estimator, as_group_ids, grpo_advantages  # noqa: E402
from acerl.verl_backend import plugin  # noqa: E402


def _batch(
    seed: int = 0, groups: int = 4, group_size: int = 6, resp_len: int = 9, signed: bool = False
) -> DataProto:
    """A verl batch at advantage time: rewards on the last response token, log-probs, ragged masks, uids."""
    g = torch.Generator().manual_seed(seed)
    bs = groups * group_size
    lengths = torch.randint(1, resp_len + 1, (bs,), generator=g)
    mask = (torch.arange(resp_len)[None, :] < lengths[:, None]).to(torch.int64)
    scores = torch.randint(0, 2, (bs,), generator=g).float()
    if signed:
        scores = scores * 2 - 1
    token_rewards = torch.zeros(bs, resp_len)
    token_rewards[torch.arange(bs), lengths - 1] = scores
    old = -torch.rand(bs, resp_len, generator=g) * 3
    ref = old + torch.randn(bs, resp_len, generator=g) * 0.5
    old[mask == 0] = float("nan")  # padding must not leak
    uids = np.array([f"uid-{i // group_size}" for i in range(bs)], dtype=object)
    acc = (
        scores > 0
    ).numpy()  # the grader's verdict (reward_extra_info["acc"], merged by the legacy trainer)
    perm = torch.randperm(bs, generator=g)  # groups interleaved, as after verl's balance_batch
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": token_rewards[perm],
            "response_mask": mask[perm],
            "old_log_probs": old[perm],
            "ref_log_prob": ref[perm],
        },
        non_tensors={"uid": uids[perm.numpy()], "acc": acc[perm.numpy()]},
    )


def _algo_config(**ace):
    return OmegaConf.create(
        {"adv_estimator": "ace", "norm_adv_by_std_in_grpo": True, **({"ace": ace} if ace else {})}
    )


def test_estimator_registered_and_shim_installed() -> None:
    """Plugin imported after ray_trainer and v1.utils: install() patches both (the by-name import too)."""
    assert core_algos.get_adv_estimator_fn("ace") is plugin.compute_ace_outcome_advantage
    assert plugin.shim_installed()
    assert getattr(ray_trainer.compute_advantage, "__wrapped__", None) is not None
    if v1_utils is None:
        skip_or_fail_in_ci("verl.trainer.ppo.v1.utils does not import (TransferQueue missing)")
    assert v1_utils.compute_advantage is ray_trainer.compute_advantage
    plugin.install()  # idempotent: no double wrapping
    assert not hasattr(ray_trainer.compute_advantage.__wrapped__, "__wrapped__")


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize(
    "ace",
    [{}, {"alpha": 2.0, "modulation": "relu", "length_normalize": False, "amplify": "negative_advantage"}],
)
def test_shim_matches_ace_estimator(signed: bool, ace: dict) -> None:
    data = _batch(seed=1 + signed, signed=signed)
    expected_inputs = data.batch.clone()
    uids = data.non_tensor_batch["uid"].copy()
    acc = torch.from_numpy(data.non_tensor_batch["acc"].astype(bool))
    out = ray_trainer.compute_advantage(data, adv_estimator="ace", config=_algo_config(**ace))
    params = {"alpha": 1.0, "modulation": "softplus", "length_normalize": True, "amplify": "incorrect", **ace}
    mask = expected_inputs["response_mask"]
    seq = ace_estimator(
        expected_inputs["token_level_rewards"].sum(-1),
        as_group_ids(uids),
        expected_inputs["old_log_probs"],
        expected_inputs["ref_log_prob"],
        mask,
        correct=acc,
        **params,
    ).advantages
    expected = seq[:, None] * mask
    torch.testing.assert_close(out.batch["advantages"], expected, rtol=0, atol=0)
    torch.testing.assert_close(out.batch["returns"], expected, rtol=0, atol=0)
    assert torch.isfinite(out.batch["advantages"]).all()
    # ACE only amplifies negatives: positives equal GRPO, negatives at least as large in magnitude
    grpo = grpo_advantages(expected_inputs["token_level_rewards"].sum(-1), as_group_ids(uids))
    torch.testing.assert_close(seq[grpo >= 0], grpo[grpo >= 0])
    assert (seq[grpo < 0] <= grpo[grpo < 0] + 1e-6).all()


def test_grpo_path_unchanged() -> None:
    """GRPO through the shim is verl's own code path, bit for bit."""
    a, b = _batch(seed=5), _batch(seed=5)
    cfg = OmegaConf.create({"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True})
    through_shim = ray_trainer.compute_advantage(a, adv_estimator="grpo", config=cfg)
    original = ray_trainer.compute_advantage.__wrapped__(b, adv_estimator="grpo", config=cfg)
    assert torch.equal(through_shim.batch["advantages"], original.batch["advantages"])
    direct, _ = core_algos.compute_grpo_outcome_advantage(
        _batch(seed=5).batch["token_level_rewards"],
        _batch(seed=5).batch["response_mask"],
        _batch(seed=5).non_tensor_batch["uid"],
    )
    assert torch.equal(through_shim.batch["advantages"], direct)


def test_alpha_zero_equals_verl_grpo() -> None:
    a, b = _batch(seed=7), _batch(seed=7)
    ace = ray_trainer.compute_advantage(a, adv_estimator="ace", config=_algo_config(alpha=0.0))
    grpo = ray_trainer.compute_advantage(b, adv_estimator="grpo", config=OmegaConf.create({}))
    torch.testing.assert_close(ace.batch["advantages"], grpo.batch["advantages"], rtol=1e-6, atol=1e-6)


def test_token_granularity_and_std_switch() -> None:
    data = _batch(seed=3)
    out = ray_trainer.compute_advantage(
        data, adv_estimator="ace", config=_algo_config(granularity="token").copy()
    ).batch["advantages"]
    assert out.shape == data.batch["response_mask"].shape
    assert (out[data.batch["response_mask"] == 0] == 0).all()
    cfg = _algo_config()
    cfg.norm_adv_by_std_in_grpo = False
    unnormalised = ray_trainer.compute_advantage(_batch(seed=3), adv_estimator="ace", config=cfg)
    assert not torch.allclose(
        unnormalised.batch["advantages"],
        ray_trainer.compute_advantage(_batch(seed=3), adv_estimator="ace", config=_algo_config()).batch[
            "advantages"
        ],
    )


def _overlong_group() -> DataProto:
    """One DAPO group after verl's ``dapo`` reward manager: two correct short answers (+1), a correct answer
    whose overlong penalty took its reward to 0 (below the group mean 0.25: A < 0), one wrong answer (-1)."""
    scores = torch.tensor([1.0, 1.0, 0.0, -1.0])
    mask = torch.ones(4, 5, dtype=torch.int64)
    rewards = torch.zeros(4, 5)
    rewards[:, -1] = scores
    old = torch.full((4, 5), -0.5)
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": mask,
            "old_log_probs": old,
            "ref_log_prob": old - 1,
        },
        non_tensors={"uid": np.array(["g"] * 4, dtype=object)},
    )


def test_ace_amplifies_only_incorrect_rollouts_with_verl_acc() -> None:
    """Defect 7: a correct but overlong rollout with A < 0 is not amplified under ``amplify=incorrect`` (the
    verdict comes from verl's ``acc``: legacy trainer in ``non_tensor_batch``, V1 through the step context);
    ``amplify=negative_advantage`` amplifies it. ACE's summaries reach the step-metrics dict."""
    acc = np.array([True, True, True, False])
    grpo = grpo_advantages(torch.tensor([1.0, 1.0, 0.0, -1.0]), torch.zeros(4, dtype=torch.long))
    assert grpo[2] < 0  # the overlong correct answer is below its group's mean

    legacy = _overlong_group()
    legacy.non_tensor_batch["acc"] = acc
    out_legacy = ray_trainer.compute_advantage(legacy, adv_estimator="ace", config=_algo_config())
    metrics: dict = {}
    with plugin.ace_step_context(acc, metrics):
        out_v1 = ray_trainer.compute_advantage(_overlong_group(), adv_estimator="ace", config=_algo_config())
    for out in (out_legacy, out_v1):
        adv = out.batch["advantages"][:, 0]
        torch.testing.assert_close(adv[:3], grpo[:3])  # correct rollouts: GRPO's advantage
        assert adv[3] < grpo[3]  # the incorrect one is amplified (c = 1 > 0: multiplier 1 + softplus(1))
    assert metrics["ace/negative_frac"] == pytest.approx(0.5)
    assert set(metrics) >= {"ace/confidence_mean_neg", "ace/multiplier_mean_neg"}

    with plugin.ace_step_context(acc, None):
        neg = ray_trainer.compute_advantage(
            _overlong_group(), adv_estimator="ace", config=_algo_config(amplify="negative_advantage")
        ).batch["advantages"][:, 0]
    assert neg[2] < grpo[2] and neg[3] < grpo[3]


def test_missing_verdicts_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="correct"):
        ray_trainer.compute_advantage(_overlong_group(), adv_estimator="ace", config=_algo_config())
    with pytest.raises(ValueError, match="3 verdicts"), plugin.ace_step_context([True, False, True], None):
        ray_trainer.compute_advantage(_overlong_group(), adv_estimator="ace", config=_algo_config())


def test_correct_from_extra_fields() -> None:
    """V1 keeps ``reward_extra_info`` inside each row's ``extra_fields`` (plain dict or tensordict wrapper)."""
    from tensordict import NonTensorData

    rows = [
        {"reward_extra_info": {"acc": True, "score": 1.0}},
        NonTensorData({"reward_extra_info": {"acc": False}}),
    ]
    assert plugin.correct_from_extra_fields(rows, ["a_0_0", "a_1_0"]).tolist() == [True, False]
    with pytest.raises(ValueError, match=r"rollout 'b_1_0' has no reward_extra_info\['acc'\]"):
        plugin.correct_from_extra_fields([rows[0], {"reward_extra_info": {}}], ["b_0_0", "b_1_0"])


def test_ace_config_amplify() -> None:
    assert plugin.AceConfig().amplify == "incorrect"
    with pytest.raises(ValueError, match="algorithm.ace.amplify: .*'incorrect' or 'negative_advantage'"):
        plugin.AceConfig(amplify="negative")


def test_v1_trainer_compute_advantage_wrapped() -> None:
    """The V1 trainer's ``PPOTrainer._compute_advantage`` is wrapped once (idempotent install)."""
    trainer_base = import_or_skip("verl.trainer.ppo.v1.trainer_base")
    method = trainer_base.PPOTrainer.__dict__["_compute_advantage"]
    assert getattr(method, "_acerl_logprob_shim", False)
    plugin.install()
    assert trainer_base.PPOTrainer.__dict__["_compute_advantage"] is method
    assert not hasattr(method.__wrapped__, "__wrapped__")


def test_missing_reference_logprobs_is_a_clear_error() -> None:
    data = _batch()
    data.batch.pop("ref_log_prob")
    with pytest.raises(ValueError, match="use_kl_loss=True"):
        ray_trainer.compute_advantage(data, adv_estimator="ace", config=_algo_config())
    with pytest.raises(ValueError, match="VERL_USE_EXTERNAL_MODULES"):
        plugin.compute_ace_outcome_advantage(
            _batch().batch["token_level_rewards"],
            _batch().batch["response_mask"],
            _batch().non_tensor_batch["uid"],
        )


def test_ace_config_validation() -> None:
    assert plugin.ace_config_from(None) == plugin.AceConfig()
    assert plugin.ace_config_from(_algo_config(alpha=0.5)).alpha == 0.5
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['alpah'\]"):
        plugin.ace_config_from(_algo_config(alpah=1.0))
    with pytest.raises(ValueError, match="modulation"):
        plugin.AceConfig(modulation="tanh")
    with pytest.raises(ValueError, match="alpha"):
        plugin.AceConfig(alpha=-1.0)


def test_import_hook_patches_ray_trainer_on_first_import() -> None:
    """ray_trainer imported after the plugin (the normal order in verl's processes) gets the shim at once, and
    a module importing ``compute_advantage`` by name afterwards gets the shim too."""
    saved = sys.modules.pop(plugin.RAY_TRAINER_MODULE)
    try:
        plugin.install()  # ray_trainer not imported: installs the import hook
        assert any(isinstance(f, plugin._PatchOnImport) for f in sys.meta_path)
        fresh = importlib.import_module(plugin.RAY_TRAINER_MODULE)
        assert fresh is not saved
        assert getattr(fresh.compute_advantage, "_acerl_logprob_shim", False)
        by_name = __import__(plugin.RAY_TRAINER_MODULE, fromlist=["compute_advantage"]).compute_advantage
        assert by_name is fresh.compute_advantage  # what `from ... import compute_advantage` binds
    finally:
        sys.modules[plugin.RAY_TRAINER_MODULE] = saved
        verl.trainer.ppo.ray_trainer = saved


def test_fresh_process_loads_plugin_through_verl() -> None:
    """``VERL_USE_EXTERNAL_MODULES`` makes ``import verl`` import the plugin: ACE registered, import hook set."""
    code = textwrap.dedent(
        """
        import sys
        import verl
        from verl.trainer.ppo import core_algos
        import acerl.verl_backend.plugin as plugin
        assert core_algos.get_adv_estimator_fn("ace") is plugin.compute_ace_outcome_advantage
        assert "verl.trainer.ppo.ray_trainer" not in sys.modules  # nothing heavy imported eagerly
        assert any(isinstance(f, plugin._PatchOnImport) for f in sys.meta_path)
        print("ok")
        """
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "acerl.verl_backend.plugin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_algorithm_ace_is_the_configs_ace_estimator() -> None:
    """ACE's parameters are declared once (``acerl.config.AceEstimator``): ``algorithm.ace`` has its keys less
    ``norm_by_std`` (verl's ``norm_adv_by_std_in_grpo``) with its defaults, and the launcher writes each of them."""
    import dataclasses
    from pathlib import Path

    from acerl.config import AceEstimator, Run, load_config
    from acerl.verl_backend.launcher import verl_overrides

    expected = {k: v for k, v in AceEstimator().kwargs().items() if k != "norm_by_std"}
    keys = [f.name for f in dataclasses.fields(plugin.AceConfig) if not f.name.startswith("_")]
    assert {k: getattr(plugin.AceConfig(), k) for k in keys} == expected
    repo = Path(__file__).resolve().parents[2]
    cfg = load_config([repo / "config" / "config.yaml", repo / "config" / "paper.yaml"])
    overrides = verl_overrides(cfg, Run("qwen25_math_7b", "ace_grpo", 0), "study")
    written = [
        o.split("=")[0].removeprefix("+algorithm.ace.") for o in overrides if o.startswith("+algorithm.ace.")
    ]
    assert written == list(expected)
