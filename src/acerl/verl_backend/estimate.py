"""What a grid costs before it is submitted: GPU-hours and peak disk per (model, method), from the rendered settings.

A step of a colocated verl run spends its GPU time in two phases, both over every GPU of the job:

- **generation** (vLLM): ``decode tokens / vllm_tokens_per_gpu_s``, where the decode tokens are
  ``prompts_per_step x group_size x response_fill x max_response_length``, times the dynamic-sampling factor
  ``min(1 / usable_group_fraction, max_batches x gen_batch_factor)`` for the DAPO family (filtered groups are
  generated and thrown away);
- **training** (FSDP): ``passes x params x tokens / (mfu x peak_flops)``, with the tokens
  ``prompts_per_step x group_size x (prompt_tokens + response_fill x max_response_length)`` and the passes
  ``6 x ppo_epochs`` (update) ``+ 2`` (old log-probs) ``+ 2`` (reference log-probs, when the run needs them);
  attention FLOPs are left out (about 10% more at an 8K context).

The sum times ``overhead`` (weight sync, rewards, checkpoint saves) times ``train.total_steps`` is a run's
GPU-time. Evaluation sampling adds ``problems x evaluation.n x response_fill x max_response_length`` decode tokens
per (benchmark, run). Every assumption is a field of :class:`Assumptions` (``acerl estimate --assume KEY=VALUE``);
``low`` and ``high`` bracket each estimate with the optimistic and pessimistic values of the uncertain ones.

Disk: a resumable verl checkpoint holds fp32 weights and AdamW's two fp32 moments (12 bytes per parameter); a
diagnostic snapshot holds the fp32 weights (4 bytes); an exported Hugging Face folder bf16 weights (2 bytes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from acerl.config import Config, ConfigError, Run
from acerl.config.settings import resolve
from acerl.verl_backend.checkpoints import save_frequency

__all__ = [
    "KNOWN_PARAMS",
    "Assumptions",
    "Cell",
    "apply_assumptions",
    "estimate_grid",
    "format_estimate",
    "run_disk_gb",
    "run_gpu_hours",
]

KNOWN_PARAMS: dict[str, float] = {
    # parameter counts of the paper's base models (their safetensors index, total_size / 2 bytes in bf16)
    "Qwen/Qwen2.5-Math-7B": 7.62e9,
    "Qwen/Qwen3-8B-Base": 8.19e9,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03e9,
}
KNOWN_PROBLEMS: dict[str, int] = {"HuggingFaceH4/MATH-500": 500, "MathArena/aime_2025": 30}
CHECKPOINT_BYTES = 12  # fp32 weights + AdamW exp_avg + exp_avg_sq
SNAPSHOT_BYTES = 4  # fp32 weights (the model shards of a verl checkpoint)
EXPORT_BYTES = 2  # bf16 safetensors


@dataclass(frozen=True)
class Assumptions:
    """The estimate's assumptions (``acerl estimate --assume KEY=VALUE``); ``low`` / ``high`` bracket them."""

    mfu: float = 0.35  # model FLOPs utilisation of the FSDP passes on H100
    peak_tflops: float = 989.0  # H100 SXM dense bf16
    vllm_tokens_per_gpu_s: float = 5000.0  # vLLM decode throughput per GPU, 7-8B model, large batches
    response_fill: float = 0.35  # mean response length / max_response_length
    prompt_tokens: float = 250.0  # mean prompt length with the chat template
    usable_group_fraction: float = 0.6  # DAPO: share of groups with mixed rewards (kept by dynamic sampling)
    overhead: float = 1.1  # weight sync, reward grading, checkpoint saves, logging

    def optimistic(self) -> Assumptions:
        return dataclasses.replace(
            self,
            mfu=self.mfu * 1.3,
            vllm_tokens_per_gpu_s=self.vllm_tokens_per_gpu_s * 1.5,
            response_fill=self.response_fill * 0.75,
            usable_group_fraction=min(1.0, self.usable_group_fraction * 1.3),
        )

    def pessimistic(self) -> Assumptions:
        return dataclasses.replace(
            self,
            mfu=self.mfu * 0.7,
            vllm_tokens_per_gpu_s=self.vllm_tokens_per_gpu_s * 0.6,
            response_fill=min(1.0, self.response_fill * 1.4),
            usable_group_fraction=self.usable_group_fraction * 0.7,
        )


