"""Snakemake's HTML report names the study its results come from, also when it is run without the study's
``--configfile`` (it titled a CI-scale study with the embedded default's name)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support.study import REPO, SNAKEMAKE, copy_workflow, snakemake_env

from acerl.pipeline import paths
from acerl.report.inputs import reported_study_name

PNG = bytes.fromhex(  # a 1x1 image, standing in for a figure
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000000020001e221bc330000000049454e44ae426082"
)


def _results(root: Path, name: str) -> None:
    """The report's outputs as ``acerl report`` of the study ``name`` leaves them (one table, one figure)."""
    paths.tables_dir(root).mkdir(parents=True)
    paths.figures_dir(root).mkdir(parents=True)
    (paths.tables_dir(root) / "passk_synth_easy.html").write_text("<p>table</p>\n")
    (paths.figures_dir(root) / "passk_curves.png").write_bytes(PNG)
    paths.compute_file(root).write_text(f"# Compute: {name}\n\nno accounting\n")
    paths.report_file(root).write_text(f"# Results: {name}\n")
    paths.report_page_file(root).write_text("<html></html>\n")


def test_snakemake_report_without_the_configfile_names_the_study_of_the_results(tmp_path: Path) -> None:
    study = copy_workflow(tmp_path / "study")
    _results(study, "ci-scale-study")
    proc = subprocess.run(
        [str(SNAKEMAKE), "--report", "report.html"],
        cwd=study,
        env=snakemake_env(extra={"PYTHONPATH": str(REPO / "src")}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (study / "report.html").read_text(encoding="utf-8")
    assert re.findall(r"Config: ([\w-]+)\.</p>", page) == ["ci-scale-study"]


def test_the_study_name_is_read_from_the_compute_accounting(tmp_path: Path) -> None:
    assert reported_study_name(tmp_path) is None  # no report yet: the config's name is used
    _results(tmp_path, "methods-study")
    assert reported_study_name(tmp_path) == "methods-study"
    paths.compute_file(tmp_path).write_text("something else\n")
    assert reported_study_name(tmp_path) is None
