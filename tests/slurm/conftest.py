"""Fixtures for the SLURM tests: the running local cluster (or a skip saying how to start one), and a local
(no SLURM) run of the CI-scale pipeline to compare against."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def local_cluster() -> LocalCluster:
    """The cluster of ``scripts/slurm_local.sh start``; skips when ``sinfo`` is missing or gets no answer."""
    found = find_local_cluster()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="session")
def local_reference(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow after ``snakemake -c2 --configfile=config/test.yaml all`` ran locally (no SLURM).

    Depends on ``local_cluster`` only so that it is skipped (not computed) when there is no cluster.
    """
    wf = copy_workflow(tmp_path_factory.mktemp("local_reference"))
    proc = run_bounded(
        [str(SNAKEMAKE), "-c2", "--configfile=config/test.yaml", "all"],
        cwd=wf,
        env=snakemake_env(),
        timeout_s=1500,
        log=wf / "snakemake-local.log",
    )
    assert proc.returncode == 0, tail(proc.stdout)
    return wf