def apply_assumptions(base: Assumptions, items: Sequence[str]) -> Assumptions:
    """``base`` with ``KEY=VALUE`` items applied; an unknown key or a non-positive value is a :class:`ConfigError`."""
    names = [f.name for f in dataclasses.fields(Assumptions)]
    changes: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in names:
            raise ConfigError(f"--assume {item!r}: expected KEY=VALUE with KEY one of {', '.join(names)}")
        try:
            changes[key] = float(value)
        except ValueError:
            raise ConfigError(f"--assume {item!r}: {value!r} is not a number") from None
        if changes[key] <= 0:
            raise ConfigError(f"--assume {item!r}: must be positive")
    return dataclasses.replace(base, **changes)


def model_params(cfg: Config, model: str, params: Mapping[str, float]) -> float:
    """Parameters of ``model``: ``params[model]``, else the known count of its hub id."""
    if model in params:
        return float(params[model])
    hub = cfg.models[model].hub_id or ""
    if hub in KNOWN_PARAMS:
        return KNOWN_PARAMS[hub]
    raise ConfigError(
        f"models.{model}: parameter count of {hub or cfg.models[model].path!r} unknown: "
        f"pass acerl estimate --params {model}=7.6e9"
    )


def _generation_factor(cfg: Config, run: Run, a: Assumptions) -> float:
    ds = resolve(cfg, run).family.dynamic_sampling
    if not ds.enable:
        return 1.0
    cap = ds.max_batches * ds.gen_batch_factor if ds.max_batches > 0 else float("inf")
    return min(1.0 / min(a.usable_group_fraction, 1.0), cap)


def step_gpu_seconds(cfg: Config, run: Run, params: float, a: Assumptions) -> tuple[float, float]:
    """``(generation, training)`` GPU-seconds of one step of ``run``."""
    settings = resolve(cfg, run)
    tr = settings.hyper
    sequences = tr.prompts_per_step * tr.group_size
    response = a.response_fill * tr.max_response_length
    generation = sequences * response * _generation_factor(cfg, run, a) / a.vllm_tokens_per_gpu_s
    passes = 6 * tr.ppo_epochs + 2 + (2 if settings.needs_reference else 0)
    flops = passes * params * sequences * (a.prompt_tokens + response)
    return generation, flops / (a.mfu * a.peak_tflops * 1e12)


def run_gpu_hours(cfg: Config, run: Run, params: float, a: Assumptions) -> float:
    """GPU-hours of training ``run``: ``total_steps x (generation + training) x overhead``."""
    generation, training = step_gpu_seconds(cfg, run, params, a)
    return cfg.models[run.model].train.total_steps * (generation + training) * a.overhead / 3600


def eval_gpu_hours(cfg: Config, model: str, benchmark: str, a: Assumptions, problems: int) -> float:
    """GPU-hours of sampling ``evaluation.n`` answers to ``problems`` problems of one benchmark."""
    tokens = problems * cfg.evaluation.n * a.response_fill * cfg.models[model].train.max_response_length
    return tokens / a.vllm_tokens_per_gpu_s * a.overhead / 3600


def run_disk_gb(cfg: Config, run: Run, params: float) -> tuple[float, float]:
    """``(peak, left)`` GB of ``run``: peak with ``keep_checkpoints + 1`` resumable checkpoints (a resumed
    attempt saves one before pruning the earlier attempt's), the diagnostic snapshots and the exports; left
    after the export (the exports, plus the checkpoints with ``compute.keep_verl_checkpoints``)."""
    tr = cfg.models[run.model].train
    diag = [s for s in resolve(cfg, run).diagnostic_steps if s > 0]
    exports = (
        (1 + len(diag)) * EXPORT_BYTES * params
    )  # the final policy and each diagnostic step (0 is a link)
    kept = tr.keep_checkpoints * CHECKPOINT_BYTES * params
    peak = kept + CHECKPOINT_BYTES * params + len(diag) * SNAPSHOT_BYTES * params + exports
    left = exports + (kept if cfg.compute.keep_verl_checkpoints else 0.0)
    return peak / 1e9, left / 1e9


@dataclass(frozen=True)
class Cell:
    """One (model, method) of the grid: its runs, their GPU-hours (central, low, high), the largest peak disk of
    one of its runs, and the disk its runs leave in total."""

    model: str
    method: str
    runs: int
    steps: int
    gpu_hours: float
    low: float
    high: float
    peak_disk_gb: float
    left_disk_gb: float
    peak_sum_gb: float
    wall_hours: float = 0.0  # the longest run's wall-clock on its job's GPUs
    jobs: int = 0  # SLURM jobs of compute.resources runtime that run takes
    kill_gpu_hours: float = 0.0  # GPU-hours a time-limit kill loses at most: save_freq - 1 steps


