"""The testbed gate (``report.gate``, config/gate.yaml; docs/tiny_task.md, "The gate"): does RL on this testbed
behave as it does at scale? It must **sharpen** (the baseline's Pass@1 above the base model's), **narrow** (its
Pass@k at the largest k below the base's: the crossover Yue et al. 2025 measured on real models), and a
**positive control** built to keep coverage must keep it (Pass@k at the largest k above the baseline's, Pass@1 not
below the base's). Only a testbed that passes can show, or refute, what ACE is for.

The unit of analysis is the base model: the main grid's models are independently SFT'd bases of one recipe
(they differ in ``models.<m>.sft.seed``). Per base, each method's Pass@k is the mean over its training seeds and
the base model's is its own evaluation; each criterion's difference is taken per base, and its interval is the
Student t interval over bases. So what is random is the base (its SFT seed), and within it the training seeds
and the evaluation's sampling; the base's evaluation noise is inside the interval, not a constant subtracted from
every run. The benchmark's problems are held fixed (the intervals do not cover another draw of problems).

    acerl report gate --config config/gate.yaml [--root .] [--figure FILE]
    acerl report gate --config config/gate.yaml --export docs/results/gate       # the per-run data
    acerl report gate --config config/gate.yaml --data docs/results/gate         # the report from them

Exit codes: 0 every criterion passes, 5 the gate ran and a criterion failed, 2/3/4 as every command.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from acerl.config import BASE_METHOD, Config, ConfigError, Run, TestbedGate, load_config
from acerl.errors import MissingInputError, UserError
from acerl.evaluate.stats import mean_ci
from acerl.passk import pass_at_k_array
from acerl.pipeline import paths
from acerl.report.frames import load_passk_problems
from acerl.report.methods import read_exported_counts, require_passk_files
from acerl.report.power import write_counts_csv

__all__ = [
    "GATE_FAILED",
    "Criterion",
    "gate_spec",
    "per_base",
    "criteria",
    "render_gate",
    "gate_files",
    "main",
]

GATE_FAILED = 5
"""Exit code of ``acerl report gate`` when the gate ran and a criterion failed."""


@dataclass(frozen=True)
class Criterion:
    """One criterion of the gate: the mean over bases of a per-base difference (points), its interval over
    bases, the threshold the mean must reach and the bound the interval must clear (``low > bound``)."""

    name: str
    what: str
    mean: float
    low: float
    high: float
    n_bases: int
    threshold: float
    bound: float

    @property
    def passed(self) -> bool:
        return bool(math.isfinite(self.low) and self.mean >= self.threshold and self.low > self.bound)


def gate_spec(cfg: Config) -> tuple[TestbedGate, str, int, list[str], list[int]]:
    """The declared gate, its benchmark, its largest k, its base models and its training seeds."""
    gate = cfg.report.gate
    if gate is None:
        raise ConfigError("the config declares no report.gate; merge config/gate.yaml (--config)")
    bench = gate.benchmark or cfg.report.primary.benchmark or cfg.evaluation.benchmarks[0]
    if bench not in cfg.evaluation.benchmarks:
        raise ConfigError(f"report.gate.benchmark {bench!r} is not one of evaluation.benchmarks")
    return gate, bench, max(cfg.evaluation.ks), list(cfg.study.main.models), list(cfg.study.main.seeds)


def _passk(problems: pd.DataFrame, bench: str, model: str, method: str, k: int) -> dict[int | None, float]:
    """Pass@k in points of each run of ``model``/``method`` (key: its seed; None for the base model)."""
    sub = problems[
        (problems["benchmark"] == bench) & (problems["model"] == model) & (problems["method"] == method)
    ]
    out: dict[int | None, float] = {}
    for seed, runs in sub.groupby(sub["seed"].astype("Int64"), dropna=False, sort=True):
        n, c = runs["n"].astype(int).to_numpy(), runs["c"].astype(int).to_numpy()
        key = None if pd.isna(seed) else int(seed)
        out[key] = 100.0 * float(pass_at_k_array(n, c, k).mean())
    return out


def per_base(problems: pd.DataFrame, cfg: Config, ks: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per (base model, k): the base model's Pass@k, and the baseline's and the control's as the mean
    over their seeds, in points; ``control_minus_baseline`` is paired by seed.

    Raises:
        MissingInputError: a base model, or a seed of the baseline or the control, has no counts.
    """
    gate, bench, _, models, seeds = gate_spec(cfg)
    rows = []
    for model in models:
        for k in ks or cfg.evaluation.ks:
            base = _passk(problems, bench, model, BASE_METHOD, k)
            arms = {m: _passk(problems, bench, model, m, k) for m in (gate.baseline, gate.control)}
            missing = [f"{model}/{BASE_METHOD}"] if not base else []
            missing += [f"{model}/{m}/seed{s}" for m, got in arms.items() for s in seeds if s not in got]
            if missing:
                raise MissingInputError(f"no {bench} counts for {missing[0]} ({len(missing)} run(s) missing)")
            b, c = (np.array([arms[m][s] for s in seeds]) for m in (gate.baseline, gate.control))
            rows.append(
                {
                    "model": model,
                    "k": int(k),
                    "base": float(np.mean(list(base.values()))),
                    "baseline": float(b.mean()),
                    "control": float(c.mean()),
                    "control_minus_baseline": float((c - b).mean()),
                }
            )
    return pd.DataFrame(rows)


