"""Compute accounting from Snakemake's benchmark TSVs, and the catalog of report captions / categories."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from acerl.config import load_config
from acerl.pipeline import paths, stages
from acerl.pipeline.stages import job_benchmark_file
from acerl.report.catalog import captions, describe
from acerl.report.compute import GPU_RULES, MULTI_NODE_RULES, compute_tables, load_benchmarks, study_jobs
from acerl.report.study import add_compute_accounting
from acerl.report.table_format import to_markdown

REPO = Path(__file__).resolve().parents[2]
CONFIGS = [REPO / "config" / "config.yaml", REPO / "config" / "test.yaml"]
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write_tsv(path: Path, wall: float, rss: float, cpu: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{wall}\t0:00:00\t{rss}\t1\t1\t1\t0\t0\t50\t{cpu}\n")


def fill(cfg, root: Path) -> list:
    """One TSV per job: wall 36 s, CPU 18 s, 100 MB; 512 MB for training; a '-' (unmeasured) CPU for grading."""
    jobs = study_jobs(cfg)
    for job in jobs:
        rss = 512.0 if job.stage == "train_policy" else 100.0
        write_tsv(job_benchmark_file(root, job), 36.0, rss, 18.0)
    grade = next(j for j in jobs if j.stage == "grade")
    job_benchmark_file(root, grade).write_text(HEADER + "36\t0\t100\t1\t1\t1\t0\t0\t50\t-\n")
    return jobs


def rows(table) -> dict[str, list[str]]:
    lines = [line for line in to_markdown(table).splitlines() if line.startswith("| ")][1:]
    out = {}
    for line in lines:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        out[cells[0]] = cells[1:]
    return out


def test_jobs_are_the_workflow_grid() -> None:
    cfg = load_config(CONFIGS)
    jobs = study_jobs(cfg)
    n_eval = len(cfg.evaluations())
    by_rule = pd.Series([j.stage for j in jobs]).value_counts().to_dict()
    assert by_rule == {
        "prepare_data": 1,
        "prepare_base": 1,
        "train_policy": len(cfg.runs()),
        "sample": n_eval,
        "grade": n_eval,
        "passk": n_eval,
        "diagnose": len(cfg.diagnostic_runs()),
    }


def test_jobs_are_the_stage_tables_but_the_report(tmp_path: Path) -> None:
    """One home for which jobs exist: the stage table (so verl's data preparation is counted too)."""
    cfg = load_config(CONFIGS, ["compute.backend=verl"])
    jobs = study_jobs(cfg)
    assert jobs == [j for j in stages.study_jobs(cfg) if j.stage != "report"]
    n_verl = sum(j.stage == "prepare_verl_data" for j in jobs)
    assert n_verl == len({r.model for r in cfg.runs()}) > 0
    fill(cfg, tmp_path)
    assert rows(compute_tables(cfg, tmp_path)[0])["prepare_verl_data"][0] == str(n_verl)


def test_totals_per_rule_method_and_run(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS)
    jobs = fill(cfg, tmp_path)
    per_rule, per_method, per_run = compute_tables(cfg, tmp_path)
    r = rows(per_rule)
    n_train = len(cfg.runs())
    # Jobs, wall (min), CPU (min), peak memory (GiB), GPU-hours
    assert r["train_policy"] == [str(n_train), f"{0.6 * n_train:.2f}", f"{0.3 * n_train:.2f}", "0.50", "0.00"]
    assert r["Total"][:2] == [str(len(jobs)), f"{0.6 * len(jobs):.2f}"]
    assert r["grade"][2] == f"{0.3 * (len(cfg.evaluations()) - 1):.2f}"  # the unmeasured CPU time counts as 0
    m = rows(per_method)
    assert m["(shared)"][0] == "2" and m["Total"][0] == str(len(jobs))
    assert m["ACE-GRPO"][0] == str(sum(1 for j in jobs if j.run and j.run.method == "ace_grpo"))
    assert rows(per_run)["Total of the runs"][0] == str(sum(1 for j in jobs if j.run))


def test_gpu_hours_are_wall_times_gpus_requested(tmp_path: Path) -> None:
    cfg = load_config(
        CONFIGS,
        [
            "compute.resources.train_policy={gpus: 4, nodes: 2}",
            "compute.resources.sample={gpus: 1}",
            "compute.resources.grade={gpus: 8}",  # grading requests no GPU in its rule: not counted
        ],
    )
    fill(cfg, tmp_path)
    per_rule = rows(compute_tables(cfg, tmp_path)[0])
    n_train, n_eval = len(cfg.runs()), len(cfg.evaluations())
    assert per_rule["train_policy"][-1] == f"{n_train * 36 * 8 / 3600:.2f}"
    assert per_rule["sample"][-1] == f"{n_eval * 36 / 3600:.2f}"
    assert per_rule["grade"][-1] == "0.00"
    assert per_rule["Total"][-1] == f"{(n_train * 8 + n_eval) * 36 / 3600:.2f}"


def test_gpu_rules_match_the_workflow() -> None:
    """GPU_RULES / MULTI_NODE_RULES are exactly the rules whose resources request gpus / nodes."""
    text = "\n".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    rules = dict(re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, flags=re.S | re.M))
    assert {r for r, body in rules.items() if "gpus=res(" in body} == set(GPU_RULES)
    assert {r for r, body in rules.items() if "nodes=res(" in body} == set(MULTI_NODE_RULES)


