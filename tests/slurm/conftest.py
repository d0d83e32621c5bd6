"""Fixtures for the SLURM tests: the running local cluster (or a skip saying how to start one; under ``CI=true`` a
failure), prepared inputs and the session's local (no SLURM) run of the CI-scale pipeline to compare against
(``tests/study.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.ci_inputs import skip_or_fail_in_ci
from support.slurm_helpers import LocalCluster, find_local_cluster


@pytest.fixture(scope="session")
def local_cluster() -> LocalCluster:
    """The cluster of ``scripts/slurm_local.sh start``; skips when ``sinfo`` is missing or gets no answer, and
    fails then under ``CI=true`` (CI starts one: ``scripts/run_tests.sh``)."""
    found = find_local_cluster()
    if isinstance(found, str):
        skip_or_fail_in_ci(found)
    return found


@pytest.fixture(scope="session")
def prepared_inputs(
    local_cluster: LocalCluster, prepared_study: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A copy of the session's ``prepared_study`` (data and base models of ``config/test.yaml``, prepared
    locally) to run SLURM jobs in. Depends on ``local_cluster`` so that it is skipped (not computed) when
    there is no cluster."""
    wf = tmp_path_factory.mktemp("prepared") / "wf"
    shutil.copytree(prepared_study, wf, symlinks=True)
    return wf


@pytest.fixture(scope="session")
def local_reference(local_cluster: LocalCluster, ci_study: Path) -> Path:
    """The session's local (no SLURM) run of ``snakemake -c2 --configfile=config/test.yaml all``."""
    return ci_study
