"""The grid's cost before it is submitted (acerl.verl_backend.estimate): one cell computed by hand."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from acerl.cli import main
from acerl.config import ConfigError, Run
from acerl.verl_backend.estimate import (
    Assumptions,
    ModelSize,
    apply_assumptions,
    estimate_grid,
    run_disk_gb,
    run_gpu_hours,
)

REPO = Path(__file__).resolve().parents[2]
QWEN25 = 7.62e9  # parameters of Qwen/Qwen2.5-Math-7B
QWEN25_SIZE = ModelSize(QWEN25, 28, 28 * 128)  # its config.json: 28 layers, 28 heads of 128


def _with_attention(cfg, implementation: str):
    return cfg.model_copy(
        update={"compute": cfg.compute.model_copy(update={"verl_attention": implementation})}
    )


def test_one_cell_by_hand(paper_cfg) -> None:
    """Qwen2.5-Math-7B (Table 5: 2048 prompts x 8 rollouts, 3000-token responses, 80 steps, mini-batches of 1024
    prompts, 8 GPUs), written out, attention (sdpa over packed micro-batches) included."""
    a = Assumptions()
    assert (a.mfu, a.peak_tflops, a.vllm_tokens_per_gpu_s) == (0.35, 989.0, 5000.0)
    assert (a.response_fill, a.prompt_tokens, a.usable_group_fraction, a.overhead) == (0.35, 250.0, 0.6, 1.1)
    assert paper_cfg.compute.verl_attention == "sdpa"
    sequences = 2048 * 8
    response = 0.35 * 3000  # 1050 tokens
    generation = sequences * response / 5000  # 3440.64 GPU-s
    # the update packs a mini-batch's 1024 x 8 x 1300 / 8 GPUs = 1,331,200 tokens per GPU into ceil(/ 8048) = 166
    # micro-batches of 8019.3 tokens; the log-prob passes the step's 2,662,400 into ceil(/ 12072) = 221 of 12047.1
    update_packed, logprob_packed = 1_331_200 / 166, 2_662_400 / 221
    # sdpa: every query-key pair of the micro-batch, QK^T and AV (2 x 2 x 3584 FLOPs per pair and layer)
    update_attn = 4 * 28 * 3584 * update_packed  # 3.22e9 FLOPs per token, 21% of 2 x 7.62e9
    logprob_attn = 4 * 28 * 3584 * logprob_packed  # 4.84e9, 32%
    per_token = 6 * (QWEN25 + update_attn / 2) + (2 + 2) * (
        QWEN25 + logprob_attn / 2
    )  # update; old, reference
    training = per_token * sequences * (250 + 1050) / (0.35 * 989e12)
    grpo = 80 * (generation + training) * 1.1 / 3600
    assert grpo == pytest.approx(227.8, abs=0.05)  # (3440.6 + 5878.2 GPU-s) x 80 x 1.1
    run = Run("qwen25_math_7b", "grpo", 1)
    assert run_gpu_hours(paper_cfg, run, QWEN25_SIZE, a) == pytest.approx(grpo, rel=1e-9)
    # flash_attention_2 (varlen): each 1300-token sequence's causal half, 2 x 28 x 3584 x 1300 per token
    flash = 2 * 28 * 3584 * 1300
    per_token = 6 * (QWEN25 + flash / 2) + 4 * (QWEN25 + flash / 2)
    fa2 = 80 * (generation + per_token * sequences * 1300 / (0.35 * 989e12)) * 1.1 / 3600
    assert fa2 == pytest.approx(200.7, abs=0.05)
    assert run_gpu_hours(
        _with_attention(paper_cfg, "flash_attention_2"), run, QWEN25_SIZE, a
    ) == pytest.approx(fa2, rel=1e-9)
    assert run_gpu_hours(paper_cfg, run, QWEN25_SIZE, a, "flash_attention_2") == pytest.approx(fa2, rel=1e-9)
    # DAPO: dynamic sampling throws away the 40% of groups without mixed rewards: 1 / 0.6 generation
    dapo = 80 * (generation / 0.6 + training) * 1.1 / 3600
    assert run_gpu_hours(paper_cfg, Run("qwen25_math_7b", "dapo", 1), QWEN25_SIZE, a) == pytest.approx(
        dapo, rel=1e-9
    )

    cells, evals = estimate_grid(paper_cfg, a)
    cell = next(c for c in cells if (c.model, c.method) == ("qwen25_math_7b", "grpo"))
    assert (cell.runs, cell.steps) == (5, 80) and cell.gpu_hours == pytest.approx(5 * grpo, rel=1e-9)
    assert cell.low < cell.gpu_hours < cell.high
    assert cell.other_gpu_hours == pytest.approx(5 * fa2, rel=1e-9)  # the same cell with flash_attention_2
    # on one 8-GPU node: 28.5 h, one 54-hour job; a kill loses at most save_freq - 1 = 9 of the 80 steps
    assert cell.wall_hours == pytest.approx(grpo / 8, rel=1e-9) and cell.jobs == 1
    assert cell.kill_gpu_hours == pytest.approx(9 * grpo / 80, rel=1e-9)
    assert sum(c.runs for c in cells) == 69


def test_disk_by_hand(paper_cfg) -> None:
    """The diagnostics run (8 snapshot steps after 0): 3 checkpoints of 12 B/param at the peak (keep 2 + the one
    a resumed attempt saves before pruning), 8 fp32 snapshots, 9 bf16 exports (final + 8 steps)."""
    peak, left = run_disk_gb(paper_cfg, Run("qwen25_math_7b", "ace_grpo", 0), QWEN25)
    assert peak == pytest.approx((3 * 12 + 8 * 4 + 9 * 2) * QWEN25 / 1e9)  # 655 GB
    assert left == pytest.approx(9 * 2 * QWEN25 / 1e9)
    peak, left = run_disk_gb(paper_cfg, Run("qwen25_math_7b", "ace_grpo", 1), QWEN25)
    assert (peak, left) == pytest.approx((38 * QWEN25 / 1e9, 2 * QWEN25 / 1e9))
    kept = paper_cfg.model_copy(
        update={"compute": paper_cfg.compute.model_copy(update={"keep_verl_checkpoints": True})}
    )
    assert run_disk_gb(kept, Run("qwen25_math_7b", "ace_grpo", 1), QWEN25)[1] == pytest.approx(
        26 * QWEN25 / 1e9
    )


def test_assumptions_are_overridable() -> None:
    a = apply_assumptions(Assumptions(), ["mfu=0.5", "vllm_tokens_per_gpu_s=8000"])
    assert dataclasses.replace(Assumptions(), mfu=0.5, vllm_tokens_per_gpu_s=8000.0) == a
    for bad in ("mfu", "speed=3", "mfu=fast", "mfu=0"):
        with pytest.raises(ConfigError, match="--assume"):
            apply_assumptions(Assumptions(), [bad])


def test_estimate_command(capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["estimate", "--config", "config/paper.yaml", "--assume", "mfu=0.5"]) == 0
    out = capsys.readouterr().out
    assert "qwen3_8b_base" in out and "over 69 training runs" in out and "mfu=0.5" in out
    assert "attention: sdpa (compute.verl_attention)" in out
    assert re.search(r"evaluations, with sdpa; [\d,]+ with flash_attention_2", out), out
    assert main(["estimate", "--config", "config/paper.yaml", "--params", "nomodel=1e9"]) == 2
    assert "--params: unknown model 'nomodel'" in capsys.readouterr().err
    assert main(["estimate", "--config", "config/paper.yaml", "--shape", "qwen3_8b_base=36"]) == 2
    assert "expected MODEL=LAYERS,WIDTH" in capsys.readouterr().err


def test_estimate_names_the_configured_attention(capsys, monkeypatch, tmp_path) -> None:
    """A site with flash-attn sets compute.verl_attention: flash_attention_2; the estimate then prices that, and
    names sdpa's total beside it."""
    monkeypatch.chdir(REPO)
    flash = tmp_path / "flash.yaml"
    flash.write_text("compute: {verl_attention: flash_attention_2}\n", encoding="utf-8")
    assert main(["estimate", "--config", "config/paper.yaml", "--config", str(flash)]) == 0
    out = capsys.readouterr().out
    assert "attention: flash_attention_2 (compute.verl_attention)" in out and "causal half (varlen)" in out
    totals = re.search(r"total: ([\d,]+) GPU-hours .* with flash_attention_2; ([\d,]+) with sdpa", out)
    assert totals and int(totals[1].replace(",", "")) < int(totals[2].replace(",", ""))


