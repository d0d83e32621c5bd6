"""Mutation testing of functions mutmut 3 does not mutate: decorated ones (``@REGISTRY.register(...)``,
``@torch.no_grad``), e.g. ``vanilla_policy_loss`` and the advantage estimators (docs/mutation.md).

Usage::

    PYTHONPATH=src python scripts/mutate_decorated.py MODULE FUNCTION RESULTS.jsonl -- PYTEST_ARGS...

mutmut's own mutation operators make the mutants of ``FUNCTION`` (its body, without the decorators). Each
mutant is compiled in the module's namespace, the decorators other than registrations are applied, and every
module attribute and registry entry bound to the original function is rebound to it; pytest then runs
``PYTEST_ARGS`` in this process (the tests are imported once) and the original is put back. One JSON line per
mutant: its index, status (``killed`` / ``survived``) and the changed lines. A results file is resumed.
"""

from __future__ import annotations

import difflib
import functools
import gc
import importlib
import inspect
import json
import sys
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


def main(argv: list[str]) -> int:
    module_name, name, results = argv[1], argv[2], Path(argv[3])
    pytest_args = ["-q", "-x", "-p", "no:cacheprovider", *argv[argv.index("--") + 1 :]]
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    func = cst.parse_module(textwrap.dedent(inspect.getsource(inspect.unwrap(original)))).body[0]
    assert isinstance(func, cst.FunctionDef)
    decorators = [cst.Module(body=[]).code_for_node(d.decorator) for d in func.decorators]
    decorators = [d for d in decorators if ".register(" not in d]  # registrations: rebound instead
    bare = cst.Module(body=[func.with_changes(decorators=[])])
    parsed, mutations, _, _ = create_mutations(f"{name}.py", bare.code)
    print(f"{module_name}.{name}: {len(mutations)} mutants", flush=True)
    if pytest.main(pytest_args) != 0:
        print("the tests fail on the unmutated code", file=sys.stderr)
        return 2
    done = {json.loads(line)["i"] for line in results.read_text().splitlines()} if results.exists() else set()
    for i, mutation in enumerate(mutations):
        if i in done:
            continue
        code = parsed.deep_replace(mutation.original_node, mutation.mutated_node).code
        try:
            mutant = compile_mutant(module, name, code, decorators)
        except Exception as error:  # noqa: BLE001 -- a mutant that does not compile is not run
            status = f"invalid: {error!r}"
        else:
            rebind(original, mutant)
            try:
                exit_code = pytest.main(pytest_args)
            finally:
                rebind(mutant, original)
            status = "survived" if exit_code == 0 else "killed"
        record = {"i": i, "function": name, "status": status, "diff": changed_lines(bare.code, code)}
        with results.open("a") as out:
            out.write(json.dumps(record) + "\n")
        print("MUTANT", json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