def criteria(table: pd.DataFrame, gate: TestbedGate, k_max: int) -> list[Criterion]:
    """The gate's four tests from :func:`per_base` (every base's row at k = 1 and at ``k_max``)."""
    at = {k: table[table["k"] == k].set_index("model") for k in (1, k_max)}

    def test(name: str, what: str, diffs: pd.Series, threshold: float, bound: float = 0.0) -> Criterion:
        ci = mean_ci(diffs.to_numpy(dtype=float), level=gate.confidence)
        return Criterion(name, what, ci.mean, ci.low, ci.mean + ci.half_width, ci.n, threshold, bound)

    one, top = at[1], at[k_max]
    return [
        test(
            "sharpening",
            "baseline Pass@1 minus the base's",
            one["baseline"] - one["base"],
            gate.sharpening_min,
        ),
        test(
            "narrowing",
            f"the base's Pass@{k_max} minus the baseline's",
            top["base"] - top["baseline"],
            gate.narrowing_min,
        ),  # fmt: skip
        test(
            "control keeps coverage",
            f"control Pass@{k_max} minus the baseline's",
            top["control_minus_baseline"],
            gate.control_min,
        ),  # fmt: skip
        test(
            "control keeps accuracy",
            "control Pass@1 minus the base's",
            one["control"] - one["base"],
            -gate.control_p1_margin,
            bound=-gate.control_p1_margin,
        ),  # fmt: skip
    ]


def _pts(x: float, sign: bool = True) -> str:
    return "-" if not math.isfinite(x) else (f"{x:+.1f}" if sign else f"{x:.1f}")


def render_gate(table: pd.DataFrame, cfg: Config) -> tuple[str, bool]:
    """The gate's report (Markdown) and whether every criterion passed."""
    gate, bench, k_max, models, seeds = gate_spec(cfg)
    found = criteria(table, gate, k_max)
    base_disp, ctrl_disp = cfg.methods[gate.baseline].display, cfg.methods[gate.control].display
    level = f"{100 * gate.confidence:g}%"
    out = [
        f"## Testbed gate: {cfg.name}, {bench}, {len(models)} base models x {len(seeds)} seeds",
        "",
        f"Baseline {base_disp}, positive control {ctrl_disp}. Each difference is taken per base model (methods: the "
        f"mean over seeds) and averaged over bases; {level} t interval over bases. The problems are held fixed.",
        "",
        f"| criterion | difference (points) | mean | {level} CI | passes when | result |",
        "|---|---|---:|---|---|---|",
    ]
    for c in found:
        rule = f"mean >= {c.threshold:+.1f}, CI above {c.bound:+.1f}"
        ci = f"{_pts(c.low)} to {_pts(c.high)}" if math.isfinite(c.low) else f"none ({c.n_bases} base)"
        out.append(
            f"| {c.name} | {c.what} | {_pts(c.mean)} | {ci} | {rule} | {'PASS' if c.passed else 'FAIL'} |"
        )
    passed = all(c.passed for c in found)
    out += ["", f"Gate: {'PASS' if passed else 'FAIL'}", ""]
    out.append(f"## Pass@k, mean over base models ({level} t half-width over bases)")
    out.append("")
    ks = sorted(set(table["k"]))
    out.append("| | " + " | ".join(f"k={k}" for k in ks) + " |")
    out.append("|---|" + "---:|" * len(ks))
    for col, label in (("base", "Base model"), ("baseline", base_disp), ("control", ctrl_disp)):
        band = [mean_ci(table[table["k"] == k][col].to_numpy(dtype=float), level=gate.confidence) for k in ks]
        cells = [f"{_pts(b.mean, sign=False)} ± {_pts(b.half_width, sign=False)}" for b in band]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "## Every base model (points)", ""]
    top = table[table["k"].isin([1, k_max])].pivot(index="model", columns="k")
    out.append(f"| base model | base @1 | {base_disp} @1 | {ctrl_disp} @1 | base @{k_max} | {base_disp} @{k_max} "
               f"| {ctrl_disp} @{k_max} |")  # fmt: skip
    out.append("|---|" + "---:|" * 6)
    for model in models:
        values = [
            float(top.loc[model, (col, k)]) for k in (1, k_max) for col in ("base", "baseline", "control")
        ]
        out.append(f"| {model} | " + " | ".join(_pts(x, sign=False) for x in values) + " |")
    return "\n".join(out) + "\n", passed


