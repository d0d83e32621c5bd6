"""Fixtures for the trainer tests (helpers in :mod:`trainer_fixtures`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_fixtures import DigitVerifier, make_root


@pytest.fixture(scope="session")
def tiny_root_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_root(tmp_path_factory.mktemp("tiny_root"))


@pytest.fixture
def tiny_root(tiny_root_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the template root (data + base model) per test."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(tiny_root_template, root)
    return root


@pytest.fixture
def verifier() -> DigitVerifier:
    return DigitVerifier()