def test_paper_dryrun_prints_the_estimate_last() -> None:
    """``make paper-dryrun`` writes Snakemake's dry run (about 0.5 MB of jobs) to a file and prints the estimate
    last, where it does not scroll away (nothing is submitted by either)."""
    from support.make import dry_run

    lines = dry_run("paper-dryrun", REPO)
    assert lines[-1] == "acerl estimate --config config/paper.yaml"
    dry = next(i for i, line in enumerate(lines) if line.startswith("snakemake") and " -n " in line)
    assert lines[dry].endswith(" -n all > logs/paper-dryrun.log 2>&1 \\")


def test_no_paper_run_meets_its_time_limit_by_the_estimate(paper_cfg) -> None:
    """verl saves no checkpoint on SIGTERM (docs/cluster.md, "The verl backend: no checkpoint on SIGTERM"), so the
    paper grid's ``runtime`` per model is sized for a whole run: by the estimate every run fits one job, with at
    least 1.4x the estimated wall-clock of the model's longest run as margin."""
    cells, _ = estimate_grid(paper_cfg, Assumptions())
    assert cells and all(c.jobs == 1 for c in cells), [(c.model, c.method, c.jobs) for c in cells]
    for model in {c.model for c in cells}:
        longest = max(c.wall_hours for c in cells if c.model == model)
        runtime_h = paper_cfg.resources("train_policy", model).runtime / 60
        assert runtime_h >= 1.4 * longest, (model, runtime_h, longest)
