"""Skips that must not pass CI: under ``CI=true`` a test's missing input (data, an installed package) fails it.

Imported by ``tests/conftest.py`` and by test modules (``tests/`` is on ``sys.path`` through its conftest).
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    """``CI=true``: CI must not pass with checks skipped."""
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail_in_ci(reason: str, *, module_level: bool = False) -> None:
    """Skip the test (or the module, ``module_level``) with ``reason``; under ``CI=true`` fail instead."""
    if in_ci():
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)


def import_or_skip(name: str) -> ModuleType:
    """``pytest.importorskip(name)`` that fails under ``CI=true`` (e.g. ``verl`` missing from CI's environment)."""
    try:
        return pytest.importorskip(name)
    except pytest.skip.Exception as err:
        skip_or_fail_in_ci(f"{name} does not import: {err}", module_level=True)
        raise  # not reached
