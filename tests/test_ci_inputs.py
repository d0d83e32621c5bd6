"""Under ``CI=true`` a test whose input is missing fails instead of skipping (tests/support/ci_inputs.py): CI must not
pass with the real-data or verl checks skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.ci_inputs import import_or_skip

TESTS = Path(__file__).resolve().parent


def test_missing_package_skips_outside_ci_and_fails_in_ci(monkeypatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        import_or_skip("acerl_no_such_package")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"CI=true: acerl_no_such_package does not import"):
        import_or_skip("acerl_no_such_package")


@pytest.mark.parametrize("ci", ["false", "true"])
def test_missing_shared_data_fails_in_ci(tmp_path: Path, ci: str) -> None:
    """The ``shared_data`` fixture of tests/conftest.py, in a pytest session of its own (a copy of the
    conftest beside a test that asks for the fixture)."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(TESTS / "support", tmp_path / "support")
    (tmp_path / "test_needs_data.py").write_text(
        "def test_needs_data(shared_data):\n    assert shared_data\n"
    )
    _session_skips_or_fails(
        tmp_path, ci, "CI=true: real datasets not found", ACERL_SHARED_DATA=str(tmp_path / "absent")
    )


@pytest.mark.parametrize("ci", ["false", "true"])
def test_no_slurm_cluster_fails_in_ci(tmp_path: Path, ci: str) -> None:
    """The ``local_cluster`` fixture of tests/slurm/conftest.py, in a pytest session of its own with no
    ``sinfo`` on PATH: a skip outside CI, a failure under ``CI=true`` (a CI run that lost its cluster must not
    pass with the SLURM tests skipped)."""
    shutil.copy(TESTS / "slurm" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_needs_slurm.py").write_text(
        "def test_needs_slurm(local_cluster):\n    assert local_cluster\n"
    )
    path = os.pathsep.join([str(TESTS / "slurm"), str(TESTS), os.environ.get("PYTHONPATH", "")])
    _session_skips_or_fails(
        tmp_path, ci, "CI=true: no SLURM cluster", PATH=str(Path(sys.executable).parent), PYTHONPATH=path
    )


def _session_skips_or_fails(tmp_path: Path, ci: str, failure: str, **env: str) -> None:
    """Run pytest on ``tmp_path`` in a process of its own with ``CI=ci`` and ``env``: its one test skips
    outside CI and fails with ``failure`` under ``CI=true``."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "CI": ci, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if ci == "true":
        assert proc.returncode == 1 and failure in proc.stdout, proc.stdout[-2000:]
    else:
        assert proc.returncode == 0 and "1 skipped" in proc.stdout, proc.stdout[-2000:]
