"""The canary before the paper grid: a 3-step job per model through the same profile and launcher, then checks.

``make paper-canary`` trains the runs of ``config/canary.yaml`` (stacked over ``config/paper.yaml``: one ACE-DAPO
run per model under seed 9000, which no grid run uses, ``total_steps: 3`` and ``save_every: 1``) as SLURM jobs
through the site profile, then runs ``acerl canary check``. The check reads each run's ``metrics.jsonl`` (verl's
per-step metrics, collected by the launcher) and prints what must hold before the grid is submitted:

- **peak GPU memory** (``actor/perf/max_memory_reserved_gb``, the FSDP workers' peak) below ``memory_fraction`` of the
  card;
- **response-length clip ratio** at step 1 (``response_length/clip_ratio``: the share of responses that hit
  ``max_response_length``) at most ``clip_ratio_max``: a base model whose end token is not among its stop
  tokens runs every response to the limit (docs/deviations.md, "EOS");
- **ACE's metrics** (``ace/*``) at every step, and ``ace/confidence_mean_neg`` (the mean ``c_i`` of the amplified
  errors) non-zero after step 1 (zero means the reference equals the policy: ACE is then a constant factor);
- **step time** (``timing_s/step``) of the last step, projected over the grid's ``total_steps``, and the SLURM
  jobs that takes at the grid's ``runtime`` (at most ``max_jobs``, the profile's ``retries + 1``);
- **the rollout/train gap** (``training/rollout_probs_diff_mean``: the mean absolute difference of the token
  probabilities vLLM sampled with and the FSDP actor recomputes) at step 1 (the kernels and dtypes on the same
  weights) and at steps 2 and 3, whose rollouts come after a weight sync from the updated actor
  (:func:`acerl.verl_backend.sync_gap.gap_problem`: at most ``gap.limit``, and after a sync at most ``gap.jump``
  times step 1's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acerl.config import Config, Run
from acerl.errors import BadInputError, MissingInputError
from acerl.pipeline import paths
from acerl.pipeline.stages import Job, job_outputs
from acerl.verl_backend.sync_gap import GAP_KEY, GapLimits, gap_of, gap_problem
from acerl.verl_backend.sync_gap import metric as _number

__all__ = [
    "ACE_KEYS",
    "CANARY_STEPS",
    "CanaryLimits",
    "Check",
    "canary_targets",
    "check_canary",
    "check_run",
    "format_checks",
    "read_metrics",
]

# the ace/* keys the canary requires: a subset of acerl.algos.advantages.ace_metric_keys() (kept torch-free here)
ACE_KEYS = ("ace/negative_frac", "ace/confidence_mean_neg", "ace/multiplier_mean_neg", "ace/multiplier_max")
MEMORY_KEY = (
    "actor/perf/max_memory_reserved_gb"  # engine_workers.py logs perf/...; the V1 trainer prefixes actor/
)
CLIP_KEY = "response_length/clip_ratio"
STEP_TIME_KEY = "timing_s/step"
FIX = "make paper-canary"
CANARY_STEPS = 3  # step 1, then two steps whose rollouts follow a weight sync after an update


@dataclass(frozen=True)
class CanaryLimits:
    """What the canary's metrics must stay within (``acerl canary check`` options)."""

    gpu_memory_gb: float = 80.0  # the card's memory (H100 / A100 80 GB)
    memory_fraction: float = 0.95  # peak reserved memory / card memory
    clip_ratio_max: float = 0.2  # share of step-1 responses cut at max_response_length
    gap: GapLimits = GapLimits()  # mean |p_vllm - p_fsdp| over response tokens (sync_gap.py)
    max_jobs: int = 4  # SLURM jobs a run may take: the profile's retries (3) + 1


@dataclass(frozen=True)
class Check:
    """One line of the canary's verdict for one run."""

    run: str
    name: str
    value: str
    ok: bool
    hint: str = ""


def canary_targets(cfg: Config) -> list[str]:
    """The files Snakemake must make for the canary: every training output of the config's runs."""
    out = []
    for run in cfg.runs():
        out += [str(o.path) for o in job_outputs(cfg, Job("train_policy", run.model, run)) if not o.persist]
    return out


def read_metrics(file: Path) -> dict[int, dict[str, Any]]:
    """The project's ``metrics.jsonl`` of a verl run (``{"step": s, **metrics}`` a line) by step."""
    if not file.is_file():
        raise MissingInputError(f"{file}: no metrics; run the canary first ({FIX})")
    rows: dict[int, dict[str, Any]] = {}
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            row = json.loads(line)
            rows[int(row["step"])] = row
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise BadInputError(f"{file}:{n}: not a metrics row with a step; rerun {FIX}") from None
    return rows


