"""The pipeline as DVC stages: ``dvc.yaml`` is generated from the config, never written by hand.

``python -m acerl.dvc write`` renders :func:`render_dvc_yaml` for ``config/config.yaml`` into ``dvc.yaml`` (a
test checks the committed file is current). Every stage's command is :func:`acerl.stages.stage_command` (the
same command the Snakemake rule runs), every path comes from :mod:`acerl.paths`, and every stage lists as
params exactly the config keys that decide its result, read from the config files themselves, so
``dvc exp run -S 'config/config.yaml:methods.ace_dapo.estimator.alpha=0.5'`` changes what the command reads.

One stage per job, named ``<snakemake rule>-<wildcards>`` (DVC allows only letters, digits, ``_`` and ``-``):

    prepare_data                         data/<split>.jsonl
    prepare_base-<model>                 models/base/<model>/
    train_policy-<model>-<method>-seed<s>   runs/<model>/<method>/seed<s>/{final/, metrics.jsonl, dvclive/}
    sample|grade|passk-<benchmark>-<model>-<method>-seed<s>   generations/, scored/, metrics/ (Pass@k: metrics)
    diagnose-<model>-<method>-seed<s>    diagnostics/<run>.json
    report                               results/{tables/, figures/, report.md, compute.md}

Not DVC outputs: resumable checkpoints and diagnostic snapshots (``paths.checkpoints_dir``, ``paths.diag_dir``).
DVC deletes only declared outputs before it reruns a stage, so they survive and a rerun resumes; and a clone
needs nothing of them (an output with ``push: false`` would make every clone's ``dvc pull`` fail and its
``dvc status`` report "not in cache" forever). ``metrics.jsonl`` is ``persist: true`` for the same reason: on
resume the trainer keeps the steps already logged. See docs/sharing.md.

Params: a key is listed for a config file only where that file sets it (DVC rejects a listed key missing from
its file); a key no file sets keeps its schema default, and adding it to a file needs ``python -m acerl.dvc
write`` again (``check`` says so).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from acerl import paths
from acerl.config import (
    Config,
    ConfigError,
    DiagnosticsConfig,
    EstimatorConfig,
    EvaluationConfig,
    ModelConfig,
    Run,
    load_config,
    read_yaml,
)
from acerl.stages import stage_command

__all__ = [
    "DEFAULT_CONFIG_FILES",
    "DamagedObject",
    "Stage",
    "build_stages",
    "check_dvc_yaml",
    "damaged_cache_objects",
    "main",
    "param_keys",
    "params_by_file",
    "render_dvc_yaml",
    "snakemake_touch_argv",
    "stage_name",
    "TRAINING_PLOT_METRICS",
    "write_dvc_yaml",
]

ROOT = "."  # stages run in the directory of dvc.yaml; every path in it is relative to that directory
DEFAULT_CONFIG_FILES = ("config/config.yaml",)
DVC_YAML = "dvc.yaml"
SNAKEMAKE_DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's `configfile:`

# Training curves drawn by `dvc plots show` (dvclive files the local trainer writes, one line per run).
TRAINING_PLOT_METRICS = (
    "train/reward_mean",
    "train/pass_rate",
    "train/response_length_mean",
    "actor/entropy",
    "actor/kl_loss",
    "actor/pg_loss",
    "ace/overconfident_frac_neg",
    "ace/multiplier_mean_neg",
)

_STAGE_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")


# --------------------------------------------------------------------------------------------- stages
@dataclass(frozen=True)
class Out:
    """One output of a stage (``persist``: DVC keeps it when it reruns the stage)."""

    path: str
    persist: bool = False

    def to_yaml(self) -> str | dict[str, dict[str, Any]]:
        return {self.path: {"persist": True}} if self.persist else self.path


@dataclass(frozen=True)
class Stage:
    """One DVC stage: its command, inputs, the config keys (merged-config key paths) that decide it, outputs."""

    name: str
    cmd: str
    deps: tuple[str, ...]
    params: tuple[str, ...]
    outs: tuple[Out, ...] = ()
    metrics: tuple[str, ...] = ()
    desc: str = ""

    def to_yaml(self, config_data: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The stage's dvc.yaml entry; ``config_data`` maps each config file (as written) to its parsed YAML."""
        body: dict[str, Any] = {}
        if self.desc:
            body["desc"] = self.desc
        body["cmd"] = self.cmd
        if self.deps:
            body["deps"] = list(self.deps)
        params = params_by_file(self.params, config_data)
        if params:
            body["params"] = params
        if self.outs:
            body["outs"] = [o.to_yaml() for o in self.outs]
        if self.metrics:
            body["metrics"] = list(self.metrics)
        return body