def estimate_grid(
    cfg: Config, a: Assumptions, params: Mapping[str, float] | None = None
) -> tuple[list[Cell], list[Cell]]:
    """The training cells of ``cfg.runs()`` grouped by (model, method), and one evaluation cell per model."""
    params = params or {}
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in cfg.runs():
        groups.setdefault((run.model, run.method), []).append(run)
    cells = []
    for (model, method), runs in groups.items():
        n = model_params(cfg, model, params)
        central, low, high = (
            sum(run_gpu_hours(cfg, r, n, x) for r in runs) for x in (a, a.optimistic(), a.pessimistic())
        )
        disk = [run_disk_gb(cfg, r, n) for r in runs]
        steps = cfg.models[model].train.total_steps
        peak, left, peak_sum = max(d[0] for d in disk), sum(d[1] for d in disk), sum(d[0] for d in disk)
        res = cfg.resources("train_policy", model)
        longest = max(run_gpu_hours(cfg, r, n, a) for r in runs)
        wall = longest / max(1, res.gpus * res.nodes)
        freq = max(
            save_frequency(cfg.models[model].train.save_every, resolve(cfg, r).diagnostic_steps) for r in runs
        )
        kill = (min(freq, steps) - 1) * longest / steps
        cells.append(
            Cell(
                model,
                method,
                len(runs),
                steps,
                central,
                low,
                high,
                peak,
                left,
                peak_sum,
                wall,
                math.ceil(wall * 60 / res.runtime),
                kill,
            )
        )
    evals: dict[str, list[float]] = {}
    for benchmark, run in cfg.evaluations():
        problems = _problems(cfg, benchmark)
        sums = evals.setdefault(run.model, [0.0, 0.0, 0.0, 0.0])
        sums[0] += 1
        for i, x in enumerate((a, a.optimistic(), a.pessimistic()), start=1):
            sums[i] += eval_gpu_hours(cfg, run.model, benchmark, x, problems)
    ev = [Cell(m, "evaluation", int(s[0]), 0, s[1], s[2], s[3], 0.0, 0.0, 0.0) for m, s in evals.items()]
    return cells, ev


def _problems(cfg: Config, benchmark: str) -> int:
    real = cfg.data.real
    source = real.benchmarks.get(benchmark) if real is not None else None
    hub = getattr(source, "hub_id", None) or ""
    if hub not in KNOWN_PROBLEMS:
        raise ConfigError(
            f"data.real.benchmarks.{benchmark}: problem count of {hub!r} unknown to the estimate "
            "(known: " + ", ".join(KNOWN_PROBLEMS) + ")"
        )
    return KNOWN_PROBLEMS[hub]


def format_estimate(cells: Sequence[Cell], evals: Sequence[Cell], a: Assumptions) -> str:
    """The estimate as a plain-text table, its totals and the assumptions it rests on."""
    lines = [
        f"{'model':<20} {'method':<18} {'runs':>4} {'steps':>5} {'GPU-h':>7} {'low':>7} {'high':>7} "
        f"{'h/run':>6} {'jobs':>4} {'kill GPU-h':>10} {'peak GB/run':>11} {'left GB':>7}"
    ]
    for c in [*cells, *evals]:
        lines.append(
            f"{c.model:<20} {c.method:<18} {c.runs:>4} {c.steps:>5} {c.gpu_hours:>7.0f} {c.low:>7.0f} "
            f"{c.high:>7.0f} {c.wall_hours:>6.0f} {c.jobs:>4} {c.kill_gpu_hours:>10.0f} {c.peak_disk_gb:>11.0f} "
            f"{c.left_disk_gb:>7.0f}"
        )
    total = [sum(getattr(c, k) for c in [*cells, *evals]) for k in ("gpu_hours", "low", "high")]
    peak_all = sum(c.peak_sum_gb for c in cells)
    left_all = sum(c.left_disk_gb for c in cells)
    lines += [
        f"total: {total[0]:,.0f} GPU-hours (low {total[1]:,.0f}, high {total[2]:,.0f}) over "
        f"{sum(c.runs for c in cells)} training runs and {sum(c.runs for c in evals)} evaluations",
        f"disk: {left_all / 1e3:,.1f} TB left after the grid; {peak_all / 1e3:,.1f} TB if every run peaked at once",
        "assumptions (acerl estimate --assume KEY=VALUE): "
        + ", ".join(f"{f.name}={getattr(a, f.name):g}" for f in dataclasses.fields(a)),
        "h/run: the longest run's wall-clock on its job's GPUs; jobs: SLURM jobs of the rule's runtime it takes; "
        "kill GPU-h: what one time-limit kill loses at most (save_freq - 1 steps, docs/cluster.md)",
        "low/high: mfu x1.3/x0.7, vllm_tokens_per_gpu_s x1.5/x0.6, response_fill x0.75/x1.4, "
        "usable_group_fraction x1.3/x0.7",
    ]
    return "\n".join(lines)
