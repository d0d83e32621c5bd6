"""The canary's checks (acerl.verl_backend.canary) on metrics rows that verl's own metric functions write.

The rows are built the way the V1 trainer builds a step's metrics (``compute_data_metrics``,
``compute_timing_metrics``, ``calculate_debug_metrics`` on a batch, then ACE's summaries), collected into the
project's ``metrics.jsonl`` by the launcher's :func:`collect_metrics`; so a renamed verl key fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acerl.config import Run, load_config
from acerl.errors import BadInputError, MissingInputError
from acerl.pipeline import paths
from acerl.verl_backend.canary import (
    ACE_KEYS,
    MEMORY_KEY,
    CanaryLimits,
    canary_targets,
    check_canary,
    check_run,
    format_checks,
    read_metrics,
)
from acerl.verl_backend.launcher import build_verl_command, collect_metrics
from acerl.verl_backend.sync_gap import GAP_KEY

torch = pytest.importorskip("torch")
metric_utils = pytest.importorskip("verl.trainer.ppo.metric_utils")
debug_metrics = pytest.importorskip("verl.utils.debug.metrics")
protocol = pytest.importorskip("verl.protocol")

REPO = Path(__file__).resolve().parents[2]
CANARY = [REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml", REPO / "config" / "canary.yaml"]
GRID = CANARY[:2]


def _verl_step_metrics(clipped: int, gap: float, step_s: float) -> dict[str, float]:
    """One step's metrics from verl's functions: 8 responses of at most 6 tokens, ``clipped`` of them cut at
    the limit; vLLM's probabilities ``gap`` above the actor's."""
    n, prompt, response = 8, 4, 6
    lengths = torch.tensor([response] * clipped + [3] * (n - clipped))
    response_mask = (torch.arange(response)[None, :] < lengths[:, None]).long()
    attention = torch.cat([torch.ones(n, prompt, dtype=torch.long), response_mask], dim=1)
    scores = torch.zeros(n, response)
    scores[torch.arange(n), lengths - 1] = torch.tensor([1.0, 0.0] * (n // 2))
    old = torch.full((n, response), -1.0)
    batch = protocol.DataProto.from_dict(
        tensors={
            "prompts": torch.ones(n, prompt, dtype=torch.long),
            "responses": torch.ones(n, response, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores,
            "advantages": scores - 0.5,
            "returns": scores - 0.5,
            "old_log_probs": old,
            "rollout_log_probs": torch.log(torch.exp(old) + gap),
        }
    )
    metrics = dict(metric_utils.compute_data_metrics(batch=batch, use_critic=False))
    metrics.update(
        metric_utils.compute_timing_metrics(batch=batch, timing_raw={"step": step_s, "gen": step_s / 2})
    )
    metrics.update(debug_metrics.calculate_debug_metrics(batch))
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) or hasattr(v, "item")}


def _write_run(logs: Path, target: Path, steps: list[dict[str, float]]) -> Path:
    """verl's file logger records (``{"step", "data"}``), collected by the launcher into ``metrics.jsonl``."""
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "metrics.jsonl", "w") as f:
        for step, data in enumerate(steps, start=1):
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    return collect_metrics(logs, target)


def _healthy(step: int, **change: float) -> dict[str, float]:
    out = _verl_step_metrics(clipped=1, gap=0.001, step_s=600.0)
    out[MEMORY_KEY] = 61.0  # engine_workers.py: the FSDP workers' peak, under the V1 trainer's actor/ prefix
    out.update({k: 0.4 for k in ACE_KEYS})
    out["ace/confidence_mean_neg"] = 0.0 if step == 1 else 0.37
    out.update(change)
    return out


def _failed(checks) -> set[str]:
    return {c.name for c in checks if not c.ok}


