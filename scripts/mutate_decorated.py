"""Mutation testing of functions mutmut 3 does not mutate: decorated ones (``@REGISTRY.register(...)``,
``@torch.no_grad``), e.g. ``vanilla_policy_loss`` and the advantage estimators (docs/mutation.md).

Usage::

    PYTHONPATH=src python scripts/mutate_decorated.py [--copy] [--recheck OLD.jsonl] MODULE NAME[,NAME...] RESULTS.jsonl -- PYTEST_ARGS...

``NAME`` is a module-level function or a method (``Class.method``); ``MODULE '*'`` takes every function and
method defined in the module, in source order.

mutmut's own mutation operators make the mutants of each function (its body, without the decorators). Each
mutant is compiled in the module's namespace, the decorators other than registrations are applied, and every
module attribute, registry entry and class attribute bound to the original function is rebound to it; pytest
then runs ``PYTEST_ARGS`` in this process (the tests are imported once) and the original is put back. One JSON
line per mutant: the function, its index, status (``killed`` / ``survived``) and the changed lines. A results
file is resumed.

``--recheck OLD.jsonl`` runs only the mutants that ``OLD.jsonl`` records as survived (regenerated from the
current source; one whose changed lines differ from the recorded ones is skipped, the function having changed)
and writes their new status to ``RESULTS.jsonl``: after adding tests, it says which survivors they close. The
tests are first run on the unmutated code, so a failing or flaky selection cannot pass for a kill.

``--copy`` is for code that runs in other processes (the grading pool's workers, started by a fork server or
spawned, import the module afresh and never see an in-process rebinding): each mutant is written into a copy
of ``src`` and the tests run in a fresh Python process with that copy first on ``PYTHONPATH``, under a
timeout (``MUTATE_TIMEOUT_S``, default 300 s; a mutant that hangs the tests counts as ``timeout``, killed).
Slower (one interpreter start and test collection per mutant), but nothing is shared with the unmutated code.
"""

from __future__ import annotations

import difflib
import functools
import gc
import importlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import libcst as cst
import pytest
from mutmut.mutation.file_mutation import create_mutations


def rebind(old: Any, new: Any) -> None:
    """Point every module attribute, registry dict entry and ``functools.partial`` that holds ``old`` at ``new``
    (a test module's ``ace = partial(ace_estimator, ...)`` must call the mutant too)."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            for key, value in list(namespace.items()):
                if value is old:
                    namespace[key] = new
    for referrer in gc.get_referrers(old):
        if isinstance(referrer, dict) and "__name__" not in referrer:
            for key, value in list(referrer.items()):
                if value is old:
                    referrer[key] = new
        elif isinstance(referrer, functools.partial) and referrer.func is old:
            referrer.__setstate__((new, referrer.args, referrer.keywords, referrer.__dict__ or None))


def compile_mutant(module: ModuleType, name: str, code: str, decorators: list[str]) -> Callable[..., Any]:
    """The function defined by ``code`` in a copy of ``module``'s namespace, with ``decorators`` applied."""
    namespace = dict(module.__dict__)
    exec(compile(code, f"<mutant of {name}>", "exec"), namespace)  # noqa: S102
    fn = namespace[name]
    for expr in reversed(decorators):
        fn = eval(expr, namespace)(fn)  # noqa: S307
    return fn


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def module_functions(module: ModuleType) -> list[str]:
    """Every function and method defined in ``module`` (not imported into it), in source order."""
    found: list[tuple[int, str]] = []
    for attr, value in vars(module).items():
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            found.append((inspect.unwrap(value).__code__.co_firstlineno, attr))
        elif inspect.isclass(value) and value.__module__ == module.__name__:
            for method, member in vars(value).items():
                func = inspect.unwrap(getattr(member, "__func__", getattr(member, "fget", member)))
                if (  # not inherited, not generated (a dataclass's __init__ / __eq__ has no source file)
                    inspect.isfunction(func)
                    and func.__qualname__ == f"{value.__name__}.{func.__name__}"
                    and func.__code__.co_filename == module.__file__
                ):
                    found.append((func.__code__.co_firstlineno, f"{attr}.{method}"))
    return [name for _, name in sorted(found)]


