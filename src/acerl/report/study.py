"""The report of a configured study: which files to read and how to lay the tables out, from the config.

``acerl report --config FILE --root <dir>`` calls :func:`report_study`, which reads every Pass@k and diagnostics
file the study produced (``acerl.pipeline.paths``) and writes ``<root>/results/{tables,figures}/`` and
``<root>/results/report.md`` with :func:`acerl.report.render.render_from_files`.
"""

from __future__ import annotations

import logging
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from acerl.config import BASE_METHOD, AceEstimator, Config
from acerl.errors import MissingInputError
from acerl.pipeline import paths
from acerl.pipeline.io import check_writable, write_text
from acerl.pipeline.records import read_json
from acerl.pipeline.stages import main_grid_runs
from acerl.report.aggregate import MissingData
from acerl.report.compute import NO_ACCOUNTING, compute_tables, kept_accounting
from acerl.report.figures import paired_difference_frame
from acerl.report.frames import load_passk_records
from acerl.report.html import html_page
from acerl.report.inputs import (
    COMPUTE_TITLE,
    SNAKEFILE_CONFIG,
    check_problem_sets,
    check_result_files,
    partial_notice,
    result_jobs,
    with_notice,
)
from acerl.report.paper import PAPER_NAMES
from acerl.report.render import render_from_files
from acerl.report.spec import AblationSpec, AlphaSweepSpec, DisplayNames, ReportSpec
from acerl.report.table_format import to_markdown

__all__ = [
    "report_spec",
    "hyperparameters_from_config",
    "report_study",
    "add_compute_accounting",
    "remove_stale",
    "training_metrics_files",
    "results_summary",
    "results_headline",
    "headline_markdown",
]

log = logging.getLogger(__name__)

_NO_THINKING_TEMPLATES = {"qwen3_boxed_nothink"}
VERL_ONLY_ROWS = ("Micro-batch size per GPU", "Validation samples", "GPU memory utilization")
"""Table 5 rows only the verl backend reads (verl's micro-batches, its validation rollouts, vLLM's GPU share)."""


def _ablation_label(cfg: Config, method: str) -> str:
    est = cfg.method(method).estimator
    if est.name == "grpo":
        return f"{cfg.method(method).display} (baseline)"
    assert isinstance(est, AceEstimator), f"the ablation compares GRPO and ACE methods, not {est.name!r}"
    label = "ACE-Softplus" if est.modulation == "softplus" else "ACE-ReLU"
    return label + (" (ours)" if est.modulation == "softplus" else "")


def _seed_tuples(rows: dict[str, list[int]]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v) for k, v in rows.items()}


def report_spec(cfg: Config) -> ReportSpec:
    """Report layout of a study: display names from the config, the main grid, Tables 3-4 when configured
    (each row over the seeds :meth:`acerl.config.Config.table_rows` gives it).

    ACE methods of the main grid are tested against the GRPO-estimator method of the same algorithm family.
    """
    main = cfg.study.main
    names = DisplayNames(
        models={k: m.display for k, m in cfg.models.items()},
        methods={BASE_METHOD: "Base", **{k: m.display for k, m in cfg.resolved_methods.items()}},
        benchmarks={b: PAPER_NAMES.benchmark(b) for b in cfg.evaluation.benchmarks},
    )
    comparisons = {}
    for method in main.methods:
        if cfg.method(method).estimator.name == "ace":
            base = cfg.grpo_counterpart(method, main.methods)
            if base is not None:
                comparisons[method] = base
    alpha = None
    if cfg.study.alpha_sweep is not None:
        s = cfg.study.alpha_sweep
        default = cfg.swept_estimator().alpha
        alpha = AlphaSweepSpec(
            model=s.model,
            benchmark=cfg.table_benchmark("alpha_sweep"),
            methods={cfg.sweep_method(a): float(a) for a in s.alphas},
            default_alpha=default,
            ks=_sweep_ks(cfg),
            seeds=_seed_tuples(cfg.table_rows("alpha_sweep")),
        )
    ablation = None
    if cfg.study.ablation is not None:
        ab = cfg.study.ablation
        ablation = AblationSpec(
            model=ab.model,
            benchmark=cfg.table_benchmark("ablation"),
            methods={m: _ablation_label(cfg, m) for m in ab.methods},
            seeds=_seed_tuples(cfg.table_rows("ablation")),
        )
    estimators = [cfg.method(m).estimator for m in main.methods]
    ace_alphas = [e.alpha for e in estimators if e.name == "ace" and isinstance(e, AceEstimator)]
    diag = cfg.study.diagnostics
    return ReportSpec(
        names=names,
        models=tuple(main.models),
        benchmarks=tuple(cfg.evaluation.benchmarks),
        main_methods=((BASE_METHOD,) if main.include_base else ()) + tuple(main.methods),
        comparisons=comparisons,
        ks=tuple(cfg.evaluation.ks),
        alpha_sweep=alpha,
        ablation=ablation,
        diagnostic_methods=tuple(diag.methods) if diag else ("grpo", "ace_grpo"),
        entropy_steps=diag.early_steps if diag else 20,
        penalty_alpha=ace_alphas[0] if ace_alphas else 1.0,
        primary=cfg.primary_endpoint,
        equivalence_margin=cfg.report.equivalence_margin / 100.0,
        equivalence_declared=cfg.report.equivalence_declared,
        pilot_seeds=tuple(cfg.report.pilot_seeds),
        stage1_seeds=cfg.report.stage1_seeds,
        methods=cfg.report.methods,
    )


