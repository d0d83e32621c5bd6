"""What verl's FSDP worker needs from the training environment, under the launcher's settings: the attention
implementation and padding mode the launcher sets (and its preflight for flash-attention 2), and verl's trl probe
kept away from trl >= 1.0 by the ACE plugin (docs/verl.md, "Attention" and "trl"). The lock side is
``tests/test_locks.py::test_gpu_lock_builds_verls_workers_with_the_launchers_settings``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from acerl.config import ConfigError, Run
from acerl.verl_backend.launcher import check_attention, verl_overrides

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]


def _rendered(overrides: list[str], key: str) -> str:
    (value,) = [ov.split("=", 1)[1] for ov in overrides if ov.split("=", 1)[0].lstrip("+") == key]
    return value


def _with_compute(cfg, **keys):
    return cfg.model_copy(update={"compute": cfg.compute.model_copy(update=keys)})


def test_launcher_sets_attention_and_padding_explicitly(paper_cfg) -> None:
    overrides = verl_overrides(paper_cfg, Run("qwen25_math_7b", "ace_dapo", 0), "/work")
    assert _rendered(overrides, "actor_rollout_ref.model.override_config.attn_implementation") == "sdpa"
    assert _rendered(overrides, "actor_rollout_ref.model.use_remove_padding") == "True"
    cfg = _with_compute(paper_cfg, verl_attention="flash_attention_2", verl_remove_padding=False)
    overrides = verl_overrides(cfg, Run("qwen25_math_7b", "ace_dapo", 0), "/work")
    key = "actor_rollout_ref.model.override_config.attn_implementation"
    assert _rendered(overrides, key) == "flash_attention_2"
    assert _rendered(overrides, "actor_rollout_ref.model.use_remove_padding") == "False"


def test_preflight_refuses_flash_attention_without_flash_attn(paper_cfg) -> None:
    cfg = _with_compute(paper_cfg, verl_attention="flash_attention_2")
    with pytest.raises(ConfigError) as err:
        check_attention(cfg, find_spec=lambda name: None)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("compute.verl_attention=flash_attention_2 but flash_attn is not importable")
    assert "compute.verl_attention: sdpa" in message
    check_attention(cfg, find_spec=lambda name: object())  # flash_attn importable: accepted
    check_attention(paper_cfg, find_spec=lambda name: None)  # sdpa needs nothing


def test_trl_value_head_rule() -> None:
    from acerl.verl_backend.plugin import trl_has_value_head

    assert trl_has_value_head("0.19.1") and trl_has_value_head("0.9.6")
    assert not trl_has_value_head("1.0.0") and not trl_has_value_head("1.16.0")
    assert not trl_has_value_head(None)


def _trl_version() -> str | None:
    try:
        return version("trl")
    except PackageNotFoundError:
        return None


def test_verls_monkey_patch_builds_with_the_installed_trl() -> None:
    """In a fresh process loading the plugin as verl does (``VERL_USE_EXTERNAL_MODULES``), verl 0.9.1's
    ``apply_monkey_patch`` -- what every FSDP worker runs on its model -- succeeds with the installed trl
    (1.16 in .venv, where verl's own probe would import a class trl 1.x removed)."""
    trl = _trl_version()
    if trl is None or int(trl.split(".")[0]) < 1:
        pytest.skip(f"needs trl >= 1.0 installed to show the probe kept out (found {trl})")
    code = textwrap.dedent(
        """
        import verl  # imports VERL_USE_EXTERNAL_MODULES: the ACE plugin
        from transformers import LlamaConfig, LlamaForCausalLM
        from verl.models.transformers.monkey_patch import apply_monkey_patch

        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2, attn_implementation="sdpa")
        apply_monkey_patch(LlamaForCausalLM(config), use_remove_padding=True)
        print("patched")
        """
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "acerl.verl_backend.plugin"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "patched"