def check_run(
    run: str,
    rows: Mapping[int, Mapping[str, Any]],
    *,
    ace: bool,
    grid_steps: int,
    runtime_min: int,
    limits: CanaryLimits = CanaryLimits(),
) -> list[Check]:
    """The canary's checks of one run's per-step metrics (see the module docstring)."""
    steps = sorted(rows)
    want = list(range(1, CANARY_STEPS + 1))
    out = [
        Check(
            run,
            "steps",
            f"{steps}",
            steps[:CANARY_STEPS] == want,
            f"the canary trains {CANARY_STEPS} steps (total_steps in config/canary.yaml)",
        )
    ]
    if not steps:
        return out
    first, last = rows[steps[0]], rows[steps[-1]]

    peaks = [v for s in steps if (v := _number(rows[s], MEMORY_KEY)) is not None]
    limit = limits.memory_fraction * limits.gpu_memory_gb
    out.append(
        Check(
            run,
            "peak GPU memory",
            f"{max(peaks):.1f} GB (limit {limit:.0f})" if peaks else f"{MEMORY_KEY} missing",
            bool(peaks) and max(peaks) <= limit,
            "lower gpu_memory_utilization or max_tokens_per_gpu",
        )
    )
    clip = _number(first, CLIP_KEY)
    out.append(
        Check(
            run,
            "response-length clip ratio, step 1",
            f"{clip:.3f} (limit {limits.clip_ratio_max})" if clip is not None else f"{CLIP_KEY} missing",
            clip is not None and clip <= limits.clip_ratio_max,
            "responses run to max_response_length: check the model's EOS (docs/deviations.md)",
        )
    )
    if ace:
        missing = sorted({k for s in steps for k in ACE_KEYS if _number(rows[s], k) is None})
        out.append(
            Check(
                run,
                "ace/* every step",
                "missing " + ", ".join(missing) if missing else "present",
                not missing,
            )
        )
        later = [_number(rows[s], "ace/confidence_mean_neg") for s in steps if s >= 2]
        nonzero = bool(later) and all(c is not None and abs(c) > 1e-6 for c in later)
        out.append(
            Check(
                run,
                "c_i after step 1",
                ", ".join("missing" if c is None else f"{c:.4g}" for c in later) or "no step after 1",
                nonzero,
                "c_i = 0: the reference is the policy (ACE becomes a constant factor)",
            )
        )
    step_s = _number(last, STEP_TIME_KEY)
    if step_s is None:
        out.append(Check(run, "step time", f"{STEP_TIME_KEY} missing", False))
    else:
        hours = step_s * grid_steps / 3600
        jobs = math.ceil(hours * 60 / runtime_min)
        out.append(
            Check(
                run,
                "step time",
                f"{step_s:.0f} s; {grid_steps} steps = {hours:.1f} h = {jobs} job(s) of {runtime_min} min",
                jobs <= limits.max_jobs,
                "raise runtime (compute.model_resources) or the profile's retries",
            )
        )
    out += _gap_checks(run, rows, limits.gap)
    return out


def _gap_checks(run: str, rows: Mapping[int, Mapping[str, Any]], limits: GapLimits) -> list[Check]:
    """The rollout/train gap at step 1, and at the steps after it (each preceded by a post-update weight sync)."""
    steps = sorted(rows)
    gaps = {s: gap_of(rows[s]) for s in steps}
    first = gaps[steps[0]] if steps else None
    one = gap_problem(1, first, None, limits) if first is not None else None
    out = [
        Check(
            run,
            "rollout/train probability gap, step 1",
            f"{first:.4f} (limit {limits.limit})" if first is not None else f"{GAP_KEY} missing",
            first is not None and one is None,
            "vLLM and FSDP disagree: check dtypes and the attention implementation (docs/verl.md)",
        )
    ]
    later = [s for s in steps if s >= 2]
    problems = [
        p for s in later if (g := gaps[s]) is not None and (p := gap_problem(s, g, first, limits)) is not None
    ]
    values = ", ".join(f"{s}: " + ("missing" if gaps[s] is None else f"{gaps[s]:.4f}") for s in later)
    ok = len(later) >= CANARY_STEPS - 1 and all(gaps[s] is not None for s in later) and not problems
    out.append(
        Check(
            run,
            "rollout/train gap after weight syncs",
            f"{values or 'no step after 1'} (limit {limits.limit}, {limits.jump:g}x step 1's above "
            f"{limits.floor})",
            ok,
            problems[0] + "; check the weight sync (docs/cluster.md, 'Canary')"
            if problems
            else f"needs steps 2-{CANARY_STEPS} with {GAP_KEY}",
        )
    )
    return out


def check_canary(
    cfg: Config, grid: Config, root: Path | str, limits: CanaryLimits = CanaryLimits()
) -> list[Check]:
    """Every check of every canary run of ``cfg`` under ``root``; ``grid`` gives the steps and runtime to
    project to (the paper grid's config)."""
    out = []
    for run in cfg.runs():
        rows = read_metrics(paths.train_metrics_file(Path(root), run))
        out += check_run(
            run.id,
            rows,
            ace=_is_ace(cfg, run),
            grid_steps=grid.models[run.model].train.total_steps,
            runtime_min=grid.resources("train_policy", run.model).runtime,
            limits=limits,
        )
    return out


def format_checks(checks: Sequence[Check]) -> str:
    """One line per check: ``ok`` / ``FAIL``, the run, what was checked, the value (and the fix on a failure)."""
    lines = []
    for c in checks:
        hint = f"  -> {c.hint}" if not c.ok and c.hint else ""
        lines.append(f"{'ok  ' if c.ok else 'FAIL'} {c.run:<40} {c.name:<38} {c.value}{hint}")
    bad = sum(not c.ok for c in checks)
    lines.append(f"{bad} of {len(checks)} checks failed" if bad else f"all {len(checks)} checks passed")
    return "\n".join(lines)


def _is_ace(cfg: Config, run: Run) -> bool:
    return cfg.method(run.method).estimator.name == "ace"
