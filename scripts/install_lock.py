"""Install a lock file (``requirements/*.txt``) into a virtualenv with uv: every package at its pinned version,
every file checked against the lock's hashes, nothing resolved (``--no-deps``). ``make setup`` and
``scripts/vllm_cpu_env.sh`` call it.

uv installs the same files as ``pip install --require-hashes --no-deps -r LOCK`` would, about 10x faster (parallel
downloads and unpacking; see docs/benchmarks.md, "Setup"). uv does not read pip's configuration, so the package
sources pip is configured with (``pip config list``: ``find-links``, ``index-url``, ``extra-index-url``, from files
or ``PIP_*`` variables) are passed on as the matching ``UV_*`` variables unless those
are set already. With extra indexes uv is told to consider every index (``unsafe-best-match``, pip's own
behaviour): the hashes in the lock, not the index order, decide which file is accepted.

Every installed module is compiled to bytecode at install time (``--compile-bytecode``), as pip does by default
and uv does not: where Python cannot write ``__pycache__`` at run time (``PYTHONDONTWRITEBYTECODE=1``, common in
CI and container images, or a read-only environment such as an Apptainer image on a cluster), every process
would otherwise compile each module it imports from source, every time (``import torch, pandas``: 6.1-6.6 s of
CPU instead of 2.4 s on this project's machine kind; docs/benchmarks.md).

uv itself comes from ``UV`` (a path), ``uv`` on ``PATH``, the virtualenv's ``bin/uv``, or else is installed into
the virtualenv with pip from ``requirements/cpu.txt``'s ``uv`` pin (hash-checked).

Usage: python scripts/install_lock.py VENV LOCK [UV_OPTION ...]     (e.g. --extra-index-url=URL)
Exit codes: 0 ok, 2 bad arguments, otherwise uv's or pip's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UV_PIN_LOCK = REPO / "requirements" / "cpu.txt"
# pip's setting -> uv's variable (both take space-separated lists where a list makes sense)
PIP_TO_UV = {
    "find-links": "UV_FIND_LINKS",
    "index-url": "UV_INDEX_URL",
    "extra-index-url": "UV_EXTRA_INDEX_URL",
}  # not pip's `constraint`: every package of a lock is pinned (and uv's --require-hashes rejects unpinned ones)
_CONFIG_LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[a-z-]+)='(?P<value>.*)'$")


def pip_settings(config_list: str) -> dict[str, str]:
    """The package-source settings of ``pip config list`` output, ``{key: value}``. Environment variables
    (scope ``:env:``) win over files, as in pip."""
    found: dict[str, tuple[bool, str]] = {}
    for line in config_list.splitlines():
        m = _CONFIG_LINE.match(line.strip())
        if not m or m["key"] not in PIP_TO_UV:
            continue
        from_env = m["scope"] == ":env:"
        if m["key"] not in found or from_env:
            found[m["key"]] = (from_env, m["value"])
    return {key: value for key, (_, value) in found.items()}


def uv_environment(
    settings: dict[str, str], environ: dict[str, str], options: list[str] | None = None
) -> dict[str, str]:
    """``environ`` plus the ``UV_*`` variables for pip's ``settings``; variables already set are kept. Extra
    indexes (from pip or in the uv ``options``) make uv consider every index, as pip does."""
    env = dict(environ)
    for key, value in settings.items():
        var = PIP_TO_UV[key]
        if var not in env and value.strip():
            env[var] = " ".join(value.split())
    extra_index = env.get("UV_EXTRA_INDEX_URL") or any(
        o.startswith("--extra-index-url") for o in options or []
    )
    if extra_index and "UV_INDEX_STRATEGY" not in env:
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def pinned_block(lock_text: str, name: str) -> str:
    """The requirement of ``name`` in a hashed lock: its ``name==version`` line and its ``--hash`` lines."""
    lines = lock_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{name}=="):
            block = [line]
            while block[-1].rstrip().endswith("\\") and i + len(block) < len(lines):
                block.append(lines[i + len(block)])
            return "\n".join(block).rstrip(" \\") + "\n"
    raise SystemExit(f"install_lock: {UV_PIN_LOCK.relative_to(REPO)} has no {name}== pin; run `make lock`")


def find_uv(venv: Path) -> str:
    """uv from ``UV``, ``PATH`` or the virtualenv; else install the locked uv into the virtualenv with pip."""
    for candidate in (os.environ.get("UV"), shutil.which("uv"), str(venv / "bin" / "uv")):
        if candidate and Path(candidate).is_file():
            return candidate
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "uv.txt"
        req.write_text(pinned_block(UV_PIN_LOCK.read_text(encoding="utf-8"), "uv"))
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--require-hashes", "--no-deps"]
        subprocess.run([*pip, "-r", str(req)], check=True)
    return str(venv / "bin" / "uv")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    venv, lock, extra = Path(argv[0]), Path(argv[1]), argv[2:]
    python = venv / "bin" / "python"
    if not python.is_file():
        print(
            f"install_lock: {python} does not exist; create the virtualenv first (python3 -m venv {venv})",
            file=sys.stderr,
        )
        return 2
    if not lock.is_file():
        print(f"install_lock: no lock file {lock}; `make lock` writes requirements/*.txt", file=sys.stderr)
        return 2
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    env = uv_environment(pip_settings(config.stdout), dict(os.environ), extra)
    cmd = [find_uv(venv), "pip", "install", "--quiet", "--require-hashes", "--no-deps", "--compile-bytecode"]
    cmd += ["--python", str(python), *extra, "-r", str(lock)]
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
