"""``scripts/mutate_decorated.py`` on a module of its own: mutants made, run and recorded, a weak test's
survivors rechecked against a stronger one (``--recheck``), in-process and on a copy (``--copy``), and a test
selection that fails on the unmutated code refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutate_decorated.py"

MODULE = '''
def clip(x, lo, hi, scale=2):
    """x times scale, limited to [lo, hi]."""
    if x < lo:
        return lo
    return min(x * scale, hi)
'''
WEAK = """
from demo.core import clip

def test_below_and_positive():
    assert clip(-1, 0, 100) == 0 and clip(5, 0, 100) > 0
"""
STRONG = """
from demo.core import clip

def test_edges():
    assert [clip(x, 0, 10) for x in (-1, 0, 3, 6)] == [0, 0, 6, 10]
    assert clip(3, 0, 10, scale=1) == 3
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script in ``tmp_path`` (mutmut, whose operators it uses, reads its settings from the working
    directory: a ``setup.cfg`` naming the code there)."""
    (tmp_path / "setup.cfg").write_text("[mutmut]\nsource_paths=src\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "MUTATE_TIMEOUT_S": "60"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _write(tmp_path: Path, source: str, **tests: str) -> None:
    """The project's layout: the package under ``src/``, the tests under ``tests/``."""
    (tmp_path / "src" / "demo").mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / "demo" / "__init__.py").write_text("")
    (tmp_path / "src" / "demo" / "core.py").write_text(source)
    (tmp_path / "tests").mkdir(exist_ok=True)
    for name, text in tests.items():
        (tmp_path / "tests" / f"{name}.py").write_text(text)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("copy", [False, True], ids=["in-process", "copy"])
def test_mutants_recorded_and_survivors_rechecked(tmp_path, copy):
    _write(tmp_path, MODULE, test_weak=WEAK, test_strong=STRONG)
    flags = ["--copy"] if copy else []
    first = _run(tmp_path, *flags, "demo.core", "clip", "weak.jsonl", "--", "tests/test_weak.py")
    assert first.returncode == 0, first.stderr
    weak = _records(tmp_path / "weak.jsonl")
    statuses = {r["status"] for r in weak}
    assert {r["function"] for r in weak} == {"clip"} and statuses <= {"killed", "survived"}
    survived = [r for r in weak if r["status"] == "survived"]
    assert survived and len(survived) < len(weak)  # the weak test misses the edges and catches the rest
    assert all(r["diff"] and r["diff"][0].startswith("-") for r in weak)

    again = _run(
        tmp_path,
        *flags,
        "--recheck",
        "weak.jsonl",
        "demo.core",
        "*",
        "strong.jsonl",
        "--",
        "tests/test_strong.py",
    )
    assert again.returncode == 0, again.stderr
    strong = _records(tmp_path / "strong.jsonl")
    assert [(r["function"], r["i"]) for r in strong] == [(r["function"], r["i"]) for r in survived]
    assert [r["diff"] for r in strong] == [r["diff"] for r in survived]
    # `x < lo` -> `x <= lo` returns lo == x at the edge: the same value, an equivalent mutant
    assert {r["status"] for r in strong if "x <= lo" not in "".join(r["diff"])} == {"killed"}
    assert any("x <= lo" in "".join(r["diff"]) and r["status"] == "survived" for r in strong)


def test_a_selection_that_fails_unmutated_is_refused(tmp_path):
    _write(
        tmp_path,
        MODULE,
        test_wrong="from demo.core import clip\n\ndef test_x():\n    assert clip(5, 0, 1) == 5\n",
    )
    run = _run(tmp_path, "demo.core", "clip", "out.jsonl", "--", "tests/test_wrong.py")
    assert run.returncode == 2 and "the tests fail on the unmutated code" in run.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_a_recheck_skips_mutants_of_a_function_that_changed(tmp_path):
    _write(tmp_path, MODULE, test_weak=WEAK)
    assert _run(tmp_path, "demo.core", "clip", "weak.jsonl", "--", "tests/test_weak.py").returncode == 0
    _write(tmp_path, MODULE.replace("min(x * scale, hi)", "min(hi, x * scale)"))
    again = _run(
        tmp_path, "--recheck", "weak.jsonl", "demo.core", "clip", "new.jsonl", "--", "tests/test_weak.py"
    )
    assert again.returncode == 0, again.stderr
    assert "the function changed since the recorded run" in again.stdout
    new = _records(tmp_path / "new.jsonl") if (tmp_path / "new.jsonl").exists() else []
    old = {(r["i"], tuple(r["diff"])) for r in _records(tmp_path / "weak.jsonl")}
    assert all((r["i"], tuple(r["diff"])) in old for r in new)  # only mutants that are still the same


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (
            ["demo.core", "clip", "out.jsonl", "tests/test_weak.py"],
            "missing `--` before the pytest arguments",
        ),
        (["demo.core", "out.jsonl", "--", "tests/test_weak.py"], "expected MODULE, NAMES and RESULTS.jsonl"),
        (
            ["--recheck", "nowhere.jsonl", "demo.core", "clip", "o.jsonl", "--", "t.py"],
            "no such results file",
        ),
        (["demo.core", "clip", "o.jsonl", "--recheck", "--", "t.py"], "--recheck needs the results file"),
    ],
)
def test_usage_errors_say_what_is_wrong(tmp_path, args, why):
    run = _run(tmp_path, *args)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("usage: mutate_decorated.py") and why in run.stderr
