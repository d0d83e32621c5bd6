"""Fixtures for the SLURM tests: the running local cluster (or a skip saying how to start one), and a local
(no SLURM) run of the CI-scale pipeline to compare against."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from slurm_helpers import (
    SNAKEMAKE,
    LocalCluster,
    copy_workflow,
    find_local_cluster,
    run_bounded,
    snakemake_env,
    tail,
)

from acerl import paths
from acerl.config import load_config


@pytest.fixture(scope="session")
def local_cluster() -> LocalCluster:
    """The cluster of ``scripts/slurm_local.sh start``; skips when ``sinfo`` is missing or gets no answer."""
    found = find_local_cluster()
    if isinstance(found, str):
        pytest.skip(found)
    return found


TEST_CONFIG = "--configfile=config/test.yaml"


@pytest.fixture(scope="session")
def prepared_inputs(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow where ``prepare_data`` and ``prepare_base`` ran locally for ``config/test.yaml``.

    Depends on ``local_cluster`` only so that it is skipped (not computed) when there is no cluster.
    """
    wf = copy_workflow(tmp_path_factory.mktemp("prepared") / "wf")
    cfg = load_config([wf / "config" / "config.yaml", wf / "config" / "test.yaml"])
    targets = [str(paths.base_model_dir(".", model)) for model in cfg.study.main.models]
    proc = run_bounded(
        [str(SNAKEMAKE), "-c2", TEST_CONFIG, *targets],
        cwd=wf,
        env=snakemake_env(),
        timeout_s=900,
        log=wf / "snakemake-prepare.log",
    )
    assert proc.returncode == 0, tail(proc.stdout)
    return wf


@pytest.fixture(scope="session")
def local_reference(prepared_inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``prepared_inputs`` after ``snakemake -c2 --configfile=config/test.yaml all`` (no SLURM)."""
    wf = tmp_path_factory.mktemp("local_reference") / "wf"
    shutil.copytree(prepared_inputs, wf, symlinks=True)
    proc = run_bounded(
        [str(SNAKEMAKE), "-c2", TEST_CONFIG, "all"],
        cwd=wf,
        env=snakemake_env(),
        timeout_s=1800,
        log=wf / "snakemake-local.log",
    )
    assert proc.returncode == 0, tail(proc.stdout)
    return wf