def stage_name(stage: str, *parts: str) -> str:
    """``<stage>-<part>-...`` with every character DVC forbids in a stage name replaced by ``_``.

    >>> stage_name("train_policy", "tiny", "ace_grpo-alpha0.5", "seed0")
    'train_policy-tiny-ace_grpo-alpha0_5-seed0'
    """
    return "-".join(_STAGE_NAME_OK.sub("_", p) for p in (stage, *parts))


def _run_parts(run: Run) -> tuple[str, str, str]:
    return (run.model, run.method, f"seed{run.seed}")


def _p(path: Path) -> str:
    return path.as_posix()


def _live_dir(run: Run) -> Path:
    """The dvclive folder of a run, as :func:`acerl.train.loop._train_loop` writes it (``<run>/dvclive``)."""
    return paths.run_dir(ROOT, run) / "dvclive"


def _passk_curve_file(benchmark: str, run: Run) -> Path | None:
    """A run's Pass@k curve as rows ``k, pass_at_k`` (``paths.passk_curve_file``) where the passk step writes it."""
    fn = getattr(paths, "passk_curve_file", None)
    return None if fn is None else fn(ROOT, benchmark, run)


def _fields(prefix: str, model: type, exclude: Iterable[str] = ()) -> list[str]:
    skip = set(exclude)
    return [f"{prefix}.{name}" for name in model.model_fields if name not in skip]  # type: ignore[attr-defined]


def _sweep_base(cfg: Config, method: str) -> str | None:
    """The configured ACE method an alpha-sweep variant derives from (``None`` for a configured method)."""
    if method in cfg.methods:
        return None
    sweep = cfg.study.alpha_sweep
    if sweep is None or method not in cfg.resolved_methods:
        raise KeyError(f"unknown method {method!r}")
    return sweep.method


def _max_tokens_keys(model: str, explicit: int | None) -> list[str]:
    """``max_new_tokens: null`` means the model's ``train.max_response_length`` (evaluation, diagnostics)."""
    return [] if explicit is not None else [f"models.{model}.train.max_response_length"]


def param_keys(cfg: Config, stage: str, run: Run | None = None, model: str | None = None) -> list[str]:
    """The config keys (merged-config key paths) whose values decide one job of ``stage``.

    A key stands for its whole subtree. ``train_policy`` lists everything in :meth:`Config.run_spec`; an
    alpha-sweep variant (``ace_grpo-alpha0.5``) lists its ACE method's estimator *except* ``alpha`` (the variant
    fixes alpha itself), so changing the method's alpha does not touch the other sweep points.
    """
    if stage == "prepare_data":
        return ["data"]
    if stage == "prepare_base":
        assert model is not None
        keys = _fields(f"models.{model}", ModelConfig, exclude=("display", "train"))
        if cfg.models[model].source == "tiny":
            keys.append("data.synthetic.seed")  # the SFT seed
        return keys
    if stage == "report":
        return [
            "name",
            "models",
            "methods",
            "study",
            "evaluation.benchmarks",
            "evaluation.ks",
            "compute.backend",
            "report",
        ]
    assert run is not None, f"stage {stage} needs a run"
    if stage == "train_policy":
        keys = _fields(f"models.{run.model}", ModelConfig, exclude=("display",))
        base = _sweep_base(cfg, run.method)
        method = base or run.method
        keys += [f"families.{cfg.method(run.method).family}", f"methods.{method}.family"]
        if base is None:
            keys.append(f"methods.{method}.estimator")
        else:
            keys += _fields(f"methods.{method}.estimator", EstimatorConfig, exclude=("alpha",))
        if run in cfg.diagnostic_runs():
            keys += [f"study.diagnostics.{k}" for k in ("every", "early_steps", "early_every")]
        return [*keys, "compute.backend"]
    if stage == "sample":
        return [
            *_fields("evaluation", EvaluationConfig, exclude=("benchmarks", "ks")),
            f"models.{run.model}.template",
            *_max_tokens_keys(run.model, cfg.evaluation.max_new_tokens),
        ]
    if stage == "grade":
        return ["grading.timeout_s"]
    if stage == "passk":
        return ["evaluation.ks"]
    if stage == "diagnose":
        d = cfg.study.diagnostics
        assert d is not None
        return [
            *_fields("study.diagnostics", DiagnosticsConfig, exclude=("models", "methods", "seeds")),
            "evaluation.seed",
            "grading.timeout_s",
            f"models.{run.model}.template",
            f"models.{run.model}.train.total_steps",
            *_max_tokens_keys(run.model, d.max_new_tokens),
        ]
    raise ValueError(f"unknown stage {stage!r}")


