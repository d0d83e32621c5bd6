"""docs/core.md stays true: every ``src/acerl/<file>.py:<name>`` it names exists, every line count it gives is
the current one (within :func:`close_enough`), and the core it describes is the one the Makefile tests and
type-checks (``make test-core``, ``make typecheck-core``) and pyproject.toml holds under mypy's strict flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
CORE_DOC = REPO / "docs" / "core.md"

REFERENCE = re.compile(r"`(src/acerl/[\w/]+\.py)(?::([\w.]+))?`")
"""A file, or a file and a function, class or ``Class.method`` in it."""
COUNTED = re.compile(r"`(src/acerl/[\w/]+\.py)(?::([\w.]+))?`(?:,| \()\s*(\d[\d,]*) lines")
"""A reference with its line count: "`file:name` (N lines)" or "(`file:name`, N lines)"."""
TABLE_ROW = re.compile(r"^\| ((?:`src/acerl/[\w/.]+`(?:, )?)+) \| ([\d,]+) \| (.*) \|$", re.M)
"""A row of the packages table: the files or folders, their lines together, their tests."""


def doc() -> str:
    return CORE_DOC.read_text(encoding="utf-8")


def definitions(path: Path) -> dict[str, ast.AST]:
    """The top-level functions and classes of ``path`` and the methods of its classes (``Class.method``)."""
    found: dict[str, ast.AST] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = node
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{item.name}"] = item
    return found


def lines_of(path: str, name: str | None = None) -> int:
    """Lines of a definition (its ``def``/``class`` line to its last, docstring included, decorators not), of a
    file, or of every ``.py`` file under a folder."""
    where = REPO / path
    if name is not None:
        node = definitions(where)[name]
        assert node.end_lineno is not None
        return node.end_lineno - node.lineno + 1
    files = sorted(where.rglob("*.py")) if where.is_dir() else [where]
    return sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files)


def close_enough(stated: int, actual: int) -> bool:
    """A count may lag small edits: within 10% or 5 lines, whichever is more."""
    return abs(stated - actual) <= max(5, actual // 10)


def makefile_list(name: str) -> list[str]:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{name} :?= (.*)$", makefile, re.M)
    assert found, f"Makefile has no {name}"
    return found.group(1).split()


def test_every_named_definition_exists() -> None:
    refs = REFERENCE.findall(doc())
    assert len(refs) >= 20, "docs/core.md names the core's pieces as `src/acerl/<file>.py:<name>`"
    missing = []
    for path, name in refs:
        if not (REPO / path).is_file():
            missing.append(f"{path}: no such file")
        elif name and name not in definitions(REPO / path):
            missing.append(f"{path}: no {name}")
    assert missing == []


def test_every_line_count_is_current() -> None:
    counted = COUNTED.findall(doc())
    assert len(counted) >= 20
    stale = [
        f"`{path}{':' + name if name else ''}`: {stated} lines in docs/core.md, {lines_of(path, name or None)} now"
        for path, name, stated in counted
        if not close_enough(int(stated.replace(",", "")), lines_of(path, name or None))
    ]
    assert stale == [], "update docs/core.md's counts"


def table() -> list[tuple[list[str], int, list[str]]]:
    rows = [
        (re.findall(r"`([^`]+)`", paths), int(lines.replace(",", "")), re.findall(r"`(tests/[^`]+)`", tests))
        for paths, lines, tests in TABLE_ROW.findall(doc())
    ]
    assert rows, "docs/core.md has no packages table"
    return rows


def test_the_packages_table_counts_are_current() -> None:
    stale = [
        f"{paths}: {stated} lines in docs/core.md, {actual} now"
        for paths, stated, _ in table()
        if not close_enough(stated, actual := sum(lines_of(p) for p in paths))
    ]
    assert stale == []


def strict_modules() -> set[str]:
    """The modules pyproject.toml's mypy override holds under the strict flags (``pkg.*`` -> ``pkg``)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    for override in config["tool"]["mypy"]["overrides"]:
        if override.get("disallow_untyped_defs"):
            return {m.removesuffix(".*") for m in override["module"]}
    raise AssertionError("pyproject.toml has no strict mypy override for the core")


def test_the_core_is_one_list_of_modules() -> None:
    """The table's packages, the Makefile's strict type check and pyproject's strict override name one core."""
    in_table = {
        p.removesuffix("/").removesuffix(".py").removeprefix("src/").replace("/", ".")
        for paths, _, _ in table()
        for p in paths
    }
    in_makefile = set(makefile_list("CORE_PACKAGES")) | set(makefile_list("CORE_MODULES"))
    assert in_table == in_makefile == strict_modules()


def test_make_test_core_runs_the_tables_tests() -> None:
    lanes = makefile_list("CORE_TESTS_TRAIN") + makefile_list("CORE_TESTS_GRADE")
    assert len(lanes) == len(set(lanes))
    assert all((REPO / p).exists() for p in lanes), lanes
    assert {t.removesuffix("/") for _, _, tests in table() for t in tests} == set(lanes)


@pytest.mark.parametrize(
    ("stated", "actual", "ok"),
    [(85, 85, True), (80, 85, True), (76, 85, False), (100, 110, True), (98, 110, False)],
)
def test_close_enough(stated: int, actual: int, ok: bool) -> None:
    assert close_enough(stated, actual) is ok