def test_compute_md_and_report_section(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS)
    paths.report_file(tmp_path).parent.mkdir(parents=True)
    paths.report_file(tmp_path).write_text("# Results\n")
    add_compute_accounting(cfg, tmp_path)  # no benchmark files: says so
    assert "No compute accounting: no Snakemake benchmark files" in paths.compute_file(tmp_path).read_text()
    paths.report_file(tmp_path).write_text("# Results\n")
    fill(cfg, tmp_path)
    add_compute_accounting(cfg, tmp_path)
    report = paths.report_file(tmp_path).read_text()
    assert report.startswith("# Results\n") and "\n## Compute\n" in report
    for caption in ("Compute per rule", "Compute per method", "Compute per run"):
        assert caption in report and caption in paths.compute_file(tmp_path).read_text()


def test_a_report_without_benchmark_files_keeps_the_study_s_accounting(tmp_path: Path, caplog) -> None:
    """A colleague's clone (or ``dvc repro -f -s report``) has no benchmark files: the report used to replace the
    study's accounting with "No compute accounting"; it now writes the same compute.md and report section
    again, with a warning, so the file and ``dvc.lock`` stay as they were. Another study's file is not kept."""
    cfg = load_config(CONFIGS)
    paths.report_file(tmp_path).parent.mkdir(parents=True)
    paths.report_file(tmp_path).write_text("# Results\n")
    fill(cfg, tmp_path)
    add_compute_accounting(cfg, tmp_path)
    measured = paths.compute_file(tmp_path).read_bytes()
    report = paths.report_file(tmp_path).read_bytes()
    shutil.rmtree(tmp_path / "benchmarks")
    paths.report_file(tmp_path).write_text("# Results\n")
    with caplog.at_level("WARNING", logger="acerl.report.study"):
        add_compute_accounting(cfg, tmp_path)
    assert paths.compute_file(tmp_path).read_bytes() == measured and b"Compute per run" in measured
    assert paths.report_file(tmp_path).read_bytes() == report
    # `dvc repro` deletes compute.md before it reruns the report: the copy dvc.lock names in DVC's cache stands in
    md5 = "0123456789abcdef0123456789abcdef"
    (tmp_path / "dvc.lock").write_text(
        f"schema: '2.0'\nstages:\n  report:\n    outs:\n    - path: results/compute.md\n      md5: {md5}\n"
    )
    cached = tmp_path / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
    cached.parent.mkdir(parents=True)
    cached.write_bytes(measured)
    paths.compute_file(tmp_path).unlink()
    paths.report_file(tmp_path).write_text("# Results\n")
    with caplog.at_level("WARNING", logger="acerl.report.study"):
        add_compute_accounting(cfg, tmp_path)
    assert paths.compute_file(tmp_path).read_bytes() == measured
    assert paths.report_file(tmp_path).read_bytes() == report
    warnings = [r.getMessage() for r in caplog.records if r.name == "acerl.report.study"]
    assert len(warnings) == 2
    for warning in warnings:
        assert warning.endswith(
            f"keeping the accounting of {paths.compute_file(tmp_path)}, made when they were present"
        )
    other = load_config(CONFIGS, ["name=another study"])
    add_compute_accounting(other, tmp_path)
    assert (
        paths.compute_file(tmp_path)
        .read_text()
        .startswith("# Compute: another study\n\nNo compute accounting")
    )


def test_a_bad_benchmark_file_is_named(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS)
    job = study_jobs(cfg)[0]
    bad = job_benchmark_file(tmp_path, job)
    bad.parent.mkdir(parents=True)
    bad.write_text("not\ta benchmark\n")
    with pytest.raises(ValueError, match=re.escape(str(bad))):
        load_benchmarks(cfg, tmp_path)


def test_catalog_categories_and_fallback() -> None:
    assert describe("passk_synth_easy", "table").category == "Pass@k"
    assert "synth_easy" in describe("passk_synth_easy", "table").caption
    assert "paired" in describe("significance_math500", "table").caption
    assert "Holm" in describe("significance_math500", "table").caption
    assert describe("passk_curves", "figure").category == "Figures"
    assert describe("power_analysis", "table") == describe("power_analysis", "table")
    assert describe("an_unknown_table", "table").category == "Other tables"
    assert describe("power_synth_easy", "table").category == "Significance"
    caps = captions(load_config(CONFIGS))
    assert {"passk_synth_easy", "significance_synth_hard", "hyperparameters", "entropy_early"} <= set(caps)