def hyperparameters_from_config(cfg: Config) -> dict[str, dict[str, Any]]:
    """Paper Table 5 from the config: ``{model: {row label: value}}`` for the main grid's models, with only the
    settings the study used.

    The verl backend counts epochs (``total_epochs``); the local backend counts optimizer steps and reads none of
    :data:`VERL_ONLY_ROWS`. Pass@k's samples per problem (``evaluation.n``) are a row for both.
    """
    out: dict[str, dict[str, Any]] = {}
    for key in cfg.study.main.models:
        model = cfg.models[key]
        t = model.train
        budget = (
            ("Total epochs", t.total_epochs)
            if cfg.compute.backend == "verl"
            else ("Training steps", t.total_steps)
        )
        out[key] = {
            budget[0]: budget[1],
            "Training batch size": t.prompts_per_step,
            "Mini-batch size": t.mini_batch_size,
            "Micro-batch size per GPU": t.micro_batch_size_per_gpu,
            "Learning rate": t.lr,
            "Optimizer": "AdamW",
            "Temperature": t.temperature,
            "Max prompt length": t.max_prompt_length,
            "Max response length": t.max_response_length,
            "Rollout samples per prompt": t.group_size,
            "Validation samples": t.val_samples,
            "Pass@k samples per problem": cfg.evaluation.n,
            "GPU memory utilization": t.gpu_memory_utilization,
            "KL coefficient $\\beta$": t.kl_coef,
            "Enable thinking (Qwen3)": False if model.template in _NO_THINKING_TEMPLATES else None,
        }
        if cfg.compute.backend != "verl":
            out[key] = {k: v for k, v in out[key].items() if k not in VERL_ONLY_ROWS}
    return out


def _sweep_ks(cfg: Config) -> tuple[int, ...]:
    """Table 4's columns: Pass@1 and the study's largest k (the paper's Pass@32 at its scale)."""
    return tuple(sorted({1, max(cfg.evaluation.ks)}))


def _missing_advice(missing: Path, config_files: Sequence[str | Path], root: Path | str) -> str:
    """How to make a missing result file: a ``dvc.yaml`` beside the results that has no stage writing it is
    stale (the config grew since ``acerl dvc write``), so ``dvc repro`` never makes it; else run the study."""
    dvc_yaml = Path(root) / "dvc.yaml"
    if dvc_yaml.is_file() and Path(missing).relative_to(root).as_posix() not in dvc_yaml.read_text("utf-8"):
        write = shlex.join(
            ["acerl", "dvc", "write", *(a for f in config_files for a in ("--config", str(f)))]
        )
        return f"{dvc_yaml} has no stage that writes it (stale): run `{write}`, then `dvc repro`"
    return "run the study first (snakemake, or make run)"


