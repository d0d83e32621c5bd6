"""What a grid costs before it is submitted: GPU-hours and peak disk per (model, method), from the rendered settings.

A step of a colocated verl run spends its GPU time in two phases, both over every GPU of the job:

- **generation** (vLLM): ``decode tokens / vllm_tokens_per_gpu_s``, where the decode tokens are
  ``prompts_per_step x group_size x response_fill x max_response_length``, times the dynamic-sampling factor
  ``min(1 / usable_group_fraction, max_batches x gen_batch_factor)`` for the DAPO family (filtered groups are
  generated and thrown away);
- **training** (FSDP): ``(passes / 2) x (2 x params + attention) x tokens / (mfu x peak_flops)``, with the tokens
  ``prompts_per_step x group_size x (prompt_tokens + response_fill x max_response_length)`` and the passes
  ``6 x ppo_epochs`` (update) ``+ 2`` (old log-probs) ``+ 2`` (reference log-probs, when the run needs them).
  ``attention`` is the forward attention FLOPs per token (:func:`attention_flops_per_token`), which depend on the
  implementation the launcher sets (``compute.verl_attention``): ``sdpa`` (and ``eager``) over a packed
  micro-batch of ``P`` tokens computes the whole ``P x P`` score matrix under a block-diagonal mask,
  ``4 x layers x width x P`` per token; ``flash_attention_2`` (varlen) computes each sequence's causal half,
  ``2 x layers x width x l`` per token for sequences of ``l`` tokens. ``P`` is what verl's dynamic batching
  packs (:func:`packed_length`): a GPU's tokens of one pass split into ``ceil(tokens / budget)`` equal
  micro-batches, under the launcher's token budget per pass (:func:`acerl.verl_backend.launcher.token_budgets`).

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
from acerl.verl_backend.launcher import token_budgets

__all__ = [
    "KNOWN_PARAMS",
    "KNOWN_SHAPES",
    "Assumptions",
    "Cell",
    "ModelSize",
    "apply_assumptions",
    "attention_flops_per_token",
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
KNOWN_SHAPES: dict[str, tuple[int, int]] = {
    # (num_hidden_layers, num_attention_heads x head_dim) of the paper's base models (their config.json)
    "Qwen/Qwen2.5-Math-7B": (28, 28 * 128),
    "Qwen/Qwen3-8B-Base": (36, 32 * 128),
    "meta-llama/Llama-3.1-8B-Instruct": (32, 32 * 128),
}
PACKED_SQUARE = frozenset({"sdpa", "eager"})
"""Attention implementations that compute a packed micro-batch's whole score matrix (the block-diagonal mask
is applied, not skipped); ``flash_attention_2`` computes each sequence's causal half (varlen)."""
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


@dataclass(frozen=True)
class ModelSize:
    """What the estimate needs of a model: its parameters, decoder layers and attention width (query heads x
    head dimension)."""

    params: float
    layers: int
    width: int


def model_size(
    cfg: Config,
    model: str,
    params: Mapping[str, float],
    shapes: Mapping[str, tuple[int, int]] | None = None,
) -> ModelSize:
    """``model``'s size: ``params[model]`` / ``shapes[model]``, else the known values of its hub id."""
    hub = cfg.models[model].hub_id or ""
    name = hub or str(cfg.models[model].path)
    count = params.get(model, KNOWN_PARAMS.get(hub))
    if count is None:
        raise ConfigError(
            f"models.{model}: parameter count of {name!r} unknown: pass acerl estimate --params {model}=7.6e9"
        )
    shape = (shapes or {}).get(model, KNOWN_SHAPES.get(hub))
    if shape is None:
        raise ConfigError(
            f"models.{model}: attention shape of {name!r} unknown: pass acerl estimate --shape {model}=28,3584 "
            "(layers, attention heads x head dimension)"
        )
    return ModelSize(float(count), *shape)


def packed_length(tokens_per_gpu: float, budget: int) -> float:
    """Tokens of one packed micro-batch: verl's dynamic batching (``rearrange_micro_batches``) splits a GPU's
    ``tokens_per_gpu`` of one pass into ``ceil(tokens / budget)`` micro-batches balanced in size."""
    return tokens_per_gpu / max(1, math.ceil(tokens_per_gpu / budget))