def gate_files(root: Path, cfg: Config, run_hint: str) -> list[Path]:
    """The Pass@k files the gate reads: every base model and every seed of the baseline and the control.

    Raises:
        MissingInputError: a file is missing (the message names the first and the command that makes it).
    """
    gate, bench, _, models, seeds = gate_spec(cfg)
    runs = [Run(m, BASE_METHOD, 0) for m in models]
    runs += [Run(m, me, s) for m in models for me in (gate.baseline, gate.control) for s in seeds]
    return require_passk_files([paths.passk_file(root, bench, r) for r in runs], run_hint)


def _figure(table: pd.DataFrame, cfg: Config, out: Path) -> None:
    """The crossover: Pass@k of the base model, the baseline and the control (mean over bases, t band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gate, bench, *_ = gate_spec(cfg)
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    labels = {"base": "Base model", "baseline": cfg.methods[gate.baseline].display,
              "control": cfg.methods[gate.control].display}  # fmt: skip
    for col, style, color in (("base", "--", "k"), ("baseline", "-o", "C0"), ("control", "-s", "C2")):
        ks, means, halves = [], [], []
        for k, rows in table.groupby("k"):
            ci = mean_ci(rows[col].to_numpy(dtype=float), level=gate.confidence)
            ks.append(int(k))
            means.append(ci.mean)
            halves.append(ci.half_width if math.isfinite(ci.half_width) else 0.0)
        ax.plot(ks, means, style, color=color, label=labels[col], markersize=4)
        ax.fill_between(ks, np.subtract(means, halves), np.add(means, halves), alpha=0.15, color=color)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel(f"Pass@k on {bench} (%)")
    ax.legend(frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Print the testbed gate (report.gate): each criterion with its interval over base models and PASS or FAIL,
    from the study's folder or from the per-run data ``--export`` wrote (``--data``). Exit 0: the gate passes;
    5: it ran and failed; 3: a run's Pass@k file or counts are missing (it names one)."""
    ap = argparse.ArgumentParser(prog="acerl report gate", description=main.__doc__)
    ap.add_argument("--config", type=Path, action="append", required=True,
                    help="config files merged over config/config.yaml (config/gate.yaml); repeatable")  # fmt: skip
    ap.add_argument(
        "--root", type=Path, default=Path("."), help="the gate study's work directory (default .)"
    )
    ap.add_argument("--figure", type=Path, default=None, help="write the Pass@k crossover here (.png/.pdf)")
    ap.add_argument("--export", type=Path, default=None,
                    help="also write the gate's per-run data (counts.csv, passk.csv) to this folder")  # fmt: skip
    ap.add_argument("--data", type=Path, default=None,
                    help="read the per-run data from a folder --export wrote instead of the study's folder")  # fmt: skip
    args = ap.parse_args(argv)
    if args.data is not None and args.export is not None:
        ap.error("--data reads a folder --export writes; give one of the two")
    configs = " ".join(f"--config {c}" for c in args.config)
    try:
        cfg = load_config([Path("config/config.yaml"), *args.config])
        if args.data is not None:
            fix = f"acerl report gate {configs} --root <the gate study's folder> --export {args.data}"
            problems = read_exported_counts(args.data, fix)
        else:
            run_hint = "snakemake -c2 all " + " ".join(f"--configfile {c}" for c in args.config)
            problems = load_passk_problems(gate_files(args.root, cfg, run_hint))
        table = per_base(problems, cfg)
        report, passed = render_gate(table, cfg)
        if args.figure is not None:
            _figure(table, cfg, args.figure)
        if args.export is not None:
            write_counts_csv(problems, args.export, cfg.evaluation.ks)
    except UserError as e:
        print(f"acerl report gate: {e.kind}: {e}", file=sys.stderr)
        return e.exit_code
    print(report, end="")
    return 0 if passed else GATE_FAILED


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report.gate", main))
