"""Every artifact path is derived in :mod:`acerl.pipeline.paths`: the stage table's declared files are ``acerl.pipeline.paths``
results, and no other module builds a path in a run folder or next to a ``paths`` file by hand."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from acerl.config import Config, load_config
from acerl.pipeline import paths
from acerl.pipeline.stages import ROOT, Job, job_inputs, job_outputs, study_jobs

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
GRIDS = {
    "test, local": (("config/config.yaml", "config/test.yaml"), ()),
    "test, verl": (("config/config.yaml", "config/test.yaml"), ("compute.backend=verl",)),
    "paper": (("config/config.yaml", "config/paper.yaml"), ()),
}
FOLDER_BUILDERS = {"run_dir", "results_dir"}
"""``acerl.pipeline.paths`` functions whose folder other modules must not extend with a literal name (the layout's)."""
SIBLING_METHODS = {"with_name", "with_suffix", "with_stem"}


def _path_functions() -> dict[str, object]:
    return {
        name: fn
        for name, fn in vars(paths).items()
        if inspect.isfunction(fn) and fn.__module__ == paths.__name__ and not name.startswith("_")
    }


def _calls(cfg: Config, job: Job) -> Iterator[Path]:
    """Every ``acerl.pipeline.paths`` result for ``job``'s own model, run and benchmark and the config's splits."""
    values = {
        "root": [ROOT],
        "model": [job.model] if job.model else list(cfg.models),
        "run": [job.run] if job.run else cfg.base_runs() + cfg.runs(),
        "benchmark": [job.benchmark] if job.benchmark else cfg.benchmark_names,
        "split": cfg.data_splits,
    }
    for fn in _path_functions().values():
        params = list(inspect.signature(fn).parameters)  # type: ignore[arg-type]
        if not set(params) <= set(values):
            continue  # needs a step, a rule, ...: not a stage's file
        grid: list[dict[str, object]] = [{}]
        for p in params:
            grid = [{**g, p: v} for g in grid for v in values[p]]
        for kwargs in grid:
            yield fn(**kwargs)  # type: ignore[operator]


@pytest.mark.parametrize("grid", list(GRIDS))
def test_the_stage_tables_files_are_acerl_paths(grid: str) -> None:
    files, overrides = GRIDS[grid]
    cfg = load_config([REPO / f for f in files], overrides)
    real = cfg.data.real
    sources = [] if real is None else [real.train, *real.benchmarks.values()]
    from_config = {s.path for s in sources if s.path} | {m.path for m in cfg.models.values() if m.path}
    for job in study_jobs(cfg):
        known = {p.as_posix() for p in _calls(cfg, job)}
        declared = [o.path for o in job_outputs(cfg, job)]
        for value in job_inputs(cfg, job).values():
            declared += [value] if isinstance(value, str) else list(value)
        stray = [p for p in declared if p not in known and p not in from_config]
        assert not stray, f"{job}: files not built by acerl.pipeline.paths: {stray}"


def test_verl_data_is_declared_by_its_writer_and_its_reader() -> None:
    cfg = load_config([REPO / "config/config.yaml", REPO / "config/test.yaml"], ["compute.backend=verl"])
    jobs = study_jobs(cfg)
    model = next(j.model for j in jobs if j.stage == "prepare_verl_data")
    parquet = {p.as_posix() for p in (paths.verl_train_file(ROOT, model), paths.verl_val_file(ROOT, model))}
    writer = next(j for j in jobs if j.stage == "prepare_verl_data")
    assert {o.path for o in job_outputs(cfg, writer)} == parquet
    reader = next(j for j in jobs if j.stage == "train_policy" and j.run and j.run.model == model)
    assert parquet <= set(job_inputs(cfg, reader).values())  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ hand-built paths
def _paths_call(node: ast.AST, local: set[str]) -> str | None:
    """The ``acerl.pipeline.paths`` function ``node`` calls (``paths.f(...)`` or ``f(...)`` imported from it)."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "paths":
        return f.attr
    if isinstance(f, ast.Name) and f.id in local:
        return f.id
    return None


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions nested in it."""
    for child in ast.iter_child_nodes(scope):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield child
            yield from _own_nodes(child)


def hand_built_paths(source: str, name: str = "<module>") -> list[str]:
    """``paths.run_dir(...) / "name"`` and ``paths.f(...).with_name(...)`` in ``source`` (also through a variable
    assigned in the same function): a layout path typed outside :mod:`acerl.pipeline.paths`."""
    tree = ast.parse(source)
    local = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "acerl.pipeline.paths"
        for a in node.names
    }
    bad: list[str] = []
    for scope in [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
    ]:
        nodes = list(_own_nodes(scope))
        made: dict[str, str] = {}  # variable -> the paths function that made it
        for node in nodes:
            if isinstance(node, ast.Assign):
                target = node.targets[0]
                pairs = (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                made.update(
                    (t.id, fn) for t, v in pairs if isinstance(t, ast.Name) and (fn := _paths_call(v, local))
                )

        def origin(expr: ast.AST, made: dict[str, str] = made) -> str | None:
            return made.get(expr.id) if isinstance(expr, ast.Name) else _paths_call(expr, local)

        for node in nodes:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                fn = origin(node.left)
                if fn in FOLDER_BUILDERS and isinstance(node.right, (ast.Constant, ast.Name, ast.JoinedStr)):
                    bad.append(f"{name}:{node.lineno}: {fn}(...) / {ast.unparse(node.right)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                fn = origin(node.func.value)
                if node.func.attr in SIBLING_METHODS and fn:
                    bad.append(f"{name}:{node.lineno}: {fn}(...).{node.func.attr}(...)")
    return sorted(set(bad))


def test_no_module_builds_a_layout_path_by_hand() -> None:
    bad = []
    for path in sorted((SRC / "acerl").rglob("*.py")):
        if path == SRC / "acerl" / "paths.py":
            continue
        bad += hand_built_paths(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))
    assert not bad, "paths built outside acerl.pipeline.paths (add a function there):\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        "from acerl import paths\ndef f(root, run):\n    return paths.run_dir(root, run) / 'verl_logs'\n",
        "from acerl import paths\ndef f(root, run):\n    out = paths.diagnostics_file(root, run)\n"
        "    return out.with_name(f'.{out.name}.partial')\n",
        "from acerl.pipeline.paths import run_dir\ndef f(root, run):\n    d, x = run_dir(root, run), 1\n    return d / NAME\n",
    ],
)
def test_the_scan_sees_the_hand_built_paths_it_replaced(source: str) -> None:
    assert hand_built_paths(source)
    assert not hand_built_paths(
        "from acerl import paths\ndef f(r):\n    return paths.base_model_dir(r, 'm') / 'x'\n"
    )