def attention_flops_per_token(size: ModelSize, implementation: str, packed: float, sequence: float) -> float:
    """Forward attention FLOPs (``QK^T`` and ``AV``, 2 x 2 x width per query-key pair and layer) per token.

    ``sdpa`` / ``eager`` over a packed micro-batch of ``packed`` tokens: every pair of the micro-batch, so
    ``4 x layers x width x packed``; ``flash_attention_2`` (varlen, causal): each sequence's ``sequence^2 / 2``
    pairs, so ``2 x layers x width x sequence``.
    """
    if implementation in PACKED_SQUARE:
        return 4 * size.layers * size.width * packed
    if implementation == "flash_attention_2":
        return 2 * size.layers * size.width * sequence
    raise ConfigError(f"compute.verl_attention={implementation!r}: no attention cost known to the estimate")


def _generation_factor(cfg: Config, run: Run, a: Assumptions) -> float:
    ds = resolve(cfg, run).family.dynamic_sampling
    if not ds.enable:
        return 1.0
    cap = ds.max_batches * ds.gen_batch_factor if ds.max_batches > 0 else float("inf")
    return min(1.0 / min(a.usable_group_fraction, 1.0), cap)


def step_gpu_seconds(
    cfg: Config, run: Run, size: ModelSize, a: Assumptions, attention: str | None = None
) -> tuple[float, float]:
    """``(generation, training)`` GPU-seconds of one step of ``run`` with the attention ``attention`` (default
    ``compute.verl_attention``)."""
    settings = resolve(cfg, run)
    tr = settings.hyper
    implementation = attention or cfg.compute.verl_attention
    sequences = tr.prompts_per_step * tr.group_size
    response = a.response_fill * tr.max_response_length
    generation = sequences * response * _generation_factor(cfg, run, a) / a.vllm_tokens_per_gpu_s
    length = a.prompt_tokens + response
    res = cfg.resources("train_policy", run.model)
    gpus = max(1, res.gpus * res.nodes)
    update_budget, logprob_budget = token_budgets(cfg, run)
    # the update packs one mini-batch's tokens per GPU, the log-prob passes the whole step's
    update_attn, logprob_attn = (
        attention_flops_per_token(
            size, implementation, packed_length(prompts * tr.group_size * length / gpus, b), length
        )
        for prompts, b in ((tr.mini_batch_size, update_budget), (tr.prompts_per_step, logprob_budget))
    )
    logprob_passes = 2 + (2 if settings.needs_reference else 0)
    per_token = 6 * tr.ppo_epochs * (size.params + update_attn / 2) + logprob_passes * (
        size.params + logprob_attn / 2
    )
    return generation, per_token * sequences * length / (a.mfu * a.peak_tflops * 1e12)


def run_gpu_hours(
    cfg: Config, run: Run, size: ModelSize, a: Assumptions, attention: str | None = None
) -> float:
    """GPU-hours of training ``run``: ``total_steps x (generation + training) x overhead``."""
    generation, training = step_gpu_seconds(cfg, run, size, a, attention)
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
    other_gpu_hours: float = 0.0  # the central GPU-hours with the other attention (OTHER_ATTENTION)


OTHER_ATTENTION = {"sdpa": "flash_attention_2", "eager": "flash_attention_2", "flash_attention_2": "sdpa"}
"""The implementation the estimate also prices, beside the configured one."""
SHORT_NAMES = {"sdpa": "sdpa", "eager": "eager", "flash_attention_2": "fa2"}


