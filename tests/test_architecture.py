"""The package's shape: imports only run downward through the layers below, and no module grows past
:data:`MAX_LINES` lines.

Imports are read with ``ast`` from every module of ``src/acerl``, function-level and ``TYPE_CHECKING`` ones
included (a lazy import is still an arrow), and so are imports by name: ``importlib.import_module`` /
``__import__`` of a constant or an f-string starting with ``acerl.``, and, in a module that imports by name, every
string constant that names a module of the package (``BUILTIN_PLUGINS = ("acerl.algos.decomposed", ...)``). A module belongs to the unit with the longest matching name
(``acerl.models.tiny`` belongs to ``acerl.models``); a unit may import its own modules and any unit of a lower layer,
never one of its own layer or above. ``__main__`` modules are entry points, above the CLI they call.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "acerl"

LAYERS: tuple[tuple[str, ...], ...] = (
    # ground floor: no project imports but errors (acerl itself holds only __version__, acerl.pipeline only its
    # docstring: each of its modules has a layer of its own; seeds: the random streams; commands: the module
    # commands of the CLI, whose python -m aliases every module's __main__ guard runs)
    (
        "acerl",
        "acerl.pipeline",
        "acerl.errors",
        "acerl.pipeline.seeds",
        "acerl.stage_versions",
        "acerl.commands",
    ),
    # files, the Pass@k estimator, prompt templates, the typed settings of the parts above the config that it nests
    # (the tiny architecture, its SFT, the synthetic task); the C allocator settings of a job
    (
        "acerl.pipeline.io",
        "acerl.passk",
        "acerl.prompts",
        "acerl.config.sections",
        "acerl.pipeline.allocator",
    ),
    # the result records (pydantic), written by the steps and read by the report; what made them (software stamps)
    ("acerl.pipeline.records", "acerl.pipeline.provenance"),
    ("acerl.config",),
    # the one resolved run (acerl.config.settings.resolve)
    ("acerl.config.settings",),
    # what the config derives: paths, torch/device settings and the fast-paths switch; the SLURM profile check
    ("acerl.pipeline.paths", "acerl.pipeline.runtime", "acerl.pipeline.cluster"),
    # AdamW and its LR schedules (torch's or the fast path's, as the job's switch says)
    ("acerl.optim",),
    # the stage table (its jobs' files come from acerl.pipeline.paths)
    ("acerl.pipeline.stages",),
    # the pure parts: algorithms, grading, datasets, base models
    ("acerl.algos", "acerl.grading", "acerl.data", "acerl.models"),
    ("acerl.generate",),
    # the pipeline steps
    ("acerl.evaluate", "acerl.train"),
    # the stage table's check that the inputs a new training reuses were made for the config: above the trainer,
    # which does not read the stage table (the backends' dispatcher hands it over; the verl launcher calls it)
    ("acerl.pipeline.reuse",),
    ("acerl.diagnostics", "acerl.verl_backend"),
    # the trainer backends' registry (compute.backend -> acerl.train | acerl.verl_backend)
    ("acerl.trainers",),
    # what reads the steps' outputs: the report, the DVC pipeline
    ("acerl.report", "acerl.dvc"),
    ("acerl.cli",),
)
ENTRY_POINT_LAYER = len(LAYERS)  # above the CLI they call

MAX_LINES = 800
"""A ceiling without exemptions: a module that reaches it is split by concern (as ``acerl.dvc`` and the report's
tables were). 800 lines is about what a reader holds as one unit; the largest module is the config schema, one
pydantic tree read as the reference of every key."""


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / PACKAGE).rglob("*.py"))}


_IMPORT_BY_NAME = ("import_module", "__import__")


def _imports_by_name(node: ast.Call) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _IMPORT_BY_NAME


def _literal_module(arg: ast.expr) -> str | None:
    """The module a constant names, or the fixed head of an f-string (``f"acerl.algos.{x}"`` -> acerl.algos)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        head = ""
        for part in arg.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            head += part.value
        return head.rstrip(".") or None
    return None


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (``from acerl import paths`` -> acerl.paths),
    by an import statement or by name (module docstring)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _imports_by_name(n)]
    for call in calls:
        target = _literal_module(call.args[0]) if call.args else None
        if target is not None:
            out.add(target)
    if calls:  # the names it may import: any constant naming a module of the package
        out.update(
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in known
        )
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)
    return {m for m in out if m == PACKAGE or m.startswith(PACKAGE + ".")}


def layer_of(module: str) -> tuple[int, str]:
    """``(layer index, unit)`` of a module: the unit with the longest name that is the module or a parent."""
    if module.rpartition(".")[2] == "__main__":
        return ENTRY_POINT_LAYER, module
    best: tuple[int, str] | None = None
    for i, layer in enumerate(LAYERS):
        for unit in layer:
            if module == unit or (unit != PACKAGE and module.startswith(unit + ".")):
                if best is None or len(unit) > len(best[1]):
                    best = (i, unit)
    if best is None:
        raise KeyError(module)
    return best


# Upward arrows allowed by name, each with its reason.
_BUILTIN_PLUGIN = (
    "acerl's own methods beyond GRPO and ACE are loaded as a user's plugin is: imported by name when a config "
    "names one of their estimators or losses (acerl.config.plugins.BUILTIN_PLUGINS), so validating a config that "
    "names none of them never imports torch; the import registers their parameter classes into the config's tables"
)
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("acerl.config.plugins", "acerl.algos.decomposed"): _BUILTIN_PLUGIN,
    ("acerl.config.plugins", "acerl.algos.covariance"): _BUILTIN_PLUGIN,
}