def timeout_s() -> float:
    return float(os.environ.get("MUTATE_TIMEOUT_S", "300"))


class MutantTimeout(Exception):  # noqa: N818 -- raised into a test that a mutant made hang
    pass


def run_with_timeout(pytest_args: list[str]) -> tuple[int, bool]:
    """``pytest.main(pytest_args)`` in this process; a test still running after ``MUTATE_TIMEOUT_S`` seconds
    (an endless loop) gets :class:`MutantTimeout` raised into it, and the run counts as timed out (killed)."""
    fired = False

    def interrupt(signum: int, frame: object) -> None:
        nonlocal fired
        fired = True
        signal.setitimer(signal.ITIMER_REAL, 5.0)  # again, should the test swallow it
        raise MutantTimeout(f"the tests ran past {limit} s")

    limit = timeout_s()
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        exit_code = pytest.main(pytest_args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return int(exit_code), fired


def in_copy(module: ModuleType, original: Callable[..., Any], code: str, pytest_args: list[str]) -> str:
    """Run ``pytest_args`` in a fresh process on a copy of the package in which ``original``'s definition (from
    its ``def`` line, after its decorators) is replaced by ``code``; ``killed`` / ``survived`` / ``timeout``."""
    lines, start = inspect.getsourcelines(original)
    offset = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    indent = lines[offset][: len(lines[offset]) - len(lines[offset].lstrip())]
    source = Path(inspect.getsourcefile(module) or "").read_text().splitlines(keepends=True)
    first = start - 1 + offset
    body = textwrap.indent(code.strip("\n") + "\n", indent)
    mutated = "".join([*source[:first], body, *source[start - 1 + len(lines) :]])
    package = module.__name__.split(".")[0]
    root = Path(sys.modules[package].__file__ or "").parent.parent
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        shutil.copytree(root / package, Path(tmp) / package, ignore=shutil.ignore_patterns("__pycache__"))
        (Path(tmp) / Path(module.__file__ or "").relative_to(root)).write_text(mutated)
        env = {**os.environ, "PYTHONPATH": tmp, "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen(  # its own session: a timeout ends the tests and every worker they started
            [sys.executable, "-m", "pytest", *pytest_args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s())
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "timeout"
    return "survived" if proc.returncode == 0 else "killed"


def mutate_one(
    module: ModuleType,
    name: str,
    results: Path,
    pytest_args: list[str],
    done: set,
    copy: bool = False,
    only: dict[tuple[str, int], list[str]] | None = None,
) -> None:
    """Make, run and record the mutants of ``name`` (``function`` or ``Class.method``) of ``module``
    (``copy``: each in a fresh process on a copy of the package, :func:`in_copy`; ``only``: just these
    ``(name, index)`` mutants, each given with the changed lines it had, which must still match)."""
    owner, attr = (
        (module, name) if "." not in name else (getattr(module, name.split(".")[0]), name.split(".")[1])
    )
    member = vars(owner)[attr] if isinstance(owner, type) else getattr(owner, attr)
    original = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
    func = cst.parse_module(textwrap.dedent(inspect.getsource(inspect.unwrap(original)))).body[0]
    assert isinstance(func, cst.FunctionDef)
    decorators = [cst.Module(body=[]).code_for_node(d.decorator) for d in func.decorators]
    # registrations are rebound instead; a method's own wrapper (property, staticmethod) is put back below
    decorators = [d for d in decorators if ".register(" not in d and d not in ("property", "staticmethod",
                                                                                "classmethod")]  # fmt: skip
    bare = cst.Module(body=[func.with_changes(decorators=[])])
    parsed, mutations, _, _ = create_mutations(f"{attr}.py", bare.code)
    print(f"{module.__name__}.{name}: {len(mutations)} mutants", flush=True)
    if "super()" in bare.code:  # compiled outside its class, a zero-argument super() fails: not a kill
        print(f"{name}: skipped (zero-argument super())", flush=True)
        return
    for i, mutation in enumerate(mutations):
        if (name, i) in done or (only is not None and (name, i) not in only):
            continue
        code = parsed.deep_replace(mutation.original_node, mutation.mutated_node).code
        diff = changed_lines(bare.code, code)
        if only is not None and diff != only[(name, i)]:
            print(f"{name} #{i}: skipped (the function changed since the recorded run)", flush=True)
            continue
        if copy:
            status = in_copy(module, original, code, pytest_args)
        else:
            status = run_in_process(module, owner, attr, member, original, code, decorators, pytest_args)
        record = {"i": i, "function": name, "status": status, "diff": diff}
        with results.open("a") as out:
            out.write(json.dumps(record) + "\n")
        print("MUTANT", json.dumps(record), flush=True)


def run_in_process(
    module: ModuleType,
    owner: Any,
    attr: str,
    member: Any,
    original: Callable[..., Any],
    code: str,
    decorators: list[str],
    pytest_args: list[str],
) -> str:
    """Compile the mutant ``code`` of ``owner.attr`` (``member`` as defined, ``original`` its function), put it
    in place of the original, run the tests in this process, put the original back; the mutant's status."""
    try:
        mutant = compile_mutant(module, attr, code, decorators)
    except Exception as error:  # noqa: BLE001 -- a mutant that does not compile is not run
        return f"invalid: {error!r}"
    wrapper = type(member) if isinstance(member, (staticmethod, classmethod, property)) else None
    if isinstance(owner, type):
        setattr(owner, attr, wrapper(mutant) if wrapper else mutant)
    else:
        rebind(original, mutant)
    try:
        exit_code, timed_out = run_with_timeout(pytest_args)
    finally:
        if isinstance(owner, type):
            setattr(owner, attr, member)
        else:
            rebind(mutant, original)
    return "timeout" if timed_out else "survived" if exit_code == 0 else "killed"


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a results file (one JSON object per line)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def survivors(path: Path) -> dict[tuple[str, int], list[str]]:
    """``(function, index) -> changed lines`` of the mutants recorded as ``survived`` in a results file."""
    return {(r["function"], r["i"]): r["diff"] for r in read_records(path) if r["status"] == "survived"}


USAGE = (
    "usage: mutate_decorated.py [--copy] [--recheck OLD.jsonl] MODULE NAME[,NAME...]|'*' RESULTS.jsonl "
    "-- PYTEST_ARGS..."
)


def parse_args(argv: list[str]) -> tuple[bool, Path | None, str, str, Path, list[str]]:
    """``(copy, recheck file, module, names, results file, pytest arguments)``; a usage error exits with the
    usage line and what is wrong, not a traceback."""
    if "--" not in argv:
        raise SystemExit(f"{USAGE}\nmissing `--` before the pytest arguments")
    options = argv[1 : argv.index("--")]
    copy = "--copy" in options
    options = [a for a in options if a != "--copy"]
    recheck = None
    if "--recheck" in options:
        at = options.index("--recheck")
        if at + 1 >= len(options):
            raise SystemExit(f"{USAGE}\n--recheck needs the results file of the earlier run")
        recheck = Path(options[at + 1])
        if not recheck.is_file():
            raise SystemExit(f"{USAGE}\n--recheck {recheck}: no such results file")
        del options[at : at + 2]
    if len(options) != 3 or any(a.startswith("--") for a in options):
        raise SystemExit(f"{USAGE}\nexpected MODULE, NAMES and RESULTS.jsonl, got {options}")
    module_name, names, results_file = options
    return copy, recheck, module_name, names, Path(results_file), argv[argv.index("--") + 1 :]


def main(argv: list[str]) -> int:
    copy, recheck, module_name, names, results, selection = parse_args(argv)
    only = None if recheck is None else survivors(recheck)
    pytest_args = ["-q", "-x", "-p", "no:cacheprovider", *selection]
    module = importlib.import_module(module_name)
    functions = module_functions(module) if names == "*" else names.split(",")
    if only is not None:
        functions = [f for f in functions if any(name == f for name, _ in only)]
    if pytest.main(pytest_args) != 0:
        print("the tests fail on the unmutated code", file=sys.stderr)
        return 2
    done = {(r["function"], r["i"]) for r in read_records(results)} if results.exists() else set()
    for name in functions:
        mutate_one(module, name, results, pytest_args, done, copy, only)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