def report_study(
    cfg: Config,
    root: str | Path,
    partial: bool = False,
    config_files: Sequence[str | Path] = (SNAKEFILE_CONFIG,),
) -> list[Path]:
    """Write the study's tables and figures under ``<root>/results`` from the study's result files.

    A missing Pass@k or diagnostics file is a :class:`~acerl.errors.MissingInputError` (exit 3) naming how many
    are missing and the first; with ``partial`` the runs present are reported and the missing ones are left out
    with a warning (``acerl report --partial``, a look at a study still running). A truncated or corrupt one is
    a :class:`~acerl.errors.BadInputError` whose fix carries ``config_files`` (the command's ``--config`` files)
    and ``root`` (:func:`acerl.report.inputs.rebuild_advice`); so is a Pass@k file over part of its benchmark's
    problems (:func:`acerl.report.inputs.check_problem_sets`).
    """
    jobs = result_jobs(cfg, root)
    check_result_files(jobs, config_files, root)
    check_problem_sets(jobs, config_files, root)
    wanted = [paths.passk_file(root, b, r) for b, r in cfg.evaluations()]
    diag_wanted = [paths.diagnostics_file(root, r) for r in cfg.diagnostic_runs()]
    passk_files = [p for p in wanted if p.is_file()]
    diag_files = [p for p in diag_wanted if p.is_file()]
    missing = [p for p in (*wanted, *diag_wanted) if not p.is_file()]
    if missing and not partial:
        raise MissingInputError(
            f"{len(missing)} of {len(wanted) + len(diag_wanted)} result files are missing, e.g. {missing[0]}: "
            f"{_missing_advice(missing[0], config_files, root)}, or give --partial to report the runs present"
        )
    for kind, have, want in (("Pass@k", passk_files, wanted), ("diagnostics", diag_files, diag_wanted)):
        if len(have) < len(want):
            absent = [str(p) for p in want if not p.is_file()]
            log.warning("%d of %d %s files missing, e.g. %s", len(absent), len(want), kind, absent[0])
    check_writable([paths.results_dir(root), paths.tables_dir(root), paths.figures_dir(root)])
    written = render_from_files(
        paths.results_dir(root),
        spec=report_spec(cfg),
        passk_paths=passk_files,
        diagnostics_paths=diag_files,
        hyperparameters=hyperparameters_from_config(cfg),
        compare_to_paper=cfg.report.compare_to_paper,
        title=f"Results: {cfg.name}",
        formats=tuple(cfg.report.formats),
        ci=cfg.report.ci,
        metrics_paths=[p for p in training_metrics_files(cfg, root) if p.is_file()],
    )
    remove_stale(written, [paths.tables_dir(root), paths.figures_dir(root)])
    report = paths.report_file(root)
    write_text(report, report.read_text(encoding="utf-8") + grader_timeouts_note(passk_files))
    if missing:  # --partial: report.md opens with what is left out
        notice = partial_notice(missing, len(wanted) + len(diag_wanted), root)
        report = paths.report_file(root)
        write_text(report, with_notice(report.read_text(encoding="utf-8"), notice))
    runs = load_passk_records(passk_files) if passk_files else None
    written += add_compute_accounting(cfg, root, headline=headline_markdown(cfg, runs))
    summary = results_summary(cfg, runs, root)
    log.info("%s", summary)
    return [*written, write_text(paths.headline_file(root), summary + "\n")]


def grader_timeouts_note(passk_files: Sequence[Path]) -> str:
    """A paragraph of ``report.md``: the samples the grader could not decide, even when it graded them again with
    twice its limits (scored incorrect), per run; "none" says so, and files written before the count say that."""
    counts: list[tuple[str, int, int]] = []  # (run on benchmark, timeouts, samples)
    unknown = 0
    for path in passk_files:
        rec = read_json(path)
        if rec.get("grader_timeouts") is None:
            unknown += 1
            continue
        samples = sum(int(p["n"]) for p in rec["problems"])
        seed = "base" if rec["seed"] is None else f"seed{rec['seed']}"
        counts.append(
            (f"{rec['model']}/{rec['method']}/{seed} on {rec['benchmark']}", rec["grader_timeouts"], samples)
        )
    hit = [c for c in counts if c[1] > 0]
    lines = ["", "## Grading", ""]
    if hit:
        lines.append(
            f"Grader timeouts (samples undecided after a retry with twice the limits, scored incorrect) in "
            f"{len(hit)} of {len(counts)} Pass@k files: "
            + "; ".join(f"{r}: {t} of {n}" for r, t, n in hit)
            + "."
        )
    else:
        lines.append(
            f"Grader timeouts: none in {len(counts)} Pass@k files (every sample graded within its limits)."
        )
    if unknown:
        lines.append(f"{unknown} Pass@k file(s) predate the count (rerun their passk step to count).")
    return "\n".join(lines) + "\n"


