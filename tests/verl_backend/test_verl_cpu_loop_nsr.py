"""NSR through verl 0.9.1's own trainer loop on CPU (the stand-ins of :mod:`fakes.verl_cpu_loop`): ``acerl train`` ->
``main_ppo`` -> the ACE plugin's path for a registered estimator, 3 steps. Every step trains, and the
advantages verl's actor received are NSR's (-1 on incorrect rollouts, 0 elsewhere: none positive)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

pytestmark = pytest.mark.verl_loop

if importlib.util.find_spec("verl") is None or importlib.util.find_spec("transfer_queue") is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("verl 0.9.1 and TransferQueue must be installed in CI (pip install -e .[verl])")
    pytest.skip("verl / TransferQueue not installed (pip install -e .[verl])", allow_module_level=True)

from fakes import verl_cpu_loop  # noqa: E402
from support.watchdog import run_watched  # noqa: E402

NSR = {
    "methods": {"nsr": {"display": "NSR", "family": "grpo", "estimator": {"name": "nsr"}}},
    "study": {"main": {"models": ["tiny"], "methods": ["grpo", "nsr"], "seeds": [0], "include_base": True}},
}


def test_nsr_trains_three_steps_through_main_ppo(tmp_path: Path, prepared_study: Path) -> None:
    root = tmp_path
    verl_cpu_loop.write_overlay(root)
    (root / "nsr.yaml").write_text(yaml.safe_dump(NSR))
    shutil.copytree(prepared_study / "data", root / "data")
    shutil.copytree(prepared_study / "models" / "base", root / "models" / "base")
    env = {**os.environ, **verl_cpu_loop.cpu_env(root), "HF_HUB_OFFLINE": "1"}
    configs = [REPO / "config" / "test.yaml", root / "verl_cpu.yaml", root / "nsr.yaml"]
    cmd = [sys.executable, "-m", "acerl.cli", "train", *(a for c in configs for a in ("--config", str(c)))]
    cmd += ["--root", str(root), "--model", "tiny", "--method", "nsr", "--seed", "0"]
    log = root / "train_nsr.log"
    run = root / "runs" / "tiny" / "nsr" / "seed0"
    rc = run_watched(cmd, cwd=REPO, env=env, log=log, watched=[root / "runs", root / "cpu_rollout.jsonl"])
    assert rc == 0, log.read_text(errors="replace")[-6000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    for rec in records:
        assert rec["critic/advantages/max"] <= 0.0, rec  # NSR: no positive advantage
        assert rec["critic/advantages/min"] == pytest.approx(-1.0), rec  # -1 on the incorrect rollouts
    assert (run / "final" / "config.json").is_file()