def _lookup(data: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set_keys(data: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    """The keys of ``keys`` a config file sets: the key itself, or the deepest prefix it sets to a non-mapping
    (which replaces the whole subtree when files merge)."""
    out: list[str] = []
    for key in keys:
        parts = key.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            found, value = _lookup(data, prefix)
            if not found:
                break
            if i == len(parts) or not isinstance(value, Mapping):
                if prefix not in out:
                    out.append(prefix)
                break
    return out


def params_by_file(
    keys: Sequence[str], config_data: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, list[str]]]:
    """DVC ``params:`` entries: for each config file (``config_data``: file -> its parsed YAML, in merge order),
    the keys of ``keys`` it sets; files setting none are left out."""
    out = []
    for f, data in config_data.items():
        present = _set_keys(data, keys)
        if present:
            out.append({f: present})
    return out


def _check_names(cfg: Config) -> None:
    """DVC params paths split on ``.``: a model, family or method key holding one cannot be addressed."""
    for section in ("models", "families", "methods"):
        for key in getattr(cfg, section):
            if "." in key:
                raise ValueError(f"{section}.{key}: DVC params cannot address a key holding '.'; rename it")


def _policy_dep(run: Run) -> str:
    return _p(paths.policy_dir(ROOT, run))


def _eval_runs(cfg: Config, benchmark: str | None = None) -> list[Run]:
    """Runs evaluated (on ``benchmark``, or on any benchmark)."""
    runs = [r for b, r in cfg.evaluations() if benchmark in (None, b)]
    return list(dict.fromkeys(runs))


def build_stages(cfg: Config, config_files: Sequence[str | Path]) -> list[Stage]:
    """Every stage of the study in pipeline order (the jobs ``snakemake all`` would run for the same config)."""
    _check_names(cfg)
    files = [Path(f).as_posix() for f in config_files]

    def cmd(stage: str, **kw: Any) -> str:
        return stage_command(stage, files, ROOT, **kw)

    stages = [
        Stage(
            "prepare_data",
            cmd("prepare_data"),
            deps=tuple(_real_data_deps(cfg)),
            params=tuple(param_keys(cfg, "prepare_data")),
            outs=tuple(Out(_p(paths.data_file(ROOT, s))) for s in cfg.data_splits),
            desc="training prompts, evaluation benchmarks and the held-out diagnostic set",
        )
    ]
    for model in _models_used(cfg):
        stages.append(
            Stage(
                stage_name("prepare_base", model),
                cmd("prepare_base", model=model),
                deps=tuple(_base_deps(cfg, model)),
                params=tuple(param_keys(cfg, "prepare_base", model=model)),
                outs=(Out(_p(paths.base_model_dir(ROOT, model))),),
            )
        )
    for run in cfg.runs():
        outs = [
            Out(_p(paths.policy_dir(ROOT, run))),
            Out(_p(paths.train_metrics_file(ROOT, run)), persist=True),
        ]
        if cfg.compute.backend == "local":
            outs.append(Out(_p(_live_dir(run))))
        stages.append(
            Stage(
                stage_name("train_policy", *_run_parts(run)),
                cmd("train_policy", run=run),
                deps=(_p(paths.base_model_dir(ROOT, run.model)), _p(paths.data_file(ROOT, "train"))),
                params=tuple(param_keys(cfg, "train_policy", run=run)),
                outs=tuple(outs),
            )
        )
    for benchmark, run in cfg.evaluations():
        stages += _eval_stages(cfg, benchmark, run, cmd)
    for run in cfg.diagnostic_runs():
        stages.append(
            Stage(
                stage_name("diagnose", *_run_parts(run)),
                cmd("diagnose", run=run),
                deps=(
                    _policy_dep(run),
                    _p(paths.base_model_dir(ROOT, run.model)),
                    _p(paths.data_file(ROOT, "heldout")),
                ),
                params=tuple(param_keys(cfg, "diagnose", run=run)),
                outs=(Out(_p(paths.diagnostics_file(ROOT, run))),),
            )
        )
    report_deps = [_p(paths.passk_file(ROOT, b, r)) for b, r in cfg.evaluations()]
    report_deps += [_p(paths.diagnostics_file(ROOT, r)) for r in cfg.diagnostic_runs()]
    if cfg.report.compare_to_paper:
        report_deps.append(_p(paths.results_dir(ROOT) / "paper"))
    stages.append(
        Stage(
            "report",
            cmd("report"),
            deps=tuple(report_deps),
            params=tuple(param_keys(cfg, "report")),
            outs=(
                Out(_p(paths.tables_dir(ROOT))),
                Out(_p(paths.figures_dir(ROOT))),
                Out(_p(paths.report_file(ROOT))),
                Out(_p(paths.compute_file(ROOT))),
            ),
            desc="the paper's tables and figures from every run's results",
        )
    )
    names = [s.name for s in stages]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(
            f"two jobs map to the same DVC stage name: {', '.join(dupes)}; rename a model or method"
        )
    return stages


def _eval_stages(cfg: Config, benchmark: str, run: Run, cmd: Callable[..., str]) -> list[Stage]:
    parts = (benchmark, *_run_parts(run))
    generations = _p(paths.generations_file(ROOT, benchmark, run))
    scored = _p(paths.scored_file(ROOT, benchmark, run))
    curve = _passk_curve_file(benchmark, run)
    return [
        Stage(
            stage_name("sample", *parts),
            cmd("sample", run=run, benchmark=benchmark),
            deps=(_policy_dep(run), _p(paths.data_file(ROOT, benchmark))),
            params=tuple(param_keys(cfg, "sample", run=run)),
            outs=(Out(generations),),
        ),
        Stage(
            stage_name("grade", *parts),
            cmd("grade", run=run, benchmark=benchmark),
            deps=(generations,),
            params=tuple(param_keys(cfg, "grade", run=run)),
            outs=(Out(scored),),
        ),
        Stage(
            stage_name("passk", *parts),
            cmd("passk", run=run, benchmark=benchmark),
            deps=(scored,),
            params=tuple(param_keys(cfg, "passk", run=run)),
            outs=() if curve is None else (Out(_p(curve)),),
            metrics=(_p(paths.passk_file(ROOT, benchmark, run)),),
        ),
    ]


def _models_used(cfg: Config) -> list[str]:
    used = {r.model for r in cfg.base_runs() + cfg.runs()}
    return [m for m in cfg.models if m in used]


def _real_data_deps(cfg: Config) -> list[str]:
    """Local dataset files (``data.real.*.path``) prepare_data reads."""
    real = cfg.data.real if cfg.data.kind == "real" else None
    if real is None:
        return []
    sources = [real.train, *real.benchmarks.values()]
    return [Path(s.path).as_posix() for s in sources if s.path is not None]


def _base_deps(cfg: Config, model: str) -> list[str]:
    mc = cfg.models[model]
    if mc.source == "tiny":  # the SFT data, and the benchmarks the SFT'd model is scored on
        return [_p(paths.data_file(ROOT, s)) for s in ("sft", *cfg.evaluation.benchmarks)]
    return [Path(mc.path).as_posix()] if mc.path else []


# ---------------------------------------------------------------------------------------------- plots
def _plots(cfg: Config) -> list[dict[str, Any]]:
    """Top-level plots: Pass@k curves per (benchmark, model) and training curves per (model, metric)."""
    out: list[dict[str, Any]] = []
    for benchmark in cfg.evaluation.benchmarks:
        for model in _models_used(cfg):
            files = [_passk_curve_file(benchmark, r) for r in _eval_runs(cfg, benchmark) if r.model == model]
            if files and all(f is not None for f in files):
                out.append(
                    {
                        f"passk/{benchmark}/{model}": {
                            "title": f"Pass@k on {benchmark} ({cfg.models[model].display})",
                            "x": "k",
                            "y": {_p(f): "pass_at_k" for f in files if f is not None},
                            "x_label": "k",
                            "y_label": "Pass@k",
                        }
                    }
                )
    if cfg.compute.backend != "local":
        return out
    for model in cfg.models:
        runs = [r for r in cfg.runs() if r.model == model]
        if not runs:
            continue
        for metric in TRAINING_PLOT_METRICS:
            prefix, name = metric.split("/", 1)
            out.append(
                {
                    f"training/{model}/{metric}": {
                        "title": f"{metric} ({cfg.models[model].display})",
                        "x": "step",
                        "y": {
                            _p(_live_dir(r) / "plots" / "metrics" / prefix / f"{name}.tsv"): name
                            for r in runs
                        },
                        "y_label": metric,
                    }
                }
            )
    return out


# --------------------------------------------------------------------------------------------- render
_HEADER = """\
# GENERATED by `python -m acerl.dvc write{args}` from {files} -- do not edit by hand.
# The same pipeline as the Snakefile: commands from acerl.stages, paths from acerl.paths, params = the config
# keys that decide each stage. Regenerate after changing the study grid (models, methods, seeds, benchmarks);
# `python -m acerl.dvc check` fails when this file is stale. See docs/sharing.md.
"""


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with indented lists (the layout of DVC's own examples)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def render_dvc_yaml(cfg: Config, config_files: Sequence[str | Path], root: str | Path = ".") -> str:
    """The text of ``dvc.yaml`` for ``cfg`` loaded from ``config_files``.

    ``config_files`` are written into the stages as given, so they are relative to the folder of ``dvc.yaml``;
    ``root`` is where to read them from here (their keys decide each stage's ``params``).
    """
    files = [Path(f).as_posix() for f in config_files]
    data = {f: read_yaml(Path(root) / f) for f in files}
    doc: dict[str, Any] = {"stages": {s.name: s.to_yaml(data) for s in build_stages(cfg, files)}}
    plots = _plots(cfg)
    if plots:
        doc["plots"] = plots
    args = (
        "" if tuple(files) == DEFAULT_CONFIG_FILES else "".join(f" --config {shlex.quote(f)}" for f in files)
    )
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000)
    return _HEADER.format(args=args, files=" + ".join(files)) + body


def _render_for(config_files: Sequence[str | Path], root: Path) -> str:
    return render_dvc_yaml(load_config([root / f for f in config_files]), config_files, root)


def write_dvc_yaml(config_files: Sequence[str | Path], out: str | Path) -> Path:
    """Render ``dvc.yaml`` for ``config_files`` (relative to the folder of ``out``, where the stages will run)
    and write it atomically; returns ``Path(out)``."""
    from acerl.io import write_text as atomic_write_text

    path = atomic_write_text(out, _render_for(config_files, Path(out).parent))
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)  # a committed file: readable like any other, not the temp file's 0600
    return path


