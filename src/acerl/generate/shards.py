"""Resumable sharded work: split items into fixed shards, write each finished shard atomically, skip it on rerun.

A long sampling job (``n`` completions for each of hundreds of problems) is cut into shards of ``shard_size``
consecutive items. Each shard's rows are written to ``<shard_dir>/shard_<index>.jsonl.gz`` atomically (temp file
+ ``os.replace``), so a shard file exists only once it is complete. A rerun after a kill reads the finished
shards back and computes only the missing ones. Everything a shard's result depends on (the sampling settings,
the item list, the shard size) is recorded in ``<shard_dir>/manifest.json``; shards left by a job with another
manifest are deleted with a warning, never mixed in.

Determinism: each shard gets its own seed :func:`acerl.pipeline.seeds.derive_seed` ``(base, run_seed, shard_index)``, which depends
only on the shard's index, so an interrupted-and-resumed job gives exactly the rows of an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from acerl.pipeline.io import DataFormatError, read_jsonl, write_json, write_jsonl
from acerl.pipeline.provenance import warn_if_other_software

__all__ = [
    "MANIFEST_NAME",
    "SOFTWARE_KEY",
    "folder_stamp",
    "remove_shards",
    "run_sharded",
    "shard_path",
    "shard_ranges",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
MANIFEST_NAME = "manifest.json"
# A manifest key that records what made the shards (acerl.pipeline.provenance) without deciding whether they are reused.
SOFTWARE_KEY = "software"


def shard_ranges(num_items: int, shard_size: int) -> list[range]:
    """Consecutive index ranges of at most ``shard_size`` items covering ``range(num_items)``."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    if num_items < 0:
        raise ValueError(f"num_items must be >= 0, got {num_items}")
    return [range(start, min(start + shard_size, num_items)) for start in range(0, num_items, shard_size)]


def shard_path(shard_dir: Path | str, index: int) -> Path:
    """File of shard ``index`` inside ``shard_dir``."""
    return Path(shard_dir) / f"shard_{index:05d}.jsonl.gz"


def folder_stamp(folder: Path | str) -> list[list[Any]]:
    """A cheap identity of a model folder for manifests: ``[name, size, mtime_ns]`` of each file in it.

    A retrained (rewritten) checkpoint gets a new stamp, so work done with the old weights is not reused.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder not found: {folder}")
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(folder.iterdir()) if f.is_file()]


def _canonical(obj: Mapping[str, Any]) -> dict[str, Any]:
    """JSON round-trip (tuples become lists) so a manifest compares equal to the one read back from disk."""
    canonical: dict[str, Any] = json.loads(json.dumps(obj, sort_keys=True))
    return canonical


def _settings(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest less its software stamp: what the rows depend on (the stamp only says what made them)."""
    return {k: v for k, v in manifest.items() if k != SOFTWARE_KEY}


def _prepare_shard_dir(shard_dir: Path, manifest: Mapping[str, Any]) -> None:
    """Create ``shard_dir`` with ``manifest``; delete shards left by a job with a different manifest."""
    manifest_file = shard_dir / MANIFEST_NAME
    if manifest_file.is_file():
        try:
            old = json.loads(manifest_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            old = None
        if isinstance(old, dict) and _settings(old) == _settings(manifest):
            warn_if_other_software(f"{shard_dir}: finished shards", old.get(SOFTWARE_KEY), "reusing them")
            return
        logger.warning(
            "%s: shards were made with other settings (manifest differs); deleting them and starting over",
            shard_dir,
        )
        shutil.rmtree(shard_dir)
    elif shard_dir.is_dir() and any(shard_dir.glob("shard_*")):
        logger.warning("%s: shards without a manifest; deleting them and starting over", shard_dir)
        shutil.rmtree(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    write_json(manifest_file, dict(manifest))


def _read_shard(path: Path, expected_rows: int) -> list[dict[str, Any]] | None:
    """Rows of a finished shard, or ``None`` (with a warning) if the file is unreadable or has the wrong size."""
    try:
        rows = read_jsonl(path, required=())
    except (OSError, EOFError, DataFormatError) as err:
        logger.warning("%s: unreadable shard (%s); recomputing it", path, err)
        return None
    if len(rows) != expected_rows:
        logger.warning("%s: %d rows, expected %d; recomputing the shard", path, len(rows), expected_rows)
        return None
    return rows


def run_sharded(
    items: Sequence[T],
    shard_size: int,
    shard_dir: Path | str,
    manifest: Mapping[str, Any],
    work: Callable[[int, Sequence[T]], list[dict[str, Any]]],
    *,
    progress: bool = True,
    desc: str = "shards",
) -> list[dict[str, Any]]:
    """Apply ``work`` shard by shard, persisting each shard; finished shards on disk are read, not recomputed.

    Args:
        items: the work items (e.g. problems), in output order.
        shard_size: items per shard (the last shard may be shorter).
        shard_dir: folder for ``manifest.json`` and ``shard_<index>.jsonl.gz``.
        manifest: JSON-serialisable description of everything the rows depend on (settings, item ids, shard
            size); a shard folder written under another manifest is discarded.
        work: ``work(shard_index, shard_items) -> rows``, exactly one JSON-serialisable row per item.
        progress: show a tqdm bar over shards.
        desc: progress-bar label.

    Returns:
        All rows, ``len(items)`` of them, in item order. The shard folder is left in place (the caller removes
        it with :func:`remove_shards` once the merged output is safely written).
    """
    shard_dir = Path(shard_dir)
    ranges = shard_ranges(len(items), shard_size)
    _prepare_shard_dir(shard_dir, _canonical({**manifest, "shard_size": shard_size, "num_items": len(items)}))
    out: list[dict[str, Any]] = []
    done = skipped = 0
    bar = tqdm(ranges, desc=desc, unit="shard", disable=not progress)
    for index, rng in enumerate(bar):
        path = shard_path(shard_dir, index)
        rows = _read_shard(path, len(rng)) if path.is_file() else None
        if rows is not None:
            skipped += 1
        else:
            rows = work(index, [items[i] for i in rng])
            if len(rows) != len(rng):
                raise RuntimeError(f"shard {index}: work returned {len(rows)} rows for {len(rng)} items")
            write_jsonl(path, rows)
            done += 1
            if not progress:  # job logs (the rules run --no-progress): one line per shard for `tail -f`
                logger.info("%s: shard %d/%d done (%d items)", desc, index + 1, len(ranges), len(rng))
        out.extend(rows)
    if skipped:
        logger.info("%s: resumed; %d finished shard(s) reused, %d computed", shard_dir, skipped, done)
    return out


def remove_shards(shard_dir: Path | str) -> None:
    """Delete a shard folder (after its rows were merged into the final output); missing folders are fine."""
    shutil.rmtree(Path(shard_dir), ignore_errors=True)
