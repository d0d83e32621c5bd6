"""NSR through verl 0.9.1's own trainer loop on CPU (the stand-ins of :mod:`fakes.verl_cpu_loop`): ``acerl train`` ->
``main_ppo`` -> the ACE plugin's path for a registered estimator, 3 steps. Every step trains, and the
advantages verl's actor received are NSR's (-1 on incorrect rollouts, 0 elsewhere: none positive).

This run also keeps two of the product's settings the other runs of the loop replace (docs/verl.md): verl's
default bf16 mixed precision (bf16 parameters and CPU autocast, fp32 reduce) instead of fp32, and the deletion of
the checkpoints after the export (``compute.keep_verl_checkpoints: false``). No assertion of the loop's fp32 runs
reads this run."""

from __future__ import annotations

import importlib.util
import json
import math
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

from acerl.verl_backend.sync_gap import GapLimits  # noqa: E402

NSR = {
    "methods": {"nsr": {"display": "NSR", "family": "grpo", "estimator": {"name": "nsr"}}},
    "study": {"main": {"models": ["tiny"], "methods": ["grpo", "nsr"], "seeds": [0], "include_base": True}},
}


def test_nsr_trains_three_steps_through_main_ppo(tmp_path: Path, prepared_study: Path) -> None:
    root = tmp_path
    verl_cpu_loop.write_overlay(root)
    (root / "nsr.yaml").write_text(yaml.safe_dump(NSR))
    (root / "delete.yaml").write_text(yaml.safe_dump(verl_cpu_loop.DELETE_CHECKPOINTS))
    shutil.copytree(prepared_study / "data", root / "data")
    shutil.copytree(prepared_study / "models" / "base", root / "models" / "base")
    env = {**os.environ, **verl_cpu_loop.cpu_env(root, bf16=True), "HF_HUB_OFFLINE": "1"}
    configs = [REPO / "config" / "test.yaml", root / "verl_cpu.yaml", root / "nsr.yaml", root / "delete.yaml"]
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
    _check_bf16(run, records)
    _check_checkpoints_deleted(cmd, env, root, run)
    _check_export_evaluates(configs, root)


def _check_bf16(run: Path, records: list[dict]) -> None:
    """verl trained in bf16 (no fp32 override in its command: its default, bf16 parameters and autocast with
    fp32 reduce, as on a GPU), and every loss, log-prob statistic and gradient it logged is finite. The fp32
    rollout server's probabilities differ from the bf16 actor's by bf16's rounding: far above the fp32 runs'
    gap (about 2e-7 mean, 1.4e-6 max), which shows the actor's forward did run in bf16."""
    argv = json.loads((run / "verl_command.json").read_text())["argv"]
    assert "verl.trainer.main_ppo" in argv and not [a for a in argv if "mixed_precision" in a], argv
    keys = ("actor/pg_loss", "actor/loss", "actor/entropy", "actor/ppo_kl", "actor/grad_norm")
    keys += ("training/rollout_probs_diff_mean", "training/rollout_probs_diff_max")
    for rec in records:
        for key in keys:
            value = rec.get(key)
            assert isinstance(value, float) and math.isfinite(value), (rec["step"], key, value)
    gaps = [rec["training/rollout_probs_diff_mean"] for rec in records]
    assert all(g > 1e-5 for g in gaps), gaps  # bf16's rounding, not fp32's
    assert all(g < GapLimits().limit for g in gaps), gaps  # ... and within what the canary allows
    assert any(rec["actor/grad_norm"] > 0 for rec in records)
    # step 1's update starts from the weights the old log-probs came from: bf16 puts the PPO ratio's KL near 0
    # (6e-6 here; 6e-10 in fp32), the check docs/verl.md names for a first GPU run
    assert abs(records[0]["actor/ppo_kl"]) < 1e-4, records[0]["actor/ppo_kl"]


def _check_checkpoints_deleted(cmd: list[str], env: dict[str, str], root: Path, run: Path) -> None:
    """``keep_verl_checkpoints: false`` (the product's default): once ``final/`` is exported the run's verl
    checkpoints are gone, and ``acerl train`` again finds the run finished without them (no main_ppo)."""
    from acerl.config import Run
    from acerl.pipeline import paths

    r = Run("tiny", "nsr", 0)
    assert paths.checkpoints_dir(root, r) == run / "checkpoints"
    assert not (run / "checkpoints").exists(), sorted(p.name for p in (run / "checkpoints").iterdir())
    assert not paths.verl_snapshot_dir(root, r).exists()
    final = run / "final"
    assert (final / "config.json").is_file() and (final / "model.safetensors").is_file()
    before = {p.name: p.stat().st_mtime_ns for p in final.iterdir()}
    rerun = root / "train_nsr_rerun.log"
    rc = run_watched(cmd, cwd=REPO, env=env, log=rerun, watched=[root / "runs"])
    assert rc == 0, rerun.read_text(errors="replace")[-6000:]
    text = rerun.read_text(errors="replace")
    assert "nothing to do" in text and "verl.trainer.main_ppo" not in text, text[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in final.iterdir()} == before
    assert not (run / "checkpoints").exists()


def _check_export_evaluates(configs: list[Path], root: Path) -> None:
    """The bf16 run's export goes through the pipeline's sampling, grading and Pass@k stages."""
    from acerl.config import Run, load_config
    from acerl.evaluate.pipeline import grade_run, passk_run, sample_run
    from acerl.pipeline.io import read_jsonl

    cfg = load_config([REPO / "config" / "config.yaml", *configs])
    run = Run("tiny", "nsr", 0)
    out = sample_run(cfg, run, "synth_easy", root, progress=False)
    rows = list(read_jsonl(out, required=("id", "completions")))
    assert rows and all(len(r["completions"]) == cfg.evaluation.n for r in rows)
    grade_run(cfg, run, "synth_easy", root)
    record = json.loads(passk_run(cfg, run, "synth_easy", root).read_text())
    assert record["method"] == "nsr" and sorted(map(int, record["pass_at_k"])) == list(cfg.evaluation.ks)
    assert all(0.0 <= float(v) <= 1.0 for v in record["pass_at_k"].values()), record
