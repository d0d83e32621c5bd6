"""Write every table (.tex + .md) and figure (.pdf + .png) of the report into one folder.

:func:`render_all` works on DataFrames; :func:`render_from_files` and :func:`render_paper` are the thin
file-reading wrappers. Output layout::

    <out>/tables/passk_<benchmark>.{tex,md,html}     Tables 1/2 (every table: LaTeX, Markdown, HTML)
    <out>/tables/significance_<benchmark>.{tex,md}   ACE vs baseline, paired (else Welch) p-values, Holm
    <out>/tables/ablation_modulation.{tex,md}        Table 3
    <out>/tables/alpha_sensitivity.{tex,md}          Table 4
    <out>/tables/power_<benchmark>.{tex,md}          ACE vs baseline: paired CI, seeds-and-problems CI, MDE (per-problem data)
    <out>/tables/per_seed_<primary benchmark>.{tex,md}   every seed's paired difference on the primary endpoint
    <out>/tables/stages_<primary benchmark>.{tex,md}     a staged or piloted design: each stage's estimate
    <out>/tables/hyperparameters.{tex,md}            Table 5
    <out>/tables/ours_vs_paper.{tex,md}              ours vs the published numbers
    <out>/tables/methods_<benchmark>.{tex,md}        the methods beyond the paper (config report.methods)
    <out>/figures/penalty_multiplier.{pdf,png}       Fig. 1 analogue
    <out>/figures/passk_curves.{pdf,png}             Fig. 2
    <out>/figures/passk_difference.{pdf,png}         ACE minus baseline against k, paired by seed
    <out>/figures/per_seed_<primary benchmark>.{pdf,png}  every seed's paired difference (strip plot)
    <out>/figures/training_dynamics.{pdf,png}        pass rate, entropy, KL, length, multiplier, OEF per step
    <out>/figures/oef_dynamics.{pdf,png}             Fig. 3
    <out>/figures/entropy_early.{pdf,png}            Fig. 4
    <out>/report.md                                  every Markdown table and PNG on one page

A piece whose data is absent (no alpha sweep, no diagnostics, ...) is skipped with a log message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from acerl.pipeline.io import write_text
from acerl.pipeline.provenance import software_section, stamps_in
from acerl.pipeline.records import read_json
from acerl.report import figures, per_seed, stat_tables, table_format, tables
from acerl.report.aggregate import (
    MissingData,
    aggregate_seeds,
    ours_vs_paper,
    significance,
    significance_from_summary,
)
from acerl.report.frames import Diagnostics, load_diagnostics, load_passk_problems, load_passk_records
from acerl.report.html import html_page
from acerl.report.methods import compared_methods, methods_report_table, methods_table
from acerl.report.paper import load_paper_hyperparameters, load_paper_results, paper_spec
from acerl.report.power import power_frame
from acerl.report.sequential import per_seed_frame, stage_frame
from acerl.report.spec import ReportSpec
from acerl.report.training import curves_frame

__all__ = ["write_table", "render_all", "render_from_files", "render_paper"]

log = logging.getLogger(__name__)


def write_table(table: table_format.Table, directory: str | Path) -> list[Path]:
    """Write ``<directory>/<table.name>.tex``, ``.md`` and ``.html`` (the Markdown as a page a browser shows,
    :func:`acerl.report.html.html_page`) atomically; returns the three paths."""
    d = Path(directory)
    markdown = table_format.to_markdown(table)
    return [
        write_text(d / f"{table.name}.tex", table_format.to_latex(table)),
        write_text(d / f"{table.name}.md", markdown),
        write_text(d / f"{table.name}.html", html_page(table.name, markdown)),
    ]


def _order(found: Iterable[str], wanted: tuple[str, ...] | None) -> list[str]:
    found = list(dict.fromkeys(found))
    if wanted is None:
        return sorted(found)
    return [x for x in wanted if x in found]


class _Writer:
    """Collects written paths and Markdown sections; turns MissingData into a logged skip."""

    def __init__(self, out: Path, formats: tuple[str, ...]) -> None:
        self.formats = formats
        self.tables = out / "tables"
        self.figures = out / "figures"
        self.written: list[Path] = []
        self.sections: list[str] = []
        self.out = out

    def table(self, what: str, build: Callable[[], table_format.Table]) -> None:
        try:
            table = build()
        except MissingData as e:
            log.info("skipping %s: %s", what, e)
            return
        self.written += write_table(table, self.tables)
        self.sections.append(table_format.to_markdown(table))

    def figure(self, what: str, stem: str, build: Callable[[], Figure]) -> None:
        try:
            fig = build()
        except MissingData as e:
            log.info("skipping %s: %s", what, e)
            return
        paths = figures.save_figure(fig, self.figures / stem, self.formats)
        self.written += paths
        png = [p for p in paths if p.suffix == ".png"]
        if png:
            self.sections.append(f"**{what}**\n\n![{what}]({png[0].relative_to(self.out).as_posix()})\n")


def _per_seed_view(w: _Writer, problems: pd.DataFrame, spec: ReportSpec) -> None:
    """The primary endpoint seed by seed (:mod:`acerl.report.per_seed`): every seed's paired difference as a table
    and a strip plot, and for a staged design (``spec.stage1_seeds``) or one with pilot seeds the estimate of each
    stage and without the pilot seeds."""
    if spec.primary is None:
        log.info("skipping the per-seed view: no primary endpoint")
        return
    bench, k = spec.primary
    have = set(problems.loc[problems["benchmark"] == bench, "method"])
    comparisons = {a: b for a, b in spec.comparisons.items() if {a, b} <= have}
    if not comparisons:
        log.info("skipping the per-seed view: no comparison on %s", bench)
        return
    stage1 = spec.stage1_seeds if spec.stage1_seeds is not None else 10**9  # one stage: every seed in it
    try:
        seeds = per_seed_frame(problems, comparisons, bench, k, stage1=stage1, pilot_seeds=spec.pilot_seeds)
    except ValueError as e:  # no common seed, or other problems: nothing to pair
        log.info("skipping the per-seed view: %s", e)
        return
    staged = spec.stage1_seeds is not None
    names = spec.names
    w.table(
        f"per-seed differences ({bench})",
        lambda: per_seed.per_seed_table(seeds, names=names, benchmark=bench, k=k, staged=staged),
    )
    if staged or bool(seeds["pilot"].any()):
        w.table(
            f"stage table ({bench})",
            lambda: per_seed.stage_table(stage_frame(seeds), names=names, benchmark=bench, k=k),
        )
    w.figure(
        f"Pass@{k} on {bench}, every seed's paired difference",
        f"per_seed_{bench}",
        lambda: per_seed.strip_figure(seeds, k=k, benchmark=bench, names=names, staged=staged),
    )


def _rows_over_seeds(
    runs: pd.DataFrame | None, agg: pd.DataFrame, seeds: Mapping[str, tuple[int, ...]] | None, ci: str = "t"
) -> pd.DataFrame:
    """Aggregate for a table whose rows average given seeds (``{method: seeds}``; methods not listed keep every
    seed); ``agg`` unchanged without per-run results or a seed mapping."""
    if runs is None or seeds is None:
        return agg
    keep = pd.Series(True, index=runs.index)
    for method, chosen in seeds.items():
        keep &= (runs["method"] != method) | runs["seed"].isin(chosen)
    return aggregate_seeds(runs[keep], ci=ci)


def _methods_view(
    w: _Writer, problems: pd.DataFrame, spec: ReportSpec, benchmarks: Sequence[str], ks: Sequence[int]
) -> None:
    """The methods-beyond-the-paper table (:mod:`acerl.report.methods`) on every benchmark, at the primary k,
    when the config declares ``report.methods`` and every method of it has results."""
    mc = spec.methods
    if mc is None:
        return
    k = spec.primary[1] if spec.primary is not None else max(ks)
    wanted = set(compared_methods(mc))
    for bench in benchmarks:
        sub = problems[problems["benchmark"] == bench]
        models = sorted(set(sub["model"]))
        missing = sorted(wanted - set(sub["method"]))
        if len(models) != 1 or missing:
            log.info("skipping the methods table (%s): models %s, no results of %s", bench, models, missing)
            continue
        table = methods_table(problems, mc, bench, models[0], k)
        w.table(
            f"methods beyond the paper ({bench})",
            partial(methods_report_table, table, mc, spec.names, bench, k),
        )


def render_all(
    out_dir: str | Path,
    *,
    spec: ReportSpec,
    runs: pd.DataFrame | None = None,
    agg: pd.DataFrame | None = None,
    paper: pd.DataFrame | None = None,
    diagnostics: Diagnostics | None = None,
    hyperparameters: Mapping[str, Mapping[str, Any]] | None = None,
    title: str = "Results",
    formats: Sequence[str] = ("pdf", "png"),
    ci: str = "t",
    problems: pd.DataFrame | None = None,
    software: Sequence[Mapping[str, Any]] = (),
    curves: pd.DataFrame | None = None,
) -> list[Path]:
    """Write every table and figure the data allows into ``out_dir``.

    Args:
        out_dir: output folder (``tables/``, ``figures/`` and ``report.md`` are written inside).
        spec: layout and display names (:class:`acerl.report.spec.ReportSpec`).
        runs: per-run Pass@k (:data:`acerl.report.frames.RUN_COLUMNS`); aggregated across seeds here and used
            for the significance tests (paired where seeds match, else Welch; Holm-adjusted per table).
        agg: already aggregated results (:data:`acerl.report.aggregate.AGG_COLUMNS`), used when ``runs`` is
            ``None`` (e.g. the paper's numbers); significance then uses Welch from the summaries.
        paper: the published numbers (:func:`acerl.report.paper.load_paper_results`) for the ours-vs-paper table.
        diagnostics: OEF / entropy DataFrames (:func:`acerl.report.frames.load_diagnostics`).
        hyperparameters: ``{model: {hyperparameter: value}}`` for Table 5.
        title: heading of ``report.md``.
        formats: figure formats (``report.md`` embeds the PNG when ``"png"`` is among them).
        ci: ``"t"`` (default) or ``"normal"`` 95% CIs when aggregating ``runs`` (``config report.ci``); an
            ``agg`` given as such (the paper's numbers) is shown unchanged.
        problems: per-problem counts (:func:`acerl.report.frames.load_passk_problems`) for the power tables
            (:func:`acerl.report.power.power_frame`); ``None``: no power tables.
        software: the stamps recorded in the inputs (the Pass@k files' ``software``); the report's
            "Software" section lists them with its own (:func:`acerl.pipeline.provenance.software_section`).
        curves: every run's per-step training metrics (:func:`acerl.report.training.curves_frame`) for the
            training-dynamics figure; ``None``: no such figure.

    Returns:
        Every file written (tables, figures, ``report.md``).
    """
    out = Path(out_dir)
    w = _Writer(out, tuple(formats))
    names = spec.names
    if runs is not None:
        agg = aggregate_seeds(runs, ci=ci)
    if agg is not None and not agg.empty:
        models = _order(agg["model"], spec.models)
        benchmarks = _order(agg["benchmark"], spec.benchmarks)
        sig = (
            significance(runs, spec.comparisons)
            if runs is not None
            else significance_from_summary(agg, spec.comparisons)
        )
        ks = spec.ks or sorted(int(k) for k in agg["k"].unique())
        pw = (
            power_frame(problems, spec.comparisons, ks, margin=spec.equivalence_margin)
            if problems is not None
            else None
        )
        for i, bench in enumerate(benchmarks):
            with_ci = bench not in spec.no_ci_benchmarks
            number = (
                tables.PAPER_TABLES["passk"] + i if i < 2 else None
            )  # Tables 1-2: the first two benchmarks
            w.table(
                f"Pass@k table ({bench})",
                partial(
                    tables.passk_table, agg, bench, names=names, models=models, methods=spec.main_methods,
                    ks=spec.ks, with_ci=with_ci, number=number, ci_kind=ci if runs is not None else None,
                ),
            )  # fmt: skip
            w.table(
                f"significance table ({bench})",
                partial(
                    stat_tables.significance_table, sig, bench, names=names, models=models,
                    comparisons=spec.comparisons, ks=spec.ks, primary=spec.primary,
                ),
            )  # fmt: skip
            if pw is not None:
                w.table(
                    f"power table ({bench})",
                    partial(
                        stat_tables.power_table,
                        pw,
                        bench,
                        names=names,
                        models=models,
                        comparisons=spec.comparisons,
                        ks=spec.ks,
                        primary=spec.primary,
                        margin=spec.equivalence_margin,
                        tost_declared=spec.equivalence_declared,
                    ),  # fmt: skip
                )
        if problems is not None:
            _per_seed_view(w, problems, spec)
            _methods_view(w, problems, spec, benchmarks, ks)
        if spec.ablation is not None:
            ab = spec.ablation
            w.table(
                "modulation ablation (Table 3)",
                lambda: tables.ablation_table(
                    _rows_over_seeds(runs, agg, ab.seeds, ci), model=ab.model, benchmark=ab.benchmark,
                    methods=ab.methods, names=names, ks=spec.ks, alpha=spec.penalty_alpha,
                    seed_note=ab.seeds is not None,
                ),
            )  # fmt: skip
        else:
            log.info("skipping modulation ablation (Table 3): no ablation in the report spec")
        if spec.alpha_sweep is not None:
            a = spec.alpha_sweep
            w.table(
                "alpha sensitivity (Table 4)",
                lambda: tables.alpha_table(
                    _rows_over_seeds(runs, agg, a.seeds, ci), model=a.model, benchmark=a.benchmark,
                    alpha_methods=a.methods, names=names, default_alpha=a.default_alpha,
                    zero_label=a.zero_label, ks=a.ks, seed_note=a.seeds is not None,
                ),
            )  # fmt: skip
        else:
            log.info("skipping alpha sensitivity (Table 4): no alpha sweep in the report spec")
        if paper is not None:
            w.table(
                "ours vs paper",
                lambda: tables.ours_vs_paper_table(
                    ours_vs_paper(agg, paper),
                    names=names,
                    models=models,
                    methods=spec.main_methods,
                    benchmarks=benchmarks,
                ),
            )
        w.figure(
            "Pass@k curves",
            "passk_curves",
            lambda: figures.passk_curves_figure(
                agg, names=names, models=models, benchmarks=benchmarks, methods=spec.main_methods
            ),
        )
        if runs is not None:
            w.figure(
                "Pass@k difference, ACE minus baseline",
                "passk_difference",
                lambda: figures.passk_difference_figure(
                    figures.paired_difference_frame(runs, dict(spec.comparisons)),
                    names=names,
                    models=models,
                    benchmarks=benchmarks,
                ),
            )
    else:
        log.info("skipping Pass@k tables and curves: no Pass@k results")
    if hyperparameters:
        w.table(
            "hyperparameters (Table 5)", lambda: tables.hyperparameter_table(hyperparameters, names=names)
        )
    else:
        log.info("skipping hyperparameters (Table 5): none given")
    w.figure(
        "Penalty multiplier",
        "penalty_multiplier",
        lambda: figures.penalty_multiplier_figure(spec.penalty_alpha, names=names),
    )
    if curves is not None:
        w.figure(
            "Training dynamics",
            "training_dynamics",
            lambda: figures.training_dynamics_figure(
                curves, names=names, methods=spec.main_methods, models=spec.models
            ),
        )
    else:
        log.info("skipping the training-dynamics figure: no training metrics")
    if diagnostics is not None:
        w.figure(
            "Overconfident-error dynamics",
            "oef_dynamics",
            lambda: figures.oef_figure(
                diagnostics.records, names=names, methods=spec.diagnostic_methods, models=spec.models
            ),
        )
        w.figure(
            "Early entropy",
            "entropy_early",
            lambda: figures.entropy_figure(
                diagnostics.entropy_early,
                names=names,
                methods=spec.diagnostic_methods,
                models=spec.models,
                max_step=spec.entropy_steps,
            ),
        )
    else:
        log.info("skipping OEF and entropy figures: no diagnostics")
    w.sections.append(software_section(software))
    index = out / "report.md"
    w.written.append(write_text(index, f"# {title}\n\n" + "\n".join(s + "\n" for s in w.sections)))
    log.info("report: wrote %d files under %s", len(w.written), out)
    return w.written


def render_from_files(
    out_dir: str | Path,
    *,
    spec: ReportSpec,
    passk_paths: Iterable[str | Path] = (),
    diagnostics_paths: Iterable[str | Path] = (),
    hyperparameters: Mapping[str, Mapping[str, Any]] | None = None,
    compare_to_paper: bool = True,
    title: str = "Results",
    formats: Sequence[str] = ("pdf", "png"),
    ci: str = "t",
    metrics_paths: Iterable[str | Path] = (),
) -> list[Path]:
    """Read Pass@k and diagnostics files (:mod:`acerl.report.frames`) and the training runs' ``metrics.jsonl``
    (:func:`acerl.report.training.curves_frame`) and call :func:`render_all`."""
    passk_paths, diagnostics_paths, metrics_paths = (
        list(passk_paths),
        list(diagnostics_paths),
        list(metrics_paths),
    )
    runs = load_passk_records(passk_paths) if passk_paths else None
    software = stamps_in(stamp for p in passk_paths for stamp in read_json(p).get("software", []))
    problems = load_passk_problems(passk_paths) if passk_paths else None
    diag = load_diagnostics(diagnostics_paths) if diagnostics_paths else None
    paper = None
    if compare_to_paper:
        try:
            paper = load_paper_results()
        except FileNotFoundError as e:
            log.info("no ours-vs-paper table: %s", e)
    return render_all(
        out_dir,
        spec=spec,
        runs=runs,
        paper=paper,
        diagnostics=diag,
        hyperparameters=hyperparameters,
        title=title,
        formats=formats,
        ci=ci,
        problems=problems,
        software=software,
        curves=curves_frame(metrics_paths) if metrics_paths else None,
    )


def render_paper(
    out_dir: str | Path, directory: str | Path | None = None, formats: Sequence[str] = ("pdf", "png")
) -> list[Path]:
    """Regenerate the paper's Tables 1-5 (and the Pass@k curves and Fig. 1 analogue) from ``config/paper_results/``."""
    agg = load_paper_results(directory)
    return render_all(
        out_dir,
        spec=paper_spec(directory),
        agg=agg,
        hyperparameters=load_paper_hyperparameters(directory),
        title="The paper's published numbers (config/paper_results)",
        formats=formats,
    )
