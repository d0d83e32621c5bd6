"""The pipeline as DVC stages: ``dvc.yaml`` is generated from the config, never written by hand.

``acerl dvc write`` renders :func:`render_dvc_yaml` for ``config/config.yaml`` into ``dvc.yaml`` (a
test checks the committed file is current). Every stage is one job of the stage table :mod:`acerl.stages`, which
the Snakemake rules read too: the same command, inputs (``deps``), outputs (``outs``, ``metrics``) and deciding
config keys (``params``, read from the config files themselves, so ``dvc exp run -S
'config/config.yaml:methods.ace_dapo.estimator.alpha=0.5'`` changes what the command reads), plus the stage's
code version from ``src/acerl/stage_versions.py`` (:mod:`acerl.stage_versions`).

Kept as one module: rendering, the Snakemake sync and the cache checks all speak DVC's file format.

One stage per job, named ``<snakemake rule>-<wildcards>`` (DVC allows only letters, digits, ``_`` and ``-``):

    prepare_data                         data/<split>.jsonl
    prepare_base-<model>                 models/base/<model>/
    prepare_verl_data-<model>            data/verl/<model>/{train,val}.parquet (compute.backend: verl)
    train_policy-<model>-<method>-seed<s>   runs/<model>/<method>/seed<s>/{final/, metrics.jsonl, dvclive/}
    sample|grade|passk-<benchmark>-<model>-<method>-seed<s>   generations/, scored/, metrics/ (Pass@k: metrics
                                         and its curve, drawn by ``dvc plots show``)
    diagnose-<model>-<method>-seed<s>    diagnostics/<run>.json
    report                               results/{tables/, figures/, report.md, compute.md}

Not DVC outputs: resumable checkpoints and diagnostic snapshots (``paths.checkpoints_dir``, ``paths.diag_dir``).
DVC deletes only declared outputs before it reruns a stage, so they survive and a rerun resumes; and a clone
needs nothing of them (an output with ``push: false`` would make every clone's ``dvc pull`` fail and its
``dvc status`` report "not in cache" forever). ``metrics.jsonl`` is ``persist: true`` for the same reason: on
resume the trainer keeps the steps already logged. See docs/sharing.md.

Params: a key is listed for a config file only where that file sets it (DVC rejects a listed key missing from
its file); a key no file sets keeps its schema default, and adding it to a file needs ``acerl dvc write``
again (``check`` says so).
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from acerl import paths
from acerl.config import Config, ConfigError, load_config, read_yaml
from acerl.io import write_text
from acerl.stages import (
    ROOT,
    VERSIONS_FILE,
    VERSIONS_KEY,
    job_command,
    job_inputs,
    job_outputs,
    models_used,
    param_keys,
    spec,
    study_jobs,
)

__all__ = [
    "DEFAULT_CONFIG_FILES",
    "DamagedObject",
    "Stage",
    "build_stages",
    "check_dvc_yaml",
    "damaged_cache_objects",
    "main",
    "params_by_file",
    "render_dvc_yaml",
    "snakemake_touch_argv",
    "stage_name",
    "TRAINING_PLOT_METRICS",
    "write_dvc_yaml",
]

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
    version: str  # the stage kind whose code version (acerl.stage_versions) it lists
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
        params = [
            *params_by_file(self.params, config_data),
            {VERSIONS_FILE: [f"{VERSIONS_KEY}.{self.version}"]},
        ]
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


def _flatten(inputs: Iterable[str | list[str]]) -> list[str]:
    out: list[str] = []
    for item in inputs:
        out += [item] if isinstance(item, str) else list(item)
    return out


def build_stages(cfg: Config, config_files: Sequence[str | Path]) -> list[Stage]:
    """One DVC stage per job of the stage table (:func:`acerl.stages.study_jobs`: the jobs ``snakemake all`` runs
    for the same config), with the table's inputs, outputs and deciding keys."""
    _check_names(cfg)
    files = [Path(f).as_posix() for f in config_files]
    stages = []
    for job in study_jobs(cfg):
        outs = job_outputs(cfg, job)
        stages.append(
            Stage(
                stage_name(job.stage, *job.parts),
                job_command(job, files, ROOT),
                deps=tuple(dict.fromkeys(_flatten(job_inputs(cfg, job).values()))),
                params=tuple(param_keys(cfg, job)),
                version=job.stage,
                outs=tuple(Out(o.path, o.persist) for o in outs if not o.metric),
                metrics=tuple(o.path for o in outs if o.metric),
                desc=spec(job.stage).doc if spec(job.stage).shape == "study" else "",
            )
        )
    names = [s.name for s in stages]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(
            f"two jobs map to the same DVC stage name: {', '.join(dupes)}; rename a model or method"
        )
    return stages


