"""The grid's cost before it is submitted (acerl.verl_backend.estimate): one cell computed by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from acerl.cli import main
from acerl.config import ConfigError, Run
from acerl.verl_backend.estimate import (
    Assumptions,
    apply_assumptions,
    estimate_grid,
    run_disk_gb,
    run_gpu_hours,
)

REPO = Path(__file__).resolve().parents[2]
QWEN25 = 7.62e9  # parameters of Qwen/Qwen2.5-Math-7B


def test_one_cell_by_hand(paper_cfg) -> None:
    """Qwen2.5-Math-7B (Table 5: 2048 prompts x 8 rollouts, 3000-token responses, 80 steps), written out."""
    a = Assumptions()
    assert (a.mfu, a.peak_tflops, a.vllm_tokens_per_gpu_s) == (0.35, 989.0, 5000.0)
    assert (a.response_fill, a.prompt_tokens, a.usable_group_fraction, a.overhead) == (0.35, 250.0, 0.6, 1.1)
    sequences = 2048 * 8
    response = 0.35 * 3000  # 1050 tokens
    generation = sequences * response / 5000  # 3440.64 GPU-s
    training = (6 + 2 + 2) * QWEN25 * sequences * (250 + 1050) / (0.35 * 989e12)  # update, old, reference
    grpo = 80 * (generation + training) * 1.1 / 3600
    assert grpo == pytest.approx(198.72, abs=0.01)  # (3440.6 + 4688.7 GPU-s) x 80 x 1.1
    assert run_gpu_hours(paper_cfg, Run("qwen25_math_7b", "grpo", 1), QWEN25, a) == pytest.approx(
        grpo, rel=1e-9
    )
    # DAPO: dynamic sampling throws away the 40% of groups without mixed rewards: 1 / 0.6 generation
    dapo = 80 * (generation / 0.6 + training) * 1.1 / 3600
    assert run_gpu_hours(paper_cfg, Run("qwen25_math_7b", "dapo", 1), QWEN25, a) == pytest.approx(
        dapo, rel=1e-9
    )

    cells, evals = estimate_grid(paper_cfg, a)
    cell = next(c for c in cells if (c.model, c.method) == ("qwen25_math_7b", "grpo"))
    assert (cell.runs, cell.steps) == (5, 80) and cell.gpu_hours == pytest.approx(5 * grpo, rel=1e-9)
    assert cell.low < cell.gpu_hours < cell.high
    # on one 8-GPU node: 24.8 h, one 48-hour job; a kill loses at most save_freq - 1 = 9 of the 80 steps
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
    assert main(["estimate", "--config", "config/paper.yaml", "--params", "nomodel=1e9"]) == 2
    assert "--params: unknown model 'nomodel'" in capsys.readouterr().err


def test_paper_dryrun_estimates_before_snakemake() -> None:
    """``make paper-dryrun`` prints the estimate before Snakemake's dry run (nothing is submitted by either)."""
    import subprocess

    lines = subprocess.run(
        ["make", "-n", "paper-dryrun"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    estimate = next(
        i for i, line in enumerate(lines) if line.startswith("acerl estimate --config config/paper.yaml")
    )
    dry = next(i for i, line in enumerate(lines) if line.startswith("snakemake") and " -n " in line)
    assert estimate < dry


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
