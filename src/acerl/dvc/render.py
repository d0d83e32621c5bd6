"""``dvc.yaml`` from the stage table: one DVC stage per job (:func:`build_stages`), the training and Pass@k plots,
the params each config file sets (:func:`params_by_file`), rendered, written and checked against the committed
file. See :mod:`acerl.dvc` for the layout.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from acerl.config import Config, load_config, read_yaml
from acerl.pipeline import paths
from acerl.pipeline.io import write_text
from acerl.pipeline.stages import (
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
    """One DVC stage per job of the stage table (:func:`acerl.pipeline.stages.study_jobs`: the jobs ``snakemake all`` runs
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
# The same pipeline as the Snakefile, whose rules (workflow/rules/*.smk) show each job kind's path patterns and
# command: commands from acerl.pipeline.stages, paths from acerl.pipeline.paths, params = the config keys that
# decide each stage. Regenerate after changing the study grid (models, methods, seeds, benchmarks);
# `acerl dvc check` fails when this file is stale. See docs/sharing.md.
# Why one flat stage per job, not one `foreach`/`matrix` stage per rule:
# - DVC substitutes an item's single values (`${{item.model}}`), never a list, but the jobs of one rule differ in
#   their lists: a training run's params are its own method's estimator keys (an alpha-sweep run's without alpha),
#   each listed under the config files that set it; the report's deps are the study's files.
# - DVC names a generated stage `<stage>@<key>`: the stage names (`train_policy-tiny-grpo-seed0`) and the dvc.lock
#   entries recorded under them would change, and `dvc repro` would rerun every finished study.
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


def config_flags(config_files: Sequence[str]) -> str:
    """`` --config F`` for each file (the empty string for the default list, as ``dvc.yaml``'s header writes)."""
    if tuple(config_files) == DEFAULT_CONFIG_FILES:
        return ""
    return "".join(f" --config {shlex.quote(f)}" for f in config_files)
