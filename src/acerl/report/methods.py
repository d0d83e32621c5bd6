"""Methods beyond the paper (``report.methods``, config/methods.yaml): each method's Pass@k with its interval, the
differences paired by seed against the baseline (GRPO) and the reference (ACE-GRPO), Holm-adjusted over the
methods within each family, and the MDE at the observed spread; the Pass@k curve of every method; the training
diagnostics (overconfident-error fraction, entropy) of each method against the baseline.

The statistics are the project's own (:func:`acerl.evaluate.stats.mean_ci`, :func:`acerl.evaluate.power.paired_effect`,
:func:`acerl.evaluate.stats.holm`, :func:`acerl.report.training.paired_diagnostics`); this module only arranges
them for the declared comparison (docs/results.md, "Methods beyond the paper").

    acerl report methods --config config/methods.yaml [--root .] [--figure results/methods_passk.png]
    acerl report methods --config config/methods.yaml --export docs/results/methods/synth_easy  # per-seed data
    acerl report methods --config config/methods.yaml --data docs/results/methods/synth_easy    # the report
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from acerl.config import BASE_METHOD, Config, ConfigError, MethodsComparison, Run, load_config
from acerl.errors import BadInputError, MissingInputError, UserError
from acerl.evaluate.power import mde_paired, paired_effect, seeds_problems_ci
from acerl.evaluate.stats import holm, mean_ci
from acerl.passk import pass_at_k_array
from acerl.pipeline import paths
from acerl.pipeline.io import write_text
from acerl.report.frames import load_passk_problems
from acerl.report.per_seed import strip_figure
from acerl.report.power import read_counts_csv, run_matrix, write_counts_csv
from acerl.report.sequential import per_seed_frame
from acerl.report.spec import DisplayNames
from acerl.report.style import method_style, report_style
from acerl.report.table_format import Cell, Row, Table, p_parts, to_markdown
from acerl.report.training import last_steps_frame, paired_diagnostics, read_last_steps_csv

__all__ = [
    "references",
    "compared_methods",
    "planning_alpha",
    "comparison_runs",
    "methods_curves",
    "methods_figure",
    "base_passk",
    "methods_table",
    "methods_report_table",
    "study_files",
    "require_passk_files",
    "read_exported_counts",
    "training_files",
    "export_data",
    "data_inputs",
    "render_report",
    "render_every_seed",
    "main",
]


def references(mc: MethodsComparison) -> list[str]:
    """What each method is compared with: the baseline, then the reference where there is one."""
    return [mc.baseline, *([mc.reference] if mc.reference else [])]


def compared_methods(mc: MethodsComparison) -> list[str]:
    """Every method the comparison reads, references first, each once."""
    return list(dict.fromkeys([*references(mc), *mc.methods]))


def planning_alpha(mc: MethodsComparison) -> float:
    """The alpha of the MDE the report prints: Holm's most stringent step, ``alpha`` over the number of methods.
    It is the alpha the design's seeds were planned at (config/methods.yaml), so planned and achieved MDE are
    compared at one alpha."""
    return mc.alpha / len(mc.methods)


def comparison_runs(cfg: Config) -> tuple[MethodsComparison, str, list[str], list[int]]:
    """The declared comparison, its model (the main grid's one), every method it reads and its seeds."""
    mc = cfg.report.methods
    if mc is None:
        raise ConfigError("the config declares no report.methods; merge config/methods.yaml (--config)")
    models = cfg.study.main.models
    if len(models) != 1:
        raise ConfigError(f"report.methods compares on one model; study.main.models has {models}")
    return mc, models[0], compared_methods(mc), list(mc.seeds or cfg.study.main.seeds)


def _per_seed_passk(problems: pd.DataFrame, bench: str, model: str, method: str, k: int) -> pd.Series:
    """Pass@k in points per seed (the mean over problems), indexed by seed."""
    m = run_matrix(problems, bench, model, method)
    return pd.Series(100.0 * m.passk(k).mean(axis=1), index=list(m.seeds), name=method)


def _problems_random_ci(
    problems: pd.DataFrame, bench: str, model: str, method: str, k: int
) -> tuple[float, float]:
    """The 95% interval of a method's Pass@k (points) with seeds and problems both random
    (:func:`acerl.evaluate.power.seeds_problems_ci` on its ``(seeds, problems)`` Pass@k): what another problem
    set from the same distribution would give, for the absolute level."""
    return seeds_problems_ci(100.0 * run_matrix(problems, bench, model, method).passk(k))


def methods_table(
    problems: pd.DataFrame, mc: MethodsComparison, bench: str, model: str, k: int, alpha: float | None = None
) -> pd.DataFrame:
    """One row per method of the comparison (baseline and reference first): ``n_seeds``, ``passk`` and its t
    half-width ``ci`` over seeds (points; the benchmark's problems held fixed), ``pr_low``/``pr_high`` (its 95%
    interval with seeds and problems both random), and for each reference ``r`` in (baseline, reference):
    ``d_<r>`` (the method minus ``r``, paired by seed), ``lo_<r>``/``hi_<r>`` (its ``1 - alpha`` t interval),
    ``p_<r>``, ``holm_<r>`` (Holm over ``mc.methods``), ``mde_<r>`` (power 0.8, two-sided alpha
    :func:`planning_alpha`, the alpha the seeds were planned at), and ``expected`` (the declared direction)."""
    alpha = mc.alpha if alpha is None else alpha
    order = compared_methods(mc)
    per_seed = {m: _per_seed_passk(problems, bench, model, m, k) for m in order}
    rows = []
    for m in order:
        ci = mean_ci(per_seed[m].to_numpy())
        low, high = _problems_random_ci(problems, bench, model, m, k)
        rows.append({"method": m, "n_seeds": ci.n, "passk": ci.mean, "ci": ci.half_width, "pr_low": low,
                     "pr_high": high})  # fmt: skip
    table = pd.DataFrame(rows).set_index("method")
    for ref in references(mc):
        for m in order:
            if m == ref:
                continue
            common = sorted(set(per_seed[m].index) & set(per_seed[ref].index))
            eff = paired_effect(
                per_seed[m][common].to_numpy() - per_seed[ref][common].to_numpy(), alpha=alpha
            )
            mde = mde_paired(eff.sd, eff.n_seeds, planning_alpha(mc))
            for col, value in (("d", eff.delta), ("lo", eff.ci_low), ("hi", eff.ci_high), ("p", eff.pvalue),
                               ("mde", mde)):  # fmt: skip
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


BASE_LABEL = "Base model (untrained, one evaluation)"
BASE_ABSENT = (
    "The base model's counts are not in these data (an export made without them); the report on the study's "
    "folder shows its row."
)


def base_passk(problems: pd.DataFrame, bench: str, model: str, ks: Sequence[int]) -> dict[int, float] | None:
    """The untrained base model's Pass@k in points at each k (its one evaluation: no interval over seeds); None
    when the counts hold no base model (``study.main.include_base: false``)."""
    sub = problems[
        (problems["benchmark"] == bench) & (problems["model"] == model) & (problems["method"] == BASE_METHOD)
    ]
    if sub.empty:
        return None
    n, c = sub["n"].astype(int).to_numpy(), sub["c"].astype(int).to_numpy()
    return {k: 100.0 * float(pass_at_k_array(n, c, k).mean()) for k in ks}


def _fmt(x: float, digits: int = 1, sign: bool = False) -> str:
    if x is None or not math.isfinite(float(x)):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def methods_report_table(
    table: pd.DataFrame, mc: MethodsComparison, names: DisplayNames, bench: str, k: int
) -> Table:
    """The "methods beyond the paper" table (:func:`methods_table`'s rows) as a report table: Pass@k with its t
    half-width, then for GRPO and ACE-GRPO each the difference with its interval, Holm p and MDE, and the
    declared direction. ``acerl report methods`` prints it; the study report writes it (``methods_<bench>``)."""
    refs = references(mc)
    level = round(100 * (1 - mc.alpha))
    mde_alpha = f"{planning_alpha(mc):.3g}"
    header = ["Method", "Seeds", f"Pass@{k}", "95% CI, problems random"]
    for r in refs:
        header += [f"minus {names.method(r)} (Holm p)", f"{level}% CI", "p", f"MDE (α {mde_alpha})"]
    rows = []
    for m, row in table.iterrows():
        cells = [
            Cell(raw=str(int(row["n_seeds"]))),
            Cell(value=row["passk"], ci=row["ci"]),
            Cell(raw=f"{_fmt(row['pr_low'])} to {_fmt(row['pr_high'])}"),
        ]
        for r in refs:
            d = row.get(f"d_{r}", math.nan)
            # a cell per method of the comparison; the reference against the baseline too, not the reverse
            wanted = m in mc.methods or (r == mc.baseline and m == mc.reference)
            if not wanted or not math.isfinite(d):
                cells += [Cell(raw="")] * 4
                continue
            p_raw, holm_p = row[f"p_{r}"], row.get(f"holm_{r}", math.nan)
            cells += [
                Cell(value=d, signed=True, pvalue=holm_p if math.isfinite(holm_p) else None),
                Cell(raw=f"{_fmt(row[f'lo_{r}'], sign=True)} to {_fmt(row[f'hi_{r}'], sign=True)}"),
                Cell(raw="".join(p_parts(p_raw)).lstrip("=") if math.isfinite(p_raw) else "-"),
                Cell(value=row[f"mde_{r}"]),
            ]
        cells.append(Cell(raw=mc.expected.get(str(m), "")))
        rows.append(Row(names.method(str(m)), tuple(cells)))
    header.append("Expected")
    return Table(
        name=f"methods_{bench}",
        caption=f"Methods beyond the paper: Pass@{k} on {names.benchmark(bench)} (%), mean over seeds with its "
        f"95% t interval (problems fixed) and its 95% interval with seeds and problems random; each method "
        f"minus {' and minus '.join(names.method(r) for r in refs)}, paired by seed, with its {level}% t "
        f"interval, Holm's p over the {len(mc.methods)} methods and the MDE at 80% power and two-sided alpha "
        f"{mde_alpha} (Holm's first step, {mc.alpha:g} / {len(mc.methods)}: the alpha the seeds were planned at)",
        label=f"tab:methods_{bench}",
        header=tuple(header),
        groups=(tuple(rows),),
        align="l" + "r" * (len(header) - 2) + "l",
        notes=(
            "Expected: the direction the literature predicts against the baseline, declared before any run "
            "(report.methods.expected); p unadjusted, Holm p within each family of tests.",
            "Every interval but the problems-random one holds the benchmark's problems fixed: it is about these "
            "problems, not a new set from the same distribution. The problems-random interval (seeds x problems "
            "random effects, acerl.evaluate.power.seeds_problems_ci) is the one for the absolute level. The "
            "paired differences' intervals hold the problems fixed too: they answer for these problems.",
        ),  # fmt: skip
    )


def methods_figure(
    curves: pd.DataFrame, displays: dict[str, str], bench: str, base: dict[int, float] | None = None
) -> Figure:
    """Pass@k against k (log 2 axis) per method with its 95% t half-width, and the base model's line, each in
    the method's fixed colour and line style (:func:`acerl.report.style.method_style`)."""
    with report_style():
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
        for m, sub in curves.groupby("method", sort=False):
            style = method_style(str(m))
            ax.errorbar(sub["k"], sub["passk"], yerr=sub["ci"].fillna(0), label=displays[str(m)], capsize=2,
                        **style.line_kwargs())  # fmt: skip
        if base is not None:
            ax.plot(
                list(base), list(base.values()), label=BASE_LABEL, **method_style(BASE_METHOD).line_kwargs()
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel(f"Pass@k on {bench} (%)")
        ax.legend(fontsize=8)
    return fig


def _save(fig: Figure, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


TRAINING_CSV = "training.csv"
"""The training diagnostics' file in an ``--export`` folder (beside ``counts.csv`` and ``passk.csv``)."""
DEFAULT_LAST = 5
"""Training steps averaged per run for the diagnostics, unless ``--last`` or an exported file says otherwise."""


def study_files(root: Path, cfg: Config, benchmarks: Sequence[str], run_hint: str) -> list[Path]:
    """The Pass@k files of every run of the comparison on ``benchmarks``; ``run_hint`` is the command that
    runs the study (for the error).

    Raises:
        MissingInputError: a run's file is missing (the message names the first and the command that makes it).
    """
    _, model, methods, seeds = comparison_runs(cfg)
    runs = [Run(model, m, s) for m in methods for s in seeds]
    if cfg.study.main.include_base:
        runs.append(Run(model, BASE_METHOD, 0))
    return require_passk_files([paths.passk_file(root, b, r) for b in benchmarks for r in runs], run_hint)


def read_exported_counts(directory: Path, fix: str) -> pd.DataFrame:
    """The per-problem counts of a folder ``--export`` wrote (``counts.csv``); ``fix`` is the command that writes
    it again. Raises :class:`MissingInputError` (no file) or :class:`BadInputError` (not what --export writes)."""
    counts = directory / "counts.csv"
    if not counts.is_file():
        raise MissingInputError(f"{counts}: no such file; write the folder with: {fix}")
    try:
        return read_counts_csv(counts)
    except ValueError as err:
        raise BadInputError(f"{err}; write the folder again with: {fix}") from None


def require_passk_files(files: list[Path], run_hint: str) -> list[Path]:
    """``files`` when every one exists, else :class:`MissingInputError` naming the first missing, how many are
    missing, and ``run_hint`` (the command that runs the study)."""
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise MissingInputError(
            f"{missing[0]}: no Pass@k file ({len(missing)} of {len(files)} missing); run the study first: "
            f"{run_hint}"
        )
    return files


def training_files(root: Path, cfg: Config) -> list[Path]:
    """The ``metrics.jsonl`` of every training run of the comparison that has one."""
    _, model, methods, seeds = comparison_runs(cfg)
    files = [paths.train_metrics_file(root, Run(model, m, s)) for m in methods for s in seeds]
    return [Path(p) for p in files if Path(p).is_file()]


def export_data(
    problems: pd.DataFrame, training: pd.DataFrame | None, last: int, directory: Path, ks: Sequence[int]
) -> list[Path]:
    """The comparison's per-seed data as the small files a colleague regenerates the report from (``--data``):
    ``counts.csv`` and ``passk.csv`` (:func:`acerl.report.power.write_counts_csv`) and ``training.csv`` (each
    run's last-steps diagnostics, the format of ``acerl report training --export``)."""
    out = list(write_counts_csv(problems, directory, ks))
    if training is not None:
        csv = training.assign(last=last).to_csv(index=False, float_format="%.10g")
        out.append(write_text(directory / TRAINING_CSV, csv))
    return out


def data_inputs(
    directory: Path, cfg: Config, bench: str, last: int | None, fix: str
) -> tuple[pd.DataFrame, pd.DataFrame | None, int]:
    """The per-problem counts and the training diagnostics from a folder ``--export`` wrote, checked to hold
    every run of the comparison on ``bench``; ``fix`` is the command that writes the folder again.

    Raises:
        MissingInputError: the folder lacks ``counts.csv`` or a run (the message names the first).
        BadInputError: a file that is not what ``--export`` writes, or ``last`` differs from the file's.
    """
    _, model, methods, seeds = comparison_runs(cfg)
    counts = directory / "counts.csv"  # named in the errors below
    problems = read_exported_counts(directory, fix)
    sub = problems[(problems["benchmark"] == bench) & (problems["model"] == model)]
    have = {(m, int(s)) for m, s in zip(sub["method"], sub["seed"], strict=True) if not pd.isna(s)}
    missing = [f"{model}/{m}/seed{s}" for m in methods for s in seeds if (m, s) not in have]
    if missing:
        raise MissingInputError(
            f"{counts}: no {bench} counts for {missing[0]} ({len(missing)} of {len(methods) * len(seeds)} runs "
            f"missing); write the folder again with: {fix}"
        )
    training_csv = directory / TRAINING_CSV
    if not training_csv.is_file():
        return problems, None, DEFAULT_LAST if last is None else last
    frame, file_last = read_last_steps_csv(training_csv)
    if last is not None and last != file_last:
        raise BadInputError(f"{training_csv}: made with --last {file_last}, not {last}; drop --last")
    return problems, frame, file_last


def render_report(
    problems: pd.DataFrame,
    training: pd.DataFrame | None,
    last: int,
    cfg: Config,
    bench: str,
    figure: Path | None = None,
    strip: Path | None = None,
) -> str:
    """The whole report (Markdown): the table at the primary k, Pass@k per method (and the base model's, when
    the counts hold it) at every k, every seed's difference from the baseline, and the training diagnostics of
    each method minus the baseline; with ``figure``, the Pass@k curves drawn there; with ``strip``, every seed's
    difference."""
    mc, model, methods, seeds = comparison_runs(cfg)
    k = cfg.report.primary.k or max(cfg.evaluation.ks)
    against_baseline = {m: mc.baseline for m in methods if m != mc.baseline}
    displays = {m: cfg.methods[m].display for m in methods}
    table = methods_table(problems, mc, bench, model, k)
    out = [f"## Methods beyond the paper: Pass@{k} on {bench}, {model}, paired by seed\n"]
    names = DisplayNames(methods=displays, benchmarks={bench: bench})
    out.append(to_markdown(methods_report_table(table, mc, names, bench, k)))
    curves = methods_curves(problems, methods, bench, model, cfg.evaluation.ks)
    out.append(
        "\n## Pass@k per method (mean ± 95% t half-width over seeds, the benchmark's problems held fixed; at "
        f"Pass@{k} the table above gives the interval with problems random too)\n"
    )
    wide = curves.pivot(index="method", columns="k", values="passk").loc[methods]
    half = curves.pivot(index="method", columns="k", values="ci").loc[methods]
    out.append("| method | " + " | ".join(f"k={k_}" for k_ in wide.columns) + " |")
    out.append("|---|" + "---:|" * len(wide.columns))
    for m in methods:
        cells = [f"{_fmt(wide.loc[m, k_])} ± {_fmt(half.loc[m, k_])}" for k_ in wide.columns]
        out.append(f"| {displays[m]} | " + " | ".join(cells) + " |")
    base = base_passk(problems, bench, model, list(wide.columns))
    if base is not None:
        out.append(f"| {BASE_LABEL} | " + " | ".join(_fmt(v) for v in base.values()) + " |")
    elif cfg.study.main.include_base:
        out.append(f"\n{BASE_ABSENT}")
    per_seed = per_seed_frame(problems, against_baseline, bench, k, stage1=len(seeds))  # one stage
    out.append(f"\n## Every seed: each method minus {displays[mc.baseline]}, Pass@{k} on {bench} (points)\n")
    out.append(render_every_seed(per_seed, displays))
    if training is not None and not training.empty:
        diag = paired_diagnostics(training, against_baseline)
        out.append(
            f"\n## Training diagnostics, each method minus {displays[mc.baseline]} (mean of each run's last "
            f"{last} steps; paired by seed, 95% t interval, p Holm-adjusted over the table)\n"
        )
        diag = diag.drop(columns=["model", "baseline"]).assign(method=diag["method"].map(displays))
        out.append(diag.to_markdown(index=False, floatfmt=".4f"))
    if figure is not None:
        _save(methods_figure(curves, displays, bench, base), figure)
    if strip is not None:
        _save(
            strip_figure(per_seed.assign(pilot=False), k=k, benchmark=bench, names=names, staged=False), strip
        )
    return "\n".join(out) + "\n"


def render_every_seed(per_seed: pd.DataFrame, displays: dict[str, str]) -> str:
    """One row per seed, one column per method: its paired Pass@k difference from the baseline (points)."""
    wide = per_seed.pivot(index="seed", columns="method", values="d").mul(100.0)
    cols = [m for m in displays if m in wide.columns]
    lines = ["| seed | " + " | ".join(displays[m] for m in cols) + " |", "|---:|" + "---:|" * len(cols)]
    for seed, row in wide[cols].iterrows():
        lines.append(f"| {seed} | " + " | ".join(_fmt(row[m], sign=True) for m in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the methods-beyond-the-paper table, the Pass@k curves and the training diagnostics (Markdown) of the
    comparison declared in ``report.methods``, from the study's folder or from the per-seed data ``--export``
    wrote (``--data``). Exit code 3: a run's Pass@k file or counts are missing (it names one)."""
    ap = argparse.ArgumentParser(prog="acerl report methods", description=main.__doc__)
    ap.add_argument("--config", type=Path, action="append", required=True,
                    help="config files merged over config/config.yaml (e.g. config/methods.yaml); repeatable")  # fmt: skip
    ap.add_argument("--root", type=Path, default=Path("."), help="the study's work directory (default .)")
    ap.add_argument("--benchmark", default=None, help="default: report.primary's")
    ap.add_argument("--figure", type=Path, default=None, help="write the Pass@k curves here (.png/.pdf)")
    ap.add_argument("--strip", type=Path, default=None,
                    help="write every seed's difference from the baseline here (.png/.pdf)")  # fmt: skip
    ap.add_argument("--last", type=int, default=None,
                    help="training steps averaged per run for the diagnostics (default 5; with --data, the file's)")  # fmt: skip
    ap.add_argument("--export", type=Path, default=None,
                    help="also write the report's per-seed data (counts.csv, passk.csv of --benchmark; training.csv) "
                    "to this folder")  # fmt: skip
    ap.add_argument("--data", type=Path, default=None,
                    help="read the per-seed data from a folder --export wrote (e.g. docs/results/methods/synth_easy) "
                    "instead of the study's folder")  # fmt: skip
    args = ap.parse_args(argv)
    if args.data is not None and args.export is not None:
        ap.error("--data reads a folder --export writes; give one of the two")
    try:
        cfg = load_config([Path("config/config.yaml"), *args.config])
        bench = args.benchmark or cfg.report.primary.benchmark or cfg.evaluation.benchmarks[0]
        if args.data is not None:
            configs = " ".join(f"--config {c}" for c in args.config)
            fix = f"acerl report methods {configs} --root <the study's folder> --export {args.data}"
            problems, training, last = data_inputs(args.data, cfg, bench, args.last, fix)
        else:
            last = DEFAULT_LAST if args.last is None else args.last
            run_hint = "snakemake -c2 all " + " ".join(f"--configfile {c}" for c in args.config)
            problems = load_passk_problems(study_files(args.root, cfg, [bench], run_hint))
            metrics = training_files(args.root, cfg)
            training = last_steps_frame(metrics, last=last) if metrics else None
        report = render_report(problems, training, last, cfg, bench, args.figure, args.strip)
        if args.export is not None:
            export_data(problems, training, last, args.export, cfg.evaluation.ks)
    except UserError as e:
        print(f"acerl report methods: {e.kind}: {e}", file=sys.stderr)
        return e.exit_code
    print(report, end="")
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.report.methods", main))