def upward_imports(src: Path = SRC) -> list[str]:
    """Every import that does not run strictly down the layers (same-layer arrows included), as text."""
    mods = modules(src)
    bad = []
    for name, path in mods.items():
        here, unit = layer_of(name)
        for target in sorted(imported_modules(name, path, set(mods))):
            there, target_unit = layer_of(target)
            if target_unit != unit and there >= here and (name, target) not in ALLOWED_UPWARD:
                bad.append(f"{name} (layer {here}) imports {target} (layer {there})")
    return bad


def test_every_module_has_a_layer():
    unplaced = []
    for name in modules():
        try:
            layer_of(name)
        except KeyError:
            unplaced.append(name)
    assert not unplaced, f"add these modules' packages to LAYERS: {unplaced}"
    units = {unit for layer in LAYERS for unit in layer}
    stale = sorted(u for u in units if u not in modules())
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_imports_only_run_downward():
    bad = upward_imports()
    assert not bad, "imports that run up or across the layers:\n" + "\n".join(bad)


def _package(root: Path, folders: tuple[str, ...], empty: tuple[str, ...]) -> Path:
    """A scratch ``acerl`` package under ``root``: the subpackages ``folders`` and the empty modules ``empty``
    (paths relative to the package)."""
    pkg = root / PACKAGE
    for folder in folders:
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for module in empty:
        (pkg / module).write_text("")
    return pkg


def test_the_import_reader_sees_lazy_relative_and_package_imports(tmp_path):
    pkg = _package(tmp_path, ("report", "pipeline"), ("pipeline/paths.py", "report/io.py"))
    (pkg / "pipeline" / "io.py").write_text(
        "def f():\n    from acerl.pipeline import paths\n    from ..report import io\n    import acerl.config\n"
    )
    known = set(modules(tmp_path))
    got = imported_modules("acerl.pipeline.io", pkg / "pipeline" / "io.py", known)
    assert got == {
        "acerl.pipeline",
        "acerl.pipeline.paths",
        "acerl.report",
        "acerl.report.io",
        "acerl.config",
    }
    assert layer_of("acerl.report.io")[0] > layer_of("acerl.pipeline.io")[0]
    assert any("acerl.pipeline.io (layer 1) imports acerl.report" in b for b in upward_imports(tmp_path))


def test_the_import_reader_sees_imports_by_name(tmp_path):
    pkg = _package(tmp_path, ("algos", "config"), ("algos/extra.py",))
    (pkg / "config" / "a.py").write_text(
        'import importlib\ndef f(x):\n    importlib.import_module(f"acerl.algos.{x}")\n'
    )
    (pkg / "config" / "b.py").write_text('def f():\n    __import__("acerl.algos.extra")\n')
    (pkg / "config" / "c.py").write_text(
        'from importlib import import_module\nNAMES = ("acerl.algos.extra",)\n'
        "def f():\n    for n in NAMES:\n        import_module(n)\n"
    )
    (pkg / "config" / "d.py").write_text('NAME = "acerl.algos.extra"  # a string, not an import\n')
    known = set(modules(tmp_path))
    config = pkg / "config"
    assert imported_modules("acerl.config.a", config / "a.py", known) == {"acerl.algos"}
    assert imported_modules("acerl.config.b", config / "b.py", known) == {"acerl.algos.extra"}
    assert imported_modules("acerl.config.c", config / "c.py", known) == {"acerl.algos.extra"}
    assert imported_modules("acerl.config.d", config / "d.py", known) == set()
    bad = upward_imports(tmp_path)
    assert sum("acerl.config." in b and "imports acerl.algos" in b for b in bad) == 3, bad


def reaches(start: str, goal: str, src: Path = SRC) -> bool:
    """Whether module ``start`` imports ``goal``, directly or through other project modules (not along the
    arrows of :data:`ALLOWED_UPWARD`: the plugin modules a config loads by name register into the schema)."""
    mods = modules(src)
    seen, todo = {start}, [start]
    while todo:
        name = todo.pop()
        for target in imported_modules(name, mods[name], set(mods)):
            if target == goal:
                return True
            if target in mods and target not in seen and (name, target) not in ALLOWED_UPWARD:
                seen.add(target)
                todo.append(target)
    return False


def test_the_config_schema_loads_plugins_one_way():
    """The schema loads the plugins (an unknown estimator or loss name); the plugin loader must not import the
    schema back (its error is :class:`acerl.errors.ConfigError`), so the two modules are no import circle. The
    methods it loads do import the schema: they register their parameter classes there, as a user's plugin does."""
    assert reaches("acerl.config.schema", "acerl.config.plugins")
    assert not reaches("acerl.config.plugins", "acerl.config.schema")


def oversized(src: Path = SRC) -> list[str]:
    """Modules over :data:`MAX_LINES` lines."""
    out = []
    for name, path in modules(src).items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            out.append(f"{name} ({n} lines)")
    return out


def test_no_module_is_over_the_ceiling():
    bad = oversized()
    assert not bad, f"modules over {MAX_LINES} lines: split them by concern: {bad}"


def test_the_ceiling_catches_a_long_module(tmp_path):
    (tmp_path / PACKAGE).mkdir()
    (tmp_path / PACKAGE / "big.py").write_text(
        '"""Big. Kept as one module: no exemption."""\n' + "x = 1\n" * MAX_LINES
    )
    (tmp_path / PACKAGE / "small.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(tmp_path) == [f"acerl.big ({MAX_LINES + 1} lines)"]
