"""The repository speaks of the project only: no tracked file names an absolute path of one machine.

The rule: an absolute path with two or more components in a tracked text file must start with a
system directory every Unix machine has (``/usr``, ``/bin``, ``/etc`` -- e.g. ``/etc/slurm`` in the SLURM
scripts --, ``/tmp``, ``/dev``, ``/proc``, ``/sys``, ``/var``, ``/opt``) or an example root that is obviously
one: ``/path/to/...`` and ``/shared/...`` (a lab's cluster filesystem in docs/sharing.md). Anything else
(``/home/<user>/...``, a checkout's own location, a scratch disk) ties the project to one machine: write it
relative to the repository, as ``<root>/...``, or read it from an environment variable. A single component
(``Path("/work")`` as a fake root in a test) names no machine's file and is not checked. ``.gitignore``-style
files are skipped: their leading ``/`` anchors a pattern at the repository root.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.study import REPO, project_files

ALLOWED_ROOTS = ("usr", "bin", "etc", "tmp", "dev", "proc", "sys", "var", "opt", "path", "shared")
IGNORE_FILES = (".gitignore", ".dvcignore")
# a "/" that starts a token (not inside a relative path, a URL, a closing tag or ${VAR}/...), then >= 2 parts
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~\-$}\])>*])/([A-Za-z_][\w.\-]*)(?:/[\w.\-*]+)+")


def absolute_paths(text: str) -> list[str]:
    """Absolute paths in ``text`` that are not under an allowed root."""
    return [m.group(0) for m in ABSOLUTE_PATH.finditer(text) if m.group(1) not in ALLOWED_ROOTS]


def test_rule_catches_machine_paths() -> None:
    notes, home = (
        "/" + "work/shared/notes/grading.md",
        "/" + "home/ann/x.yaml",
    )  # split: this file stays clean
    assert absolute_paths(f"see `{notes}` and {home}") == [notes, home]
    assert absolute_paths("#!/usr/bin/env bash; /etc/slurm/slurm.conf; 2>/dev/null; /tmp/x/y") == []
    assert absolute_paths("verl/workers/a.py https://x.org/a/b <u>1</u> ${HOME}/a/b Path('/work')") == []


def test_no_tracked_file_names_a_machine_path() -> None:
    found = []
    for rel in project_files(REPO):
        if Path(rel).name in IGNORE_FILES:
            continue
        try:
            text = (REPO / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binary files
            continue
        found += [f"{rel}: {p}" for p in absolute_paths(text)]
    assert not found, "absolute machine paths (write them relative to the repository):\n" + "\n".join(found)


def test_what_the_tools_write_is_ignored_by_git() -> None:
    """Every output a documented command writes in the project is ignored: the study's folders, Snakemake's
    HTML report (``snakemake --report report.html`` / ``report.zip``) and ``acerl resample``'s work folders."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    outputs = ["report.html", "report.zip", "resample/eval1/scored/x.parquet", "results/report.md",
               "results/compute.md", "results/tables/t.md", "runs/tiny/grpo/seed0/x", "logs/report/report.log"]  # fmt: skip
    proc = subprocess.run(
        ["git", "check-ignore", "--no-index", *outputs], cwd=REPO, capture_output=True, text=True
    )
    assert sorted(proc.stdout.split()) == sorted(outputs), proc.stdout