def check_dvc_yaml(config_files: Sequence[str | Path], path: str | Path) -> str | None:
    """``None`` when ``path`` holds what :func:`write_dvc_yaml` would write, else the start of a diff."""
    import difflib

    path = Path(path)
    expected = _render_for(config_files, path.parent)
    actual = path.read_text(encoding="utf-8") if path.is_file() else ""
    if actual == expected:
        return None
    diff = difflib.unified_diff(
        actual.splitlines(), expected.splitlines(), str(path), "generated", lineterm="", n=1
    )
    return "\n".join(list(diff)[:60])


# ------------------------------------------------------------------------------------------ snakemake
def snakemake_touch_argv(config_files: Sequence[str | Path], target: str = "all") -> list[str]:
    """``snakemake --touch --forceall`` for the study: after ``dvc pull``/``dvc checkout`` (which leave file
    times in no particular order, and no Snakemake records), stamp every output present in DAG order and record
    each job's params, so ``snakemake -n`` agrees with ``dvc status`` and later config changes are seen.

    The Snakefile always reads ``config/config.yaml``; the other files go to ``--configfile``.
    """
    extra = [Path(f).as_posix() for f in config_files if Path(f).as_posix() != SNAKEMAKE_DEFAULT_CONFIG]
    argv = ["snakemake", target, "--touch", "--forceall", "--cores", "1"]
    if extra:
        argv += ["--configfile", *extra]  # last: --configfile takes several values
    return argv


