"""Helpers of the DVC tests: a scratch copy of the project as its own git + DVC repository, and the CLI tools
(dvc, git, snakemake, acerl) run in it with the project's virtual environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml
from support.study import copy_project  # noqa: F401  (re-exported for the DVC tests)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TEST_CONFIG = ("config/config.yaml", "config/test.yaml")
ACERL_DVC = [str(BIN / "acerl"), "dvc"]


def copy_src(dest: Path) -> Path:
    """The checkout's ``src`` in ``dest`` (created), where :func:`tool_env` imports acerl from: a tool call runs
    this checkout's code, not whichever copy of the package the environment installed."""
    shutil.copytree(REPO / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def tool_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every tool call: the venv first on PATH, the copy's own ``src`` imported (so a
    concurrent edit of the checkout cannot change a running study), no analytics, a git identity, DVC's
    per-user state inside the test folder."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(workdir / "src"),
        "DVC_NO_ANALYTICS": "1",
        "DVC_SITE_CACHE_DIR": str(workdir.parent / ".dvc-site-cache"),
        "GIT_AUTHOR_NAME": "acerl-test",
        "GIT_AUTHOR_EMAIL": "acerl-test@example.invalid",
        "GIT_COMMITTER_NAME": "acerl-test",
        "GIT_COMMITTER_EMAIL": "acerl-test@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    env.pop("DVC_ROOT", None)
    return {**env, **(extra or {})}


def sh(
    cwd: Path, *argv: str, check: bool = True, timeout: float = 3600, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one command in ``cwd``; on failure (``check``) the assertion shows its output."""
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        env=tool_env(cwd, env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert proc.returncode == 0, (
            f"{' '.join(argv)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n"
            f"--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def init_repo(path: Path, remote: Path | None = None) -> None:
    """``git init`` + ``dvc init`` (keeping the project's .dvc/config, .dvcignore) + a default local remote."""
    sh(path, "git", "init", "-q", "-b", "main")
    if not (path / ".dvc" / "config").is_file():
        sh(path, "dvc", "init", "-q")
    if remote is not None:
        remote.mkdir(parents=True, exist_ok=True)
        sh(path, "dvc", "remote", "add", "-d", "lab", str(remote))


def commit_all(path: Path, message: str) -> None:
    sh(path, "git", "add", "-A")
    sh(path, "git", "commit", "-q", "-m", message)


def dvc_status(path: Path, *targets: str) -> dict[str, object]:
    """``dvc status --json``: ``{}`` when nothing is to do, else changed stages (and cache/remote entries)."""
    out = sh(path, "dvc", "status", "--json", *targets).stdout
    return json.loads(out or "{}")


def dvc_stages(dvc_yaml: Path) -> dict[str, dict[str, object]]:
    return yaml.safe_load(dvc_yaml.read_text())["stages"]


def out_paths(stage: Mapping[str, object]) -> list[str]:
    """Every output path of a dvc.yaml stage (outs, metrics, plots)."""
    paths = []
    for kind in ("outs", "metrics", "plots"):
        for entry in stage.get(kind) or []:  # type: ignore[union-attr]
            paths.append(entry if isinstance(entry, str) else next(iter(entry)))
    return paths


def descendants(stages: Mapping[str, Mapping[str, object]], roots: Iterable[str]) -> set[str]:
    """``roots`` and every stage that (transitively) depends on one of their outputs (DVC's DAG)."""
    producer = {p: name for name, st in stages.items() for p in out_paths(st)}
    children: dict[str, set[str]] = {name: set() for name in stages}
    for name, st in stages.items():
        for dep in st.get("deps") or []:  # type: ignore[union-attr]
            for out, prod in producer.items():
                if dep == out or dep.startswith(out + "/") or out.startswith(dep + "/"):
                    children[prod].add(name)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += children[name]
    return seen


_RULE = re.compile(r"^(?:local)?rule (\w+):$")


_FLAG = re.compile(r" \(\w+\)$")


def snakemake_jobs(dry_run_output: str) -> set[tuple[str, frozenset[str]]]:
    """``(rule, outputs)`` of every job a ``snakemake -n`` run lists (the target rule ``all`` left out)."""
    jobs: set[tuple[str, frozenset[str]]] = set()
    rule = None
    for line in dry_run_output.splitlines():
        m = _RULE.match(line.strip())
        if m:
            rule = m.group(1)
        elif rule and line.strip().startswith("output:"):
            # Snakemake marks flagged outputs ("results/tables (update)"): the path is what counts
            outs = frozenset(_FLAG.sub("", p.strip()) for p in line.split(":", 1)[1].split(","))
            jobs.add((rule, outs))
            rule = None
    return jobs


def snakemake_dry_run(path: Path, config_files: Iterable[str], *extra: str) -> str:
    """``snakemake -n all`` with the config files beyond the Snakefile's own (stdout + stderr)."""
    files = [f for f in config_files if f != "config/config.yaml"]
    argv = ["snakemake", "-n", "all", *extra]
    if files:
        argv += ["--configfile", *files]
    proc = sh(path, *argv)
    return proc.stdout + proc.stderr