# ---------------------------------------------------------------------------------------------- plots
def _plots(cfg: Config) -> list[dict[str, Any]]:
    """Top-level plots: Pass@k curves per (benchmark, model) and training curves per (model, metric)."""
    out: list[dict[str, Any]] = []
    for benchmark in cfg.evaluation.benchmarks:
        for model in models_used(cfg):
            runs = [r for b, r in cfg.evaluations() if b == benchmark and r.model == model]
            if runs:
                out.append(
                    {
                        f"passk/{benchmark}/{model}": {
                            "title": f"Pass@k on {benchmark} ({cfg.models[model].display})",
                            "x": "k",
                            "y": {
                                paths.passk_curve_file(ROOT, benchmark, r).as_posix(): "pass_at_k"
                                for r in runs
                            },
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
                            (
                                paths.live_dir(ROOT, r) / "plots" / "metrics" / prefix / f"{name}.tsv"
                            ).as_posix(): name
                            for r in runs
                        },
                        "y_label": metric,
                    }
                }
            )
    return out


# --------------------------------------------------------------------------------------------- render
_HEADER = """\
# GENERATED by `acerl dvc write{args}` from {files} -- do not edit by hand.
# The same pipeline as the Snakefile: commands from acerl.stages, paths from acerl.paths, params = the config
# keys that decide each stage. Regenerate after changing the study grid (models, methods, seeds, benchmarks);
# `acerl dvc check` fails when this file is stale. See docs/sharing.md.
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
    args = config_flags(files)
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000)
    return _HEADER.format(args=args, files=" + ".join(files)) + body


def _render_for(config_files: Sequence[str | Path], root: Path) -> str:
    return render_dvc_yaml(load_config([root / f for f in config_files]), config_files, root)


def write_dvc_yaml(config_files: Sequence[str | Path], out: str | Path) -> Path:
    """Render ``dvc.yaml`` for ``config_files`` (relative to the folder of ``out``, where the stages will run)
    and write it atomically; returns ``Path(out)``."""
    path = write_text(out, _render_for(config_files, Path(out).parent))
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


_GENERATED_FROM = re.compile(  # a dvc.yaml written before `acerl dvc` named `python -m acerl.dvc write`
    r"^# GENERATED by `(?:acerl dvc|python -m acerl\.dvc) write[^`]*` from (.+) -- do not edit by hand\.$"
)


def dvc_yaml_config_files(path: str | Path) -> list[str] | None:
    """The config files ``dvc.yaml`` at ``path`` was generated from (its header line), ``None`` without one."""
    path = Path(path)
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        m = _GENERATED_FROM.match(fh.readline().rstrip("\n"))
    return m.group(1).split(" + ") if m else None


def sync_config_files(given: Sequence[str] | None, dvc_yaml: str | Path) -> list[str]:
    """The config files to sync Snakemake for: those ``dvc.yaml`` was generated from (the pulled study's), or
    ``given``, which must be the same list: another config would mark jobs done that DVC never ran."""
    recorded = dvc_yaml_config_files(dvc_yaml)
    if recorded is None:
        if given:
            return list(given)
        raise ConfigError(
            f"{dvc_yaml} names no config files (no `GENERATED by` header): give them, "
            "`acerl dvc sync-snakemake --config FILE ...` as the study was run"
        )
    if given and [Path(f).as_posix() for f in given] != recorded:
        raise ConfigError(
            f"--config {' '.join(given)} is not the config {dvc_yaml} was generated from ({' + '.join(recorded)}): "
            f"sync the pulled study with `acerl dvc sync-snakemake{config_flags(recorded)}`, or, for "
            f"another grid, `acerl dvc write{config_flags(given)}` and `dvc repro` it first"
        )
    return recorded


def config_flags(config_files: Sequence[str]) -> str:
    """`` --config F`` for each file (the empty string for the default list, as ``dvc.yaml``'s header writes)."""
    if tuple(config_files) == DEFAULT_CONFIG_FILES:
        return ""
    return "".join(f" --config {shlex.quote(f)}" for f in config_files)


def missing_outputs(cfg: Config, root: str | Path = ".") -> list[Path]:
    """The outputs Snakemake declares for the study's jobs (its non-``persist`` ones) that are absent under
    ``root``: ``snakemake --touch`` would record those jobs as done without their results."""
    root = Path(root)
    return [
        root / o.path
        for job in study_jobs(cfg)
        for o in job_outputs(cfg, job)
        if not o.persist
        if not (root / o.path).exists()
    ]


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
    print(f"{out} is stale: run `acerl dvc write` (same --config arguments)\n{diff}", file=sys.stderr)
    return 1


def _cmd_sync_snakemake(args: argparse.Namespace) -> int:
    files = sync_config_files(args.config, DVC_YAML)
    missing = missing_outputs(load_config(files))
    if missing:
        print(
            f"acerl dvc sync-snakemake: {len(missing)} output(s) of the study of {' + '.join(files)} "
            f"are missing, e.g. {missing[0]}: nothing was marked done; `dvc pull` them (or `dvc repro` the "
            "stages that make them), then sync again",
            file=sys.stderr,
        )
        return 3
    argv = snakemake_touch_argv(files)
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
    parser = argparse.ArgumentParser(prog="acerl dvc", description=__doc__.splitlines()[0])
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
        print(f"acerl dvc: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.dvc", main))
