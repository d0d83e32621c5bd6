"""Snakemake's own report of the CI-scale study holds every table and figure with its caption and category, and
the study's report carries the compute accounting from the jobs' benchmark files."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest
from support.study import TEST_CONFIG_ARG, TEST_CONFIG_FILES, run_snakemake

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.pipeline.stages import job_benchmark_file
from acerl.report.catalog import describe
from acerl.report.compute import study_jobs

pytestmark = pytest.mark.slow


def test_compute_accounting_in_the_study_report(ci_study: Path) -> None:
    cfg = load_config([ci_study / f for f in TEST_CONFIG_FILES])
    jobs = study_jobs(cfg)
    assert all(job_benchmark_file(ci_study, j).is_file() for j in jobs)
    report = paths.report_file(ci_study).read_text()
    compute = paths.compute_file(ci_study).read_text()
    assert "\n## Compute\n" in report
    per_rule = (
        "**Compute per rule" + compute.split("**Compute per rule", 1)[1].split("**Compute per method")[0]
    )
    for rule in ("prepare_data", "prepare_base", "train_policy", "sample", "grade", "passk", "diagnose"):
        n = sum(1 for j in jobs if j.stage == rule)
        assert re.search(rf"^\| {rule} \| {n} \| \d+\.\d\d \|", per_rule, flags=re.M), (rule, per_rule)
    total = re.search(r"^\| \*\*Total\*\* \| (\d+) \| (\d+\.\d\d) \|", per_rule, flags=re.M)
    assert total and int(total.group(1)) == len(jobs) and float(total.group(2)) > 0
    assert per_rule in report  # the same tables in report.md


def test_snakemake_report_holds_every_table_and_figure(ci_study: Path, tmp_path: Path) -> None:
    study = shutil.copytree(ci_study, tmp_path / "study", symlinks=True)
    run_snakemake(study, TEST_CONFIG_ARG, "--report", "report.zip", log="snakemake-report.log")
    with zipfile.ZipFile(study / "report.zip") as z:
        names = z.namelist()
        html = "\n".join(z.read(n).decode("utf-8", "replace") for n in names if n.endswith((".html", ".js")))
    shipped = {Path(n).name for n in names}
    tables = sorted(p.name for p in paths.tables_dir(study).glob("*.html"))  # shown inline, unlike Markdown
    figures = sorted(p.name for p in paths.figures_dir(study).glob("*.png"))
    assert tables and figures
    missing = [f for f in [*tables, *figures, "report.html", "compute.md"] if f not in shipped]
    assert not missing, f"not in the Snakemake report: {missing}"
    for stem, kind in [
        *((Path(t).stem, "table") for t in tables),
        *((Path(f).stem, "figure") for f in figures),
    ]:
        item = describe(stem, kind)
        assert item.category in html, (stem, item.category)
        assert item.caption.split(":")[0][:40] in html, (stem, item.caption)
    assert "Compute" in html and "What the study cost" in html