def results_headline(cfg: Config, runs: pd.DataFrame | None) -> tuple[str, list[str]]:
    """The study's answer: what is compared (the primary endpoint, ``report.primary``) and one line per ACE
    method and model, its mean per-seed difference from its baseline with the paired 95% t interval and the
    seeds paired (a line saying so when no method shares a seed with its baseline)."""
    bench, k = cfg.primary_endpoint
    spec = report_spec(cfg)
    intro = f"primary endpoint Pass@{k} on {spec.names.benchmark(bench)}, ACE minus baseline:"
    diffs = paired_difference_frame(runs, dict(spec.comparisons)) if runs is not None else None
    rows = diffs[(diffs["benchmark"] == bench) & (diffs["k"] == k)] if diffs is not None else pd.DataFrame()
    lines = []
    for row in rows.itertuples():
        ci = (
            f"95% CI {100 * row.ci_low:+.1f} to {100 * row.ci_high:+.1f}"
            if math.isfinite(row.ci_low)
            else "no interval from one seed"
        )
        lines.append(
            f"{spec.names.model(row.model)}: {spec.names.method(row.method)} - {spec.names.method(row.baseline)}"
            f" = {100 * row.delta:+.1f} points ({ci}; {row.n_seeds} seeds paired)"
        )
    return intro, lines or ["no ACE method shares a seed with its baseline at the primary endpoint"]


def results_summary(cfg: Config, runs: pd.DataFrame | None, root: str | Path) -> str:
    """The lines ``acerl report`` ends with and writes to ``results/headline.txt`` (``make run`` prints them):
    :func:`results_headline`, then where the report is."""
    intro, lines = results_headline(cfg, runs)
    return "\n".join(
        [
            f"Results: {cfg.name}; {intro}",
            *(f"  {line}" for line in lines),
            f"Report: {paths.report_page_file(root)} (Markdown: {paths.report_file(root)})",
        ]
    )


def headline_markdown(cfg: Config, runs: pd.DataFrame | None) -> str:
    """:func:`results_headline` as the Markdown the HTML report opens with: a bold sentence and a list."""
    intro, lines = results_headline(cfg, runs)
    return f"**{intro[0].upper()}{intro[1:]}**\n\n" + "".join(f"- {line}\n" for line in lines)


def training_metrics_files(cfg: Config, root: str | Path) -> list[Path]:
    """The ``metrics.jsonl`` of every run of the main grid (the training-dynamics figure's input); the stage
    table's report inputs (:mod:`acerl.pipeline.stages`) list the same files."""
    return [paths.train_metrics_file(root, r) for r in main_grid_runs(cfg)]


def remove_stale(written: list[Path], folders: list[Path]) -> None:
    """Delete the files in ``folders`` that this report did not write (a table or figure an earlier report wrote
    and this one no longer does): the workflow keeps the previous report's folders in place (``update()``, so a
    failed report leaves the last good one), so the report itself clears what is stale."""
    keep = {Path(p).resolve() for p in written}
    for folder in folders:
        for f in folder.glob("*") if folder.is_dir() else ():
            if f.is_file() and f.resolve() not in keep:
                log.info("removing %s: not part of this report", f)
                f.unlink()


def add_compute_accounting(cfg: Config, root: str | Path, headline: str = "") -> list[Path]:
    """Write ``results/compute.md`` (:func:`acerl.report.compute.compute_tables`), append it to ``report.md``
    and write the whole page as ``results/report.html`` (:func:`acerl.report.html.html_page`), opening with
    ``headline`` (Markdown, :func:`headline_markdown`) under its title.

    Kept out of ``results/tables/``: timings differ on every machine, while the tables are a function of the
    result files alone (a colleague who pulls the results regenerates them bit for bit). Jobs run by DVC leave
    no benchmark files; the study's previous ``compute.md`` (or its copy in DVC's cache, as ``dvc.lock`` records
    it) is then kept (a warning says so), else it says there is no accounting.
    """
    try:
        text = "\n".join(to_markdown(t) + "\n" for t in compute_tables(cfg, root))
    except MissingData as e:
        kept = kept_accounting(Path(root), paths.compute_file(root), cfg.name)
        if kept is None:
            log.info("no compute accounting: %s", e)
        else:
            log.warning(
                "%s: keeping the accounting of %s, made when they were present", e, paths.compute_file(root)
            )
        text = kept or f"{NO_ACCOUNTING}: {e} (Snakemake writes them; DVC does not).\n"
    report = paths.report_file(root)
    section = "\n## Compute\n\n" + text
    summary = report.read_text(encoding="utf-8") + section
    return [
        write_text(paths.compute_file(root), f"{COMPUTE_TITLE}{cfg.name}\n" + section.split("\n", 2)[2]),
        write_text(report, summary),
        write_text(
            paths.report_page_file(root), html_page(f"Results: {cfg.name}", summary, report.parent, headline)
        ),
    ]