# ----------------------------------------------------------------------------------------- cache check
@dataclass(frozen=True)
class DamagedObject:
    """A cache file whose content does not hash to its name."""

    cache_path: Path
    expected_md5: str
    actual_md5: str
    used_by: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        who = ", ".join(self.used_by) or "?"
        return (
            f"{self.cache_path}: content md5 {self.actual_md5}, expected {self.expected_md5} (used by {who})"
        )


def _md5(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.md5()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _lock_objects(root: Path) -> Iterator[tuple[str, str]]:
    """``(md5, workspace path)`` of every output recorded in ``dvc.lock`` (directory outputs as ``<md5>.dir``)."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return
    data = yaml.safe_load(lock.read_text(encoding="utf-8")) or {}
    for stage in (data.get("stages") or {}).values():
        for out in stage.get("outs") or []:
            if out.get("md5"):
                yield out["md5"], out["path"]


def damaged_cache_objects(root: str | Path = ".") -> list[DamagedObject]:
    """Re-hash every cache file the outputs in ``<root>/dvc.lock`` use and return the damaged ones.

    DVC 3 trusts a cache file that still has its read-only mode without re-hashing it, so a file damaged in
    place (disk fault, a bad copy into a shared cache) is checked out silently. The cache is content-addressed
    (a file's name is the MD5 of its content), which is what this checks.
    """
    from dvc.repo import Repo

    root = Path(root)
    with Repo(str(root)) as repo:
        odb = repo.cache.local
        damaged: list[DamagedObject] = []
        files: dict[str, list[str]] = {}
        for md5, path in _lock_objects(root):
            files.setdefault(md5, []).append(path)
            if md5.endswith(".dir"):
                dir_path = Path(odb.oid_to_path(md5))
                if dir_path.is_file() and _md5(dir_path) == md5.removesuffix(".dir"):
                    for entry in json.loads(dir_path.read_text(encoding="utf-8")):
                        files.setdefault(entry["md5"], []).append(f"{path}/{entry['relpath']}")
        for md5, used_by in files.items():
            cache_path = Path(odb.oid_to_path(md5))
            if not cache_path.is_file():
                continue  # missing, not damaged: `dvc status -c` / `dvc fetch` handle it
            actual = _md5(cache_path)
            if actual != md5.removesuffix(".dir"):
                damaged.append(DamagedObject(cache_path, md5.removesuffix(".dir"), actual, tuple(used_by)))
    return damaged


# ------------------------------------------------------------------------------------------------ CLI
def _config_files(args: argparse.Namespace) -> list[str]:
    return list(args.config or DEFAULT_CONFIG_FILES)


def _cmd_write(args: argparse.Namespace) -> int:
    out = Path(args.out)
    path = write_dvc_yaml(_config_files(args), out)
    print(f"wrote {path}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    out = Path(args.out)
    diff = check_dvc_yaml(_config_files(args), out)
    if diff is None:
        print(f"{out} is current")
        return 0
    print(
        f"{out} is stale: run `python -m acerl.dvc write` (same --config arguments)\n{diff}", file=sys.stderr
    )
    return 1


def _cmd_sync_snakemake(args: argparse.Namespace) -> int:
    argv = snakemake_touch_argv(_config_files(args))
    print("+ " + shlex.join(argv), file=sys.stderr)
    return subprocess.run(argv, check=False).returncode


def _cmd_verify_cache(args: argparse.Namespace) -> int:
    damaged = damaged_cache_objects(args.root)
    for obj in damaged:
        print(f"damaged: {obj}", file=sys.stderr)
        if args.repair:
            obj.cache_path.unlink()
    if not damaged:
        print("every cache file used by dvc.lock matches its hash")
        return 0
    if args.repair:
        print(
            f"removed {len(damaged)} damaged cache file(s): now `dvc pull` (fetches them again from the remote) "
            "and `dvc checkout --relink` (replaces the workspace copies)",
            file=sys.stderr,
        )
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m acerl.dvc", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config",
            action="append",
            metavar="FILE",
            help="config file, relative to the directory of dvc.yaml (repeatable, later files win; "
            f"default {DEFAULT_CONFIG_FILES[0]})",
        )

    p = sub.add_parser("write", help="render dvc.yaml from the config")
    with_config(p)
    p.add_argument(
        "--out", default=DVC_YAML, help="where to write (default dvc.yaml); stages run in its folder"
    )
    p.set_defaults(func=_cmd_write)

    p = sub.add_parser("check", help="exit 1 if dvc.yaml differs from what `write` would render")
    with_config(p)
    p.add_argument("--out", default=DVC_YAML, help="the dvc.yaml to check (default dvc.yaml)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser(
        "sync-snakemake",
        help="after `dvc pull`/`dvc checkout`: make Snakemake see the pulled outputs as up to date",
    )
    with_config(p)
    p.set_defaults(func=_cmd_sync_snakemake)

    p = sub.add_parser("verify-cache", help="re-hash the cache files dvc.lock uses; exit 1 if any is damaged")
    p.add_argument("--root", default=".", help="the DVC repository (default .)")
    p.add_argument("--repair", action="store_true", help="delete damaged cache files (then `dvc pull`)")
    p.set_defaults(func=_cmd_verify_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, ValueError) as e:
        print(f"python -m acerl.dvc: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
