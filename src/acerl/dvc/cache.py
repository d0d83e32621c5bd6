"""The DVC cache checked: every cache file ``dvc.lock`` uses re-hashed against its name (``acerl dvc
verify-cache``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml


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