def estimate_grid(
    cfg: Config,
    a: Assumptions,
    params: Mapping[str, float] | None = None,
    shapes: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[list[Cell], list[Cell]]:
    """The training cells of ``cfg.runs()`` grouped by (model, method), and one evaluation cell per model; the
    attention is ``compute.verl_attention``'s, and each cell also holds the central GPU-hours under
    :data:`OTHER_ATTENTION`'s."""
    params = params or {}
    other = OTHER_ATTENTION[cfg.compute.verl_attention]
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in cfg.runs():
        groups.setdefault((run.model, run.method), []).append(run)
    cells = []
    for (model, method), runs in groups.items():
        size = model_size(cfg, model, params, shapes)
        central, low, high = (
            sum(run_gpu_hours(cfg, r, size, x) for r in runs) for x in (a, a.optimistic(), a.pessimistic())
        )
        disk = [run_disk_gb(cfg, r, size.params) for r in runs]
        steps = cfg.models[model].train.total_steps
        peak, left, peak_sum = max(d[0] for d in disk), sum(d[1] for d in disk), sum(d[0] for d in disk)
        res = cfg.resources("train_policy", model)
        longest = max(run_gpu_hours(cfg, r, size, a) for r in runs)
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
                sum(run_gpu_hours(cfg, r, size, a, other) for r in runs),
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


def format_estimate(
    cells: Sequence[Cell], evals: Sequence[Cell], a: Assumptions, attention: str, packed: bool = True
) -> str:
    """The estimate as a plain-text table, its totals and the assumptions it rests on; ``attention`` is the
    implementation the cells assume (``compute.verl_attention``), ``packed`` ``compute.verl_remove_padding``."""
    other = OTHER_ATTENTION[attention]
    lines = [
        f"{'model':<20} {'method':<18} {'runs':>4} {'steps':>5} {'GPU-h':>7} {'low':>7} {'high':>7} "
        f"{'h/run':>6} {'jobs':>4} {'kill GPU-h':>10} {'peak GB/run':>11} {'left GB':>7} {'GPU-h ' + SHORT_NAMES[other]:>10}"
    ]
    for c in [*cells, *evals]:
        lines.append(
            f"{c.model:<20} {c.method:<18} {c.runs:>4} {c.steps:>5} {c.gpu_hours:>7.0f} {c.low:>7.0f} "
            f"{c.high:>7.0f} {c.wall_hours:>6.0f} {c.jobs:>4} {c.kill_gpu_hours:>10.0f} {c.peak_disk_gb:>11.0f} "
            f"{c.left_disk_gb:>7.0f} {(c.other_gpu_hours or c.gpu_hours):>10.0f}"
        )
    total = [sum(getattr(c, k) for c in [*cells, *evals]) for k in ("gpu_hours", "low", "high")]
    total_other = sum(c.other_gpu_hours or c.gpu_hours for c in [*cells, *evals])
    peak_all = sum(c.peak_sum_gb for c in cells)
    left_all = sum(c.left_disk_gb for c in cells)
    lines += [
        f"attention: {attention} (compute.verl_attention) in the FSDP passes; the GPU-hours include its FLOPs "
        + (
            "over each packed micro-batch's whole square (the masked kernel skips no cross-sequence block)"
            if attention in PACKED_SQUARE
            else "over each sequence's causal half (varlen)"
        )
        + ("" if packed else "; compute.verl_remove_padding is false, which the estimate does not model"),
        f"total: {total[0]:,.0f} GPU-hours (low {total[1]:,.0f}, high {total[2]:,.0f}) over "
        f"{sum(c.runs for c in cells)} training runs and {sum(c.runs for c in evals)} evaluations, with "
        f"{attention}; {total_other:,.0f} with {other} (last column, central)",
        f"disk: {left_all / 1e3:,.1f} TB left after the grid; {peak_all / 1e3:,.1f} TB if every run peaked at once",
        "assumptions (acerl estimate --assume KEY=VALUE): "
        + ", ".join(f"{f.name}={getattr(a, f.name):g}" for f in dataclasses.fields(a)),
        "h/run: the longest run's wall-clock on its job's GPUs; jobs: SLURM jobs of the rule's runtime it takes; "
        "kill GPU-h: what one time-limit kill loses at most (save_freq - 1 steps, docs/cluster.md)",
        "low/high: mfu x1.3/x0.7, vllm_tokens_per_gpu_s x1.5/x0.6, response_fill x0.75/x1.4, "
        "usable_group_fraction x1.3/x0.7",
    ]
    return "\n".join(lines)
