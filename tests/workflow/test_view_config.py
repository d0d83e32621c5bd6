"""A ``--configfile`` overlay that only switches the tracker is no change of the run: it stays out of the jobs'
commands (which Snakemake records as params) and reaches the jobs through ``$ACERL_VIEW_CONFIG``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.study import SNAKEMAKE, TEST_CONFIG_FILES, copy_workflow, snakemake_env

from acerl.cli import config_files
from acerl.config import load_config
from acerl.pipeline.stages import VIEW_CONFIG_ENV, split_view_files

TRACKER = "compute: {tracker: tensorboard}\n"


def _snakemake(project: Path, *args: str) -> str:
    out = subprocess.run([str(SNAKEMAKE), *args], cwd=project, env=snakemake_env(), capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_a_tracker_overlay_reruns_nothing(tmp_path: Path) -> None:
    """The data of the CI-scale config, made; the same target with a TensorBoard overlay added: nothing to do."""
    project = copy_workflow(tmp_path / "study")
    (project / "tensorboard.yaml").write_text(TRACKER)
    target = "data/sft.jsonl"
    _snakemake(project, target, "-c1", "--configfile", TEST_CONFIG_FILES[1])
    dry = _snakemake(project, target, "-n", "--configfile", TEST_CONFIG_FILES[1], "tensorboard.yaml")
    assert "Nothing to be done" in dry


def test_the_jobs_stack_a_view_overlay_from_the_environment(tmp_path: Path, monkeypatch) -> None:
    tracker = tmp_path / "tensorboard.yaml"
    tracker.write_text(TRACKER)
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("compute: {tracker: none}\ngrading: {timeout_s: 7}\n")
    files = [*TEST_CONFIG_FILES, tracker]
    assert split_view_files(files) == (list(TEST_CONFIG_FILES), [tracker])
    assert split_view_files([*TEST_CONFIG_FILES, mixed]) == ([*TEST_CONFIG_FILES, mixed], [])
    # a later file that sets the tracker too wins over the overlay: stacked last it would not, so it stays
    assert split_view_files([TEST_CONFIG_FILES[0], tracker, mixed]) == (
        [TEST_CONFIG_FILES[0], tracker, mixed],
        [],
    )
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.setenv(VIEW_CONFIG_ENV, str(tracker))
    assert load_config(config_files([TEST_CONFIG_FILES[1]])).compute.tracker == "tensorboard"
    monkeypatch.delenv(VIEW_CONFIG_ENV)
    assert load_config(config_files([TEST_CONFIG_FILES[1]])).compute.tracker == "none"


@pytest.fixture(autouse=True)
def _no_view_config(monkeypatch) -> None:
    monkeypatch.delenv(VIEW_CONFIG_ENV, raising=False)