def test_healthy_canary_passes_and_each_fault_fails_its_check(tmp_path: Path) -> None:
    def check(steps):
        rows = read_metrics(_write_run(tmp_path / "logs", tmp_path / "metrics.jsonl", steps))
        return check_run("r", rows, ace=True, grid_steps=80, runtime_min=2880)

    assert _failed(check([_healthy(1), _healthy(2), _healthy(3)])) == set()
    clipped = _verl_step_metrics(clipped=4, gap=0.001, step_s=600.0)["response_length/clip_ratio"]
    assert clipped == 0.5  # verl's own clip ratio: 4 of 8 responses at max_response_length
    assert _failed(
        check([_healthy(1, **{"response_length/clip_ratio": clipped}), _healthy(2), _healthy(3)])
    ) == {"response-length clip ratio, step 1"}
    assert _failed(check([_healthy(1), _healthy(2, **{"ace/confidence_mean_neg": 0.0}), _healthy(3)])) == {
        "c_i after step 1"
    }
    no_ace = [{k: v for k, v in _healthy(s).items() if k != "ace/multiplier_max"} for s in (1, 2, 3)]
    assert _failed(check(no_ace)) == {"ace/* every step"}
    assert _failed(check([_healthy(1), _healthy(2, **{MEMORY_KEY: 79.0}), _healthy(3)])) == {
        "peak GPU memory"
    }
    assert _failed(check([_healthy(1, **_gap(0.05)), _healthy(2), _healthy(3)])) == {
        "rollout/train probability gap, step 1"
    }
    slow = _verl_step_metrics(clipped=1, gap=0.001, step_s=9000.0)["timing_s/step"]
    assert _failed(check([_healthy(1), _healthy(2), _healthy(3, **{"timing_s/step": slow})])) == {
        "step time"
    }  # 200 h > 4 x 54
    assert _failed(check([_healthy(1)])) >= {
        "steps",
        "c_i after step 1",
        "rollout/train gap after weight syncs",
    }
    assert _failed(check([_healthy(1), _healthy(2)])) == {"steps", "rollout/train gap after weight syncs"}


def _gap(gap: float) -> dict[str, float]:
    """verl's rollout/train gap metrics of a batch whose vLLM probabilities are ``gap`` above the actor's."""
    return {k: v for k, v in _verl_step_metrics(clipped=1, gap=gap, step_s=600.0).items() if "rollout" in k}


def test_the_gap_after_a_weight_sync_fails_the_canary(tmp_path: Path) -> None:
    """Steps 2 and 3 sample from weights vLLM received after an update. A good sync keeps step 1's gap (the
    kernels' and bf16's disagreement); a broken one (vLLM still on older weights) lets the gap grow with the
    policy's drift: above 3x step 1's (and 0.005), or above 0.02 outright, the check fails."""

    def gaps(*values: float) -> set[str]:
        steps = [_healthy(s, **_gap(g)) for s, g in enumerate(values, start=1)]
        rows = read_metrics(_write_run(tmp_path / "logs", tmp_path / "metrics.jsonl", steps))
        return _failed(check_run("r", rows, ace=True, grid_steps=80, runtime_min=2880))

    assert _gap(0.004)[GAP_KEY] == pytest.approx(0.004, rel=1e-5)  # verl's own metric of the batch
    assert gaps(0.004, 0.005, 0.011) == set()  # within 3x step 1's
    assert gaps(0.001, 0.002, 0.0045) == set()  # above 3x, below the 0.005 floor
    assert gaps(0.004, 0.005, 0.013) == {"rollout/train gap after weight syncs"}  # stale weights at step 3
    assert gaps(0.004, 0.03, 0.004) == {"rollout/train gap after weight syncs"}  # above 0.02
    assert gaps(0.03, 0.03, 0.03) == {
        "rollout/train probability gap, step 1",
        "rollout/train gap after weight syncs",
    }
    missing = [_healthy(1), {k: v for k, v in _healthy(2).items() if k != GAP_KEY}, _healthy(3)]
    rows = read_metrics(_write_run(tmp_path / "logs", tmp_path / "metrics.jsonl", missing))
    (check,) = [c for c in check_run("r", rows, ace=True, grid_steps=80, runtime_min=2880) if not c.ok]
    assert check.name == "rollout/train gap after weight syncs" and "2: missing" in check.value


