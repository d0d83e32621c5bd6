"""render_all writes every table and figure; missing pieces are skipped; the study and paper wrappers work."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from support.report_synthetic import REPO_ROOT

from acerl.report.aggregate import aggregate_seeds
from acerl.report.figures import passk_curves_figure, penalty_multiplier, save_figure
from acerl.report.render import render_all, render_paper
from acerl.report.spec import ReportSpec

PDF_MAGIC, PNG_MAGIC = b"%PDF", b"\x89PNG"

ALL_TABLES = [
    "passk_bench_a", "passk_bench_b", "significance_bench_a", "significance_bench_b", "alpha_sensitivity", "ablation_modulation", "hyperparameters", "ours_vs_paper",
]  # fmt: skip
ALL_FIGURES = [
    "penalty_multiplier", "passk_curves", "passk_difference", "training_dynamics", "oef_dynamics", "entropy_early",
]  # fmt: skip


def _check_outputs(
    out: Path, tables: list[str], figures: list[str], formats: tuple[str, ...] = ("pdf", "png")
) -> None:
    assert sorted(p.stem for p in (out / "tables").glob("*.tex")) == sorted(tables)
    assert sorted(p.stem for p in (out / "tables").glob("*.md")) == sorted(tables)
    assert sorted(p.stem for p in (out / "tables").glob("*.html")) == sorted(tables)
    for fmt, magic in (("pdf", PDF_MAGIC), ("png", PNG_MAGIC)):
        expected = sorted(figures) if fmt in formats else []
        assert sorted(p.stem for p in (out / "figures").glob(f"*.{fmt}")) == expected
        for name in expected:
            assert (out / "figures" / f"{name}.{fmt}").read_bytes()[:4] == magic
    for name in tables:
        tex = (out / "tables" / f"{name}.tex").read_text()
        assert r"\begin{tabular}" in tex and r"\bottomrule" in tex
        assert (out / "tables" / f"{name}.md").read_text().count("|") > 10
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    report = (out / "report.md").read_text()
    assert all(f"figures/{f}.png" in report for f in figures)


def test_render_all_writes_every_table_and_figure(
    tmp_path, synthetic_runs, synthetic_diagnostics, synthetic_spec, caplog
):
    agg = aggregate_seeds(synthetic_runs)
    paper = agg[agg["method"].isin(["grpo", "ace_grpo"])].assign(mean=lambda d: d["mean"] - 0.01)
    hp = {"m_small": {"Learning rate": 1e-6}, "m_large": {"Learning rate": 5e-7}}
    with caplog.at_level(logging.INFO, logger="acerl.report.render"):
        written = render_all(
            tmp_path,
            spec=synthetic_spec,
            runs=synthetic_runs,
            paper=paper,
            diagnostics=synthetic_diagnostics,
            hyperparameters=hp,
            curves=pd.DataFrame(
                [
                    ("m_small", m, seed, step, "entropy", 0.3 - 0.01 * step)
                    for m in ("grpo", "ace_grpo")
                    for seed in (0, 1, 2)
                    for step in (1, 2, 3)
                ],
                columns=["model", "method", "seed", "step", "curve", "value"],
            ),  # fmt: skip
        )
    assert "skipping" not in caplog.text
    _check_outputs(tmp_path, ALL_TABLES, ALL_FIGURES)
    assert len(written) == 3 * len(ALL_TABLES) + 2 * len(ALL_FIGURES) + 1
    md = (tmp_path / "tables" / "passk_bench_a.md").read_text()
    assert "| Large-7B + ACE-DAPO |" in md and " ± " in md
    assert " ± " not in (tmp_path / "tables" / "passk_bench_b.md").read_text()  # no-CI benchmark (Table 2)
    cmp = (tmp_path / "tables" / "ours_vs_paper.md").read_text()
    assert cmp.count("+1.0 |") == 2 * 2 * 2 * 4  # every overlapping cell, delta = +1 point


def test_missing_pieces_are_skipped_not_fatal(tmp_path, synthetic_runs, synthetic_spec, caplog):
    agg = aggregate_seeds(synthetic_runs)
    agg = agg[~agg["method"].str.contains("alpha|relu") & (agg["method"] != "ace_grpo")]
    sweep = synthetic_spec.alpha_sweep
    no_zero = dataclasses.replace(sweep, methods={m: a for m, a in sweep.methods.items() if a != 0.0})
    spec = dataclasses.replace(
        synthetic_spec, comparisons={"ace_dapo": "dapo", "nothing": "grpo"}, alpha_sweep=no_zero
    )  # the alpha = 0 row is the GRPO run, which is present
    with caplog.at_level(logging.INFO, logger="acerl.report.render"):
        render_all(tmp_path / "a", spec=spec, agg=agg, formats=("png",))
    assert "skipping alpha sensitivity (Table 4): no alpha-sweep results" in caplog.text
    for piece in ("hyperparameters", "OEF and entropy"):
        assert f"skipping {piece}" in caplog.text
    # from aggregated numbers only Welch p-values exist: no paired table; the ablation keeps its GRPO row
    tables = [
        "passk_bench_a",
        "passk_bench_b",
        "significance_bench_a",
        "significance_bench_b",
        "ablation_modulation",
    ]
    _check_outputs(tmp_path / "a", tables, ["penalty_multiplier", "passk_curves"], formats=("png",))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="acerl.report.render"):
        render_all(tmp_path / "b", spec=ReportSpec(), formats=("png",))
    assert "skipping Pass@k tables" in caplog.text
    assert "skipping alpha sensitivity" not in caplog.text  # not configured: not even attempted
    assert [p.name for p in (tmp_path / "b" / "figures").iterdir()] == ["penalty_multiplier.png"]
    assert (tmp_path / "b" / "report.md").is_file()


def test_save_figure_writes_both_formats_atomically(tmp_path):
    fig = Figure()
    fig.add_subplot().plot([0, 1], [0, 1])
    paths = save_figure(fig, tmp_path / "sub" / "fig")
    assert [p.name for p in paths] == ["fig.pdf", "fig.png"]
    assert paths[0].read_bytes()[:4] == PDF_MAGIC and paths[1].read_bytes()[:4] == PNG_MAGIC
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["fig.pdf", "fig.png"]
    again = save_figure(fig, tmp_path / "sub" / "fig")
    assert again[0].read_bytes() == paths[0].read_bytes()  # no timestamp in the PDF


def test_penalty_multiplier_values():
    c = np.array([-3.0, 0.0, 2.0])
    np.testing.assert_allclose(penalty_multiplier(c, 1.0, "softplus"), 1 + np.log1p(np.exp(c)))
    np.testing.assert_allclose(penalty_multiplier(c, 1.0, "softplus"), [1.0486, 1.6931, 3.1269], atol=1e-4)
    np.testing.assert_allclose(penalty_multiplier(c, 2.0, "relu"), [1.0, 1.0, 5.0])
    np.testing.assert_allclose(penalty_multiplier(c, 1.0, "none"), [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="valid: none, relu, softplus"):
        penalty_multiplier(c, 1.0, "tanh")


def test_passk_curves_needs_data(synthetic_runs):
    from acerl.report.aggregate import MissingData

    agg = aggregate_seeds(synthetic_runs)
    with pytest.raises(MissingData):
        passk_curves_figure(
            agg, names=ReportSpec().names, models=["zzz"], benchmarks=["bench_a"], methods=["grpo"]
        )


def test_render_paper(tmp_path):
    render_paper(tmp_path, formats=("png",))
    tables = [
        "passk_math500", "passk_aime2025", "significance_math500", "significance_aime2025", "alpha_sensitivity",
        "ablation_modulation", "hyperparameters",
    ]  # fmt: skip
    _check_outputs(tmp_path, tables, ["penalty_multiplier", "passk_curves"], formats=("png",))
    sig = (tmp_path / "tables" / "significance_aime2025.md").read_text()
    assert "no p-values" in sig  # the paper prints no CI on AIME 2025


def _config_paths() -> list[Path]:
    paths = [REPO_ROOT / "config" / "config.yaml", REPO_ROOT / "config" / "test.yaml"]
    if not all(p.is_file() for p in paths):
        pytest.skip("config/config.yaml or config/test.yaml not present")
    return paths


def test_report_study_from_the_pipeline_files(tmp_path):
    from acerl.config import load_config
    from acerl.pipeline import paths
    from acerl.pipeline.records import (
        diagnostics_record,
        passk_record,
        write_diagnostics_record,
        write_passk_record,
    )
    from acerl.report.frames import load_passk_records
    from acerl.report.study import hyperparameters_from_config, report_spec, report_study, results_summary

    cfg = load_config(_config_paths(), overrides=["report.formats=[png]"])
    spec = report_spec(cfg)
    assert dict(spec.comparisons) == {"ace_grpo": "grpo", "ace_dapo": "dapo"}
    assert spec.main_methods[0] == "base" and spec.ks == tuple(cfg.evaluation.ks)
    assert (
        spec.alpha_sweep is not None and spec.alpha_sweep.default_alpha in spec.alpha_sweep.methods.values()
    )
    hp = hyperparameters_from_config(cfg)
    assert set(hp) == set(cfg.study.main.models)
    rng = np.random.default_rng(0)
    n = cfg.evaluation.n
    for bench in cfg.evaluation.benchmarks:
        for run in cfg.base_runs() + cfg.runs():
            c = rng.integers(0, n + 1, size=6)
            rec = passk_record(bench, run.model, run.method, None if run.is_base else run.seed,
                               [f"q{i}" for i in range(6)], n, c, cfg.evaluation.ks)  # fmt: skip
            write_passk_record(rec, paths.passk_file(tmp_path, bench, run))
    for run in cfg.diagnostic_runs():
        rows = [
            {
                "step": s,
                "oef": 0.3,
                "overconf_magnitude": 0.1,
                "entropy": 0.5,
                "n_incorrect": 9,
                "n_total": 16,
            }
            for s in cfg.diagnostic_steps(run.model)
        ]
        early = [{"step": r["step"], "entropy": r["entropy"]} for r in rows if r["step"] <= 20]
        write_diagnostics_record(
            diagnostics_record(run.model, run.method, run.seed, rows, early),
            paths.diagnostics_file(tmp_path, run),
        )
    for run in cfg.runs():  # the training-dynamics figure reads the runs' metrics.jsonl
        metrics = paths.train_metrics_file(tmp_path, run)
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.write_text(
            "".join(f'{{"step": {s}, "actor/entropy": {0.3 - 0.01 * s}}}\n' for s in range(1, 4))
        )
    stale = paths.tables_dir(tmp_path) / "a_table_an_earlier_version_wrote.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("stale\n")
    written = report_study(cfg, tmp_path)
    out = paths.results_dir(tmp_path)
    assert not stale.exists()  # the workflow keeps the previous folders (update()): the report clears them
    assert {p for p in paths.tables_dir(tmp_path).iterdir()} <= set(written)
    assert (paths.tables_dir(tmp_path) / f"passk_{cfg.evaluation.benchmarks[0]}.tex").is_file()
    assert (paths.figures_dir(tmp_path) / "oef_dynamics.png").is_file()
    assert (out / "report.md") in written
    assert "## Software\n\n- this report: torch " in (out / "report.md").read_text()  # what made it
    runs = load_passk_records([paths.passk_file(tmp_path, b, r) for b, r in cfg.evaluations()])
    headline = results_summary(cfg, runs, tmp_path)  # what make run prints at its end
    assert paths.headline_file(tmp_path) in written
    assert paths.headline_file(tmp_path).read_text() == headline + "\n"
    assert headline.splitlines()[1].strip() in (out / "report.html").read_text()
    benches = cfg.evaluation.benchmarks
    tables = [f"passk_{b}" for b in benches] + [f"significance_{b}" for b in benches]
    tables += [f"power_{b}" for b in benches]  # per-problem counts: the power tables
    tables += [
        "alpha_sensitivity",
        "ablation_modulation",
        "hyperparameters",
    ]  # no overlap with the paper's models
    _check_outputs(out, tables, ALL_FIGURES, formats=("png",))


def test_table_rows_average_their_own_seeds(tmp_path, synthetic_runs, synthetic_spec):
    """Each row of Tables 3-4 averages the seeds the spec gives it (main-grid rows the main seeds, rows trained
    for the table its own), and the caption says how many runs each row averages when the counts differ."""
    sweep, ablation = synthetic_spec.alpha_sweep, synthetic_spec.ablation
    one = {m: (0,) for m in sweep.methods}
    mixed = {**one, "grpo": (0, 1, 2), "ace_grpo": (0, 1, 2)}
    for name, seeds in (("one", one), ("mixed", mixed)):
        spec = dataclasses.replace(
            synthetic_spec,
            alpha_sweep=dataclasses.replace(sweep, seeds=seeds),
            ablation=dataclasses.replace(ablation, seeds={m: (0, 1, 2) for m in ablation.methods}),
        )
        render_all(tmp_path / name, spec=spec, runs=synthetic_runs, formats=("png",))
    runs = synthetic_runs
    cell = runs[(runs["benchmark"] == "bench_a") & (runs["model"] == "m_large") & (runs["k"] == 1)]
    seed0 = cell[(cell["method"] == "ace_grpo") & (cell["seed"] == 0)]["pass_at_k"].iloc[0] * 100
    mean = cell[cell["method"] == "ace_grpo"]["pass_at_k"].mean() * 100
    assert round(seed0, 1) != round(mean, 1)

    def table(out: Path, stem: str) -> str:
        return (out / "tables" / f"{stem}.md").read_text()

    def default_row(out: Path) -> str:
        rows = table(out, "alpha_sensitivity").splitlines()
        return next(line for line in rows if line.startswith("| ") and "(default)" in line)

    assert f"**{seed0:.1f}** |" in default_row(tmp_path / "one")
    assert f"**{mean:.1f}** |" in default_row(tmp_path / "mixed")
    assert "Every row averages 1 training run." in table(tmp_path / "one", "alpha_sensitivity")
    assert "Training runs averaged per row: 3 (0.0 (GRPO), 1.0 (default)); 1 (0.5, 2.0)." in table(
        tmp_path / "mixed", "alpha_sensitivity"
    )
    assert "Every row averages 3 training runs." in table(tmp_path / "one", "ablation_modulation")


def test_ci_kind_is_a_report_option(tmp_path, synthetic_runs, synthetic_spec):
    """report.ci: Student t (default) or normal intervals, named in the caption of Tables 1-2."""
    for kind in ("t", "normal"):
        render_all(tmp_path / kind, spec=synthetic_spec, runs=synthetic_runs, formats=("png",), ci=kind)
    t_md = (tmp_path / "t" / "tables" / "passk_bench_a.md").read_text()
    z_md = (tmp_path / "normal" / "tables" / "passk_bench_a.md").read_text()
    assert "95% confidence interval (Student t) over 3 independent" in t_md
    assert "95% confidence interval (normal approximation) over 3 independent" in z_md

    def widths(md: str) -> list[float]:
        return [float(x) for x in re.findall(r"± (\d+\.\d)", md)]

    assert len(widths(t_md)) == len(widths(z_md)) > 0
    assert sum(widths(t_md)) > 1.5 * sum(widths(z_md))  # t_{0.975, 2} / z_{0.975} = 2.20 with 3 seeds


def test_report_study_refuses_missing_results_unless_partial(tmp_path):
    from acerl.config import load_config
    from acerl.errors import MissingInputError
    from acerl.pipeline import paths
    from acerl.pipeline.records import passk_record, write_passk_record
    from acerl.report.study import report_study

    cfg = load_config(_config_paths(), overrides=["report.formats=[png]"])
    run, bench = cfg.base_runs()[0], cfg.evaluation.benchmarks[0]
    rec = passk_record(
        bench, run.model, run.method, None, ["q0", "q1"], cfg.evaluation.n, [1, 2], cfg.evaluation.ks
    )
    write_passk_record(rec, paths.passk_file(tmp_path, bench, run))
    total = len(cfg.evaluations()) + len(cfg.diagnostic_runs())
    with pytest.raises(
        MissingInputError, match=f"{total - 1} of {total} result files are missing.*--partial"
    ):
        report_study(cfg, tmp_path)
    assert not paths.report_file(tmp_path).exists()
    assert paths.report_file(tmp_path) in report_study(cfg, tmp_path, partial=True)
