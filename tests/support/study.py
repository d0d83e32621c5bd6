"""The CI-scale study the end-to-end tests share, and the helpers that run tools in a scratch copy of the project.

One pytest session runs the study once (``snakemake -c2 all --configfile=config/test.yaml`` in a scratch copy,
fixtures ``prepared_study`` and ``ci_study`` in ``tests/conftest.py``); the whole-DAG test checks it, the DVC
stories record and share it (A's run), and the SLURM test compares a run through ``sbatch`` against it. The
parallel sessions of ``scripts/run_tests.sh`` share one run through ``$ACERL_TEST_SHARED_DIR``
(:func:`shared_once`): the first session that needs it builds it under a file lock, the others wait and reuse it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from pytest import TempPathFactory

from acerl.config import load_config
from acerl.pipeline import paths
from support.watchdog import run_watched

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
SNAKEMAKE = VENV_BIN / "snakemake"
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "profiles")  # config/paper_results: the report reads it
TEST_CONFIG_FILES = ("config/config.yaml", "config/test.yaml")
TEST_CONFIG_ARG = "--configfile=config/test.yaml"
KILL_GRACE_S = (
    10  # `timeout -k`: SIGKILL this long after SIGTERM (Snakemake may ignore SIGTERM while polling)
)
SHARED_DIR_ENV = "ACERL_TEST_SHARED_DIR"  # set by scripts/run_tests.sh for its parallel sessions


def project_files(repo: Path = REPO) -> list[str]:
    """The project's files as git sees them: tracked and untracked-but-not-ignored (the working tree)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [f for f in out.split("\0") if f and (repo / f).is_file()]


def copy_project(dest: Path, repo: Path = REPO) -> Path:
    """Copy the project's files (no results, no caches) into ``dest`` (created); returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in project_files(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)
    return dest


def copy_workflow(dest: Path) -> Path:
    """Copy only the Snakefile, rules, configs and profiles into ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__", ".snakemake"))
        elif src.is_file():
            shutil.copy2(src, dest / part)
    return dest


def snakemake_env(
    xdg_config_home: Path | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a Snakemake run: the venv's ``acerl`` first on PATH (SLURM jobs inherit it), no
    variables of an enclosing SLURM allocation."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    if xdg_config_home is not None:
        env["XDG_CONFIG_HOME"] = str(xdg_config_home)
    for var in [v for v in env if v.startswith("SLURM_")]:  # a test run inside an allocation
        del env[var]
    return {**env, **(extra or {})}


def run_bounded(
    cmd: list[str], *, cwd: Path, env: Mapping[str, str], timeout_s: int, log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` under ``timeout -k``; stdout+stderr go to ``log`` (and ``.stdout``) as text."""
    full = ["timeout", "-k", str(KILL_GRACE_S), str(timeout_s), *cmd]
    proc = subprocess.run(
        full, cwd=cwd, env=dict(env), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    if log is not None:
        log.write_text(proc.stdout)
    return proc


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def run_snakemake(cwd: Path, *args: str, log: str = "snakemake-test.log") -> subprocess.CompletedProcess[str]:
    """``snakemake <args>`` in the scratch project ``cwd`` (its own ``src`` imported); asserts success and
    keeps the output in ``cwd/<log>``. No wall-clock limit: the progress watchdog (:mod:`support.watchdog`) stops
    it only when neither its output nor anything under ``logs/``, ``runs/`` or ``.snakemake/`` changed for the
    stall limit, so a study slowed by a busy neighbour still finishes."""
    out = cwd / log
    out.unlink(missing_ok=True)
    rc = run_watched(
        [str(SNAKEMAKE), *args],
        cwd=cwd,
        env=snakemake_env(extra={"PYTHONPATH": str(cwd / "src")}),
        log=out,
        watched=[cwd / "logs", cwd / "runs", cwd / ".snakemake"],
    )
    text = out.read_text(encoding="utf-8", errors="replace")
    assert rc == 0, f"snakemake {' '.join(args)} in {cwd} failed:\n{tail(text)}"
    return subprocess.CompletedProcess([str(SNAKEMAKE), *args], rc, stdout=text)


def prepare_study(dest: Path) -> Path:
    """A scratch copy of the project in ``dest`` where ``prepare_data`` and ``prepare_base`` ran for the test
    config (the inputs every run needs)."""
    copy_project(dest)
    cfg = load_config([dest / f for f in TEST_CONFIG_FILES])
    models = sorted({r.model for r in cfg.runs() + cfg.base_runs()})
    targets = [str(paths.base_model_dir(".", m)) for m in models]
    run_snakemake(dest, "-c2", TEST_CONFIG_ARG, *targets, log="snakemake-prepare.log")
    return dest


def run_study(prepared: Path, dest: Path) -> Path:
    """A copy of ``prepared`` in ``dest`` after ``snakemake -c2 all`` on the test config."""
    shutil.copytree(prepared, dest, symlinks=True)
    run_snakemake(dest, "-c2", TEST_CONFIG_ARG, "all", log="snakemake-all.log")
    return dest


def shared_once(name: str, build: Callable[[Path], Path], tmp_path_factory: TempPathFactory) -> Path:
    """``build(dest)`` once for every pytest session of one ``make test``, its result shared read-only.

    Without ``$ACERL_TEST_SHARED_DIR`` (one pytest session) ``dest`` is a fresh folder of this session's temporary
    directory. With it (``scripts/run_tests.sh``'s parallel sessions) ``dest`` is ``<dir>/<name>``: the first
    session to ask builds it while holding ``<dir>/<name>.lock``, the others block on the lock and then get the
    same folder. A build that failed is not retried by the next session (it would fail alike and double the
    cost); the next one fails naming the marker, and the first session's report holds the cause.
    """
    shared = os.environ.get(SHARED_DIR_ENV)
    if not shared:
        return build(tmp_path_factory.mktemp("study") / name)
    root = Path(shared)
    root.mkdir(parents=True, exist_ok=True)
    dest, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        if done.is_file():
            return dest
        if failed.is_file():
            raise RuntimeError(
                f"the shared fixture {name!r} failed in another test session ({failed}); see that session's "
                "report for the cause"
            )
        if dest.exists():  # a session killed while building left it half made
            shutil.rmtree(dest)
        try:
            result = build(dest)
        except BaseException:
            failed.write_text("failed\n")
            raise
        done.write_text(f"{result}\n")
        return result