def test_the_plugin_warns_on_the_same_rule_in_the_training_log(caplog) -> None:
    """At scale the ACE plugin applies the canary's rule to every step's metrics as the V1 trainer computes them
    (``PPOTrainer._compute_metrics``, wrapped): a good run logs nothing, a broken sync a warning line."""
    plugin = pytest.importorskip("acerl.verl_backend.plugin")

    class Trainer:  # stands in for verl's PPOTrainer: its _compute_metrics fills the step's metrics
        def __init__(self, gaps: list[float]) -> None:
            self.gaps = gaps

        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            metrics.update(_gap(self.gaps[global_steps - 1]))

    plugin._watch_sync_gap(Trainer)

    def warnings(gaps: list[float]) -> list[str]:
        caplog.clear()
        trainer = Trainer(gaps)
        with caplog.at_level("WARNING", logger=plugin.logger.name):
            for step in range(1, len(gaps) + 1):
                trainer._compute_metrics(None, {}, {}, global_steps=step, epoch=0)
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    assert warnings([0.004, 0.005, 0.004, 0.006]) == []
    (line,) = warnings([0.004, 0.005, 0.013, 0.006])
    assert "at step 3" in line and "3x the first step's 0.0040" in line and "weight sync" in line
    assert plugin.warn_on_sync_gap(object(), {GAP_KEY: float("nan")}, 1) is None  # verl's empty-mask value
    trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")
    assert getattr(trainer_base.PPOTrainer._compute_metrics, "__wrapped__", None) is not None


def test_check_canary_reads_each_runs_metrics_and_projects_to_the_grid(tmp_path: Path) -> None:
    cfg, grid = load_config(CANARY), load_config(GRID)
    runs = cfg.runs()
    assert [(r.method, r.seed) for r in runs] == [("ace_dapo", 9000)] * 3
    assert {r.model for r in runs} == set(grid.study.main.models)
    assert not set(runs) & set(grid.runs())  # the canary never writes into a grid run's folder
    with pytest.raises(MissingInputError, match="make paper-canary"):
        check_canary(cfg, grid, tmp_path)
    for run in runs:
        _write_run(
            paths.verl_logs_dir(tmp_path, run),
            paths.train_metrics_file(tmp_path, run),
            [_healthy(1), _healthy(2), _healthy(3)],
        )
    checks = check_canary(cfg, grid, tmp_path, CanaryLimits(max_jobs=1))
    step = {c.run: c.value for c in checks if c.name == "step time"}
    llama = Run("llama31_8b_instruct", "ace_dapo", 9000).id
    assert step[llama] == "600 s; 160 steps = 26.7 h = 1 job(s) of 4680 min"  # the grid's steps and runtime
    assert format_checks(checks).splitlines()[-1] == f"all {len(checks)} checks passed"
    for run in (
        runs
    ):  # 2000 s a step: Llama's 160 steps take 88.9 h, two 78-hour jobs (Qwen3: 168 h, Qwen2.5: 80 steps)
        rows = [_healthy(1), _healthy(2), _healthy(3, **{"timing_s/step": 2000.0})]
        _write_run(paths.verl_logs_dir(tmp_path, run), paths.train_metrics_file(tmp_path, run), rows)
    checks = check_canary(cfg, grid, tmp_path, CanaryLimits(max_jobs=1))
    assert {(c.run, c.name) for c in checks if not c.ok} == {(llama, "step time")}
    assert format_checks(checks).splitlines()[-1] == f"1 of {len(checks)} checks failed"
    paths.train_metrics_file(tmp_path, runs[0]).write_text("{not json\n")
    with pytest.raises(BadInputError, match=r"metrics.jsonl:1"):
        check_canary(cfg, grid, tmp_path)


def test_canary_renders_three_steps_with_a_checkpoint_each(tmp_path: Path) -> None:
    """The same launcher as the grid, with the canary's settings: 3 steps, save_freq 1, the grid's nodes."""
    cfg, grid = load_config(CANARY), load_config(GRID)
    assert canary_targets(cfg) == [str(paths.policy_dir(".", r)) for r in cfg.runs()]
    for run in cfg.runs():
        argv = build_verl_command(cfg, run, tmp_path)
        assert "trainer.total_training_steps=3" in argv and "trainer.save_freq=1" in argv
        nodes = grid.resources("train_policy", run.model).nodes
        assert f"trainer.nnodes={nodes}" in argv
        grid_argv = build_verl_command(grid, Run(run.model, run.method, 0), tmp_path)
        same = {a.split("=", 1)[0] for a in argv} ^ {a.split("=", 1)[0] for a in grid_argv}
        assert not same  # the same keys as the grid's run: only values differ


def test_the_canary_requires_ace_keys_the_plugin_reports() -> None:
    """The canary's ``ace/*`` keys are among those ACE's metric function (the plugin's and the local trainer's
    producer) returns, so a renamed metric fails here rather than on a cluster."""
    from acerl.algos.advantages import ace_metric_keys

    assert ACE_KEYS and set(ACE_KEYS) <= set(ace_metric_keys())
