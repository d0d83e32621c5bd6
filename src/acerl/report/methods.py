"""Methods beyond the paper (``report.methods``, config/methods.yaml): each method's Pass@k with its interval, the
differences paired by seed against the baseline (GRPO) and the reference (ACE-GRPO), Holm-adjusted over the
methods within each family, and the MDE at the observed spread; the Pass@k curve of every method; the training
diagnostics (overconfident-error fraction, entropy) of each method against the baseline.

The statistics are the project's own (:func:`acerl.evaluate.stats.mean_ci`, :func:`acerl.evaluate.power.paired_effect`,
:func:`acerl.evaluate.stats.holm`, :func:`acerl.report.training.paired_diagnostics`); this module only arranges
them for the declared comparison (docs/results.md, "Methods beyond the paper").

    acerl report methods --config config/methods.yaml [--root .] [--figure results/methods_passk.png]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from acerl import paths
from acerl.config import Config, ConfigError, MethodsComparison, Run, load_config
from acerl.errors import MissingInputError, UserError
from acerl.evaluate.power import paired_effect
from acerl.evaluate.stats import holm, mean_ci
from acerl.report.frames import load_passk_problems
from acerl.report.power import run_matrix
from acerl.report.training import last_steps_frame, paired_diagnostics

__all__ = ["comparison_runs", "methods_curves", "methods_table", "main"]


def comparison_runs(cfg: Config) -> tuple[MethodsComparison, str, list[str], list[int]]:
    """The declared comparison, its model (the main grid's one), every method it reads and its seeds."""
    mc = cfg.report.methods
    if mc is None:
        raise ConfigError("the config declares no report.methods; merge config/methods.yaml (--config)")
    models = cfg.study.main.models
    if len(models) != 1:
        raise ConfigError(f"report.methods compares on one model; study.main.models has {models}")
    methods = [mc.baseline, *([mc.reference] if mc.reference else []), *mc.methods]
    return mc, models[0], list(dict.fromkeys(methods)), list(mc.seeds or cfg.study.main.seeds)


def _per_seed_passk(problems: pd.DataFrame, bench: str, model: str, method: str, k: int) -> pd.Series:
    """Pass@k in points per seed (the mean over problems), indexed by seed."""
    m = run_matrix(problems, bench, model, method)
    return pd.Series(100.0 * m.passk(k).mean(axis=1), index=list(m.seeds), name=method)


def methods_table(
    problems: pd.DataFrame, mc: MethodsComparison, bench: str, model: str, k: int, alpha: float | None = None
) -> pd.DataFrame:
    """One row per method of the comparison (baseline and reference first): ``n_seeds``, ``passk`` and its t
    half-width ``ci`` over seeds (points), and for each reference ``r`` in (baseline, reference): ``d_<r>`` (the
    method minus ``r``, paired by seed), ``lo_<r>``/``hi_<r>`` (its ``1 - alpha`` t interval), ``p_<r>``,
    ``holm_<r>`` (Holm over ``mc.methods``), ``mde_<r>`` (power 0.8), and ``expected`` (the declared direction)."""
    alpha = mc.alpha if alpha is None else alpha
    order = list(dict.fromkeys([mc.baseline, *([mc.reference] if mc.reference else []), *mc.methods]))
    per_seed = {m: _per_seed_passk(problems, bench, model, m, k) for m in order}
    rows = []
    for m in order:
        ci = mean_ci(per_seed[m].to_numpy())
        rows.append({"method": m, "n_seeds": ci.n, "passk": ci.mean, "ci": ci.half_width})
    table = pd.DataFrame(rows).set_index("method")
    for ref in [mc.baseline, *([mc.reference] if mc.reference else [])]:
        for m in order:
            if m == ref:
                continue
            common = sorted(set(per_seed[m].index) & set(per_seed[ref].index))
            eff = paired_effect(
                per_seed[m][common].to_numpy() - per_seed[ref][common].to_numpy(), alpha=alpha
            )
            for col, value in (("d", eff.delta), ("lo", eff.ci_low), ("hi", eff.ci_high), ("p", eff.pvalue),
                               ("mde", eff.mde)):  # fmt: skip
                table.loc[m, f"{col}_{ref}"] = value
        family = [m for m in mc.methods if m != ref]
        table.loc[family, f"holm_{ref}"] = holm(table.loc[family, f"p_{ref}"].to_numpy())
    table["expected"] = [mc.expected.get(m, "") for m in table.index]
    return table


def methods_curves(
    problems: pd.DataFrame, methods: Sequence[str], bench: str, model: str, ks: Sequence[int]
) -> pd.DataFrame:
    """Pass@k curves: one row per (method, k) with the mean over seeds and its 95% t half-width (points)."""
    rows = []
    for m in methods:
        for k in ks:
            ci = mean_ci(_per_seed_passk(problems, bench, model, m, k).to_numpy())
            rows.append({"method": m, "k": k, "passk": ci.mean, "ci": ci.half_width, "n_seeds": ci.n})
    return pd.DataFrame(rows)


def _fmt(x: float, digits: int = 1, sign: bool = False) -> str:
    if x is None or not math.isfinite(float(x)):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def render_table(
    table: pd.DataFrame, mc: MethodsComparison, displays: dict[str, str], bench: str, k: int
) -> str:
    """The "methods beyond the paper" table as Markdown."""
    refs = [mc.baseline, *([mc.reference] if mc.reference else [])]
    level = round(100 * (1 - mc.alpha))
    head = f"| method | seeds | Pass@{k} ({bench}) | "
    head += (
        " | ".join(f"minus {displays[r]} ({level}% CI) | p | Holm p | MDE" for r in refs) + " | expected |"
    )
    lines = [head, "|" + "---|" * (3 + 4 * len(refs) + 1)]
    for m, row in table.iterrows():
        cells = [displays[m], str(int(row["n_seeds"])), f"{_fmt(row['passk'])} ± {_fmt(row['ci'])}"]
        for r in refs:
            if m == r or f"d_{r}" not in row or not math.isfinite(row.get(f"d_{r}", math.nan)):
                cells += ["", "", "", ""]
                continue
            cells.append(
                f"{_fmt(row[f'd_{r}'], sign=True)} ({_fmt(row[f'lo_{r}'], sign=True)} to {_fmt(row[f'hi_{r}'], sign=True)})"
            )
            cells += [_fmt(row[f"p_{r}"], 3), _fmt(row.get(f"holm_{r}", math.nan), 3), _fmt(row[f"mde_{r}"])]
        cells.append(str(row["expected"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figure(curves: pd.DataFrame, displays: dict[str, str], bench: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, sub in curves.groupby("method", sort=False):
        ax.errorbar(
            sub["k"], sub["passk"], yerr=sub["ci"].fillna(0), label=displays[m], marker="o", capsize=2
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel(f"Pass@k on {bench} (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Print the methods-beyond-the-paper table, the Pass@k curves and the training diagnostics (Markdown) of the
    comparison declared in ``report.methods``. Exit code 3: a run's Pass@k file is missing (it names one)."""
    ap = argparse.ArgumentParser(prog="acerl report methods", description=main.__doc__)
    ap.add_argument("--config", type=Path, action="append", required=True,
                    help="config files merged over config/config.yaml (e.g. config/methods.yaml); repeatable")  # fmt: skip
    ap.add_argument("--root", type=Path, default=Path("."), help="the study's work directory (default .)")
    ap.add_argument("--benchmark", default=None, help="default: report.primary's")
    ap.add_argument("--figure", type=Path, default=None, help="write the Pass@k curves here (.png/.pdf)")
    ap.add_argument("--last", type=int, default=5, help="training steps averaged per run for the diagnostics")
    args = ap.parse_args(argv)
    try:
        cfg = load_config([Path("config/config.yaml"), *args.config])
        mc, model, methods, seeds = comparison_runs(cfg)
        bench = args.benchmark or cfg.report.primary.benchmark or cfg.evaluation.benchmarks[0]
        k = cfg.report.primary.k or max(cfg.evaluation.ks)
        files = [paths.passk_file(args.root, bench, Run(model, m, s)) for m in methods for s in seeds]
        missing = [f for f in files if not Path(f).is_file()]
        if missing:
            raise MissingInputError(
                f"{missing[0]}: no Pass@k file ({len(missing)} of {len(files)} missing); run the study first: "
                f"snakemake -c2 all {' '.join('--configfile ' + str(c) for c in args.config)}"
            )
        problems = load_passk_problems(files)
        displays = {m: cfg.methods[m].display for m in methods}
        table = methods_table(problems, mc, bench, model, k)
        print(f"## Methods beyond the paper: Pass@{k} on {bench}, {model}, paired by seed\n")
        print(render_table(table, mc, displays, bench, k))
        curves = methods_curves(problems, methods, bench, model, cfg.evaluation.ks)
        print("\n## Pass@k per method (mean ± 95% t half-width over seeds)\n")
        wide = curves.pivot(index="method", columns="k", values="passk").loc[methods]
        half = curves.pivot(index="method", columns="k", values="ci").loc[methods]
        print("| method | " + " | ".join(f"k={k_}" for k_ in wide.columns) + " |")
        print("|---|" + "---:|" * len(wide.columns))
        for m in methods:
            cells = [f"{_fmt(wide.loc[m, k_])} ± {_fmt(half.loc[m, k_])}" for k_ in wide.columns]
            print(f"| {displays[m]} | " + " | ".join(cells) + " |")
        metrics = [paths.train_metrics_file(args.root, Run(model, m, s)) for m in methods for s in seeds]
        metrics = [p for p in metrics if Path(p).is_file()]
        if metrics:
            diag = paired_diagnostics(
                last_steps_frame(metrics, last=args.last), {m: mc.baseline for m in mc.methods}
            )
            print(
                f"\n## Training diagnostics, each method minus {displays[mc.baseline]} (last {args.last} steps)\n"
            )
            print(diag.to_string(index=False))
        if args.figure is not None:
            _figure(curves, displays, bench, args.figure)
    except UserError as e:
        print(f"acerl report methods: {e.kind}: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report.methods", main))
