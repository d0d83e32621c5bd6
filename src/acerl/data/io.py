"""JSON Lines read/write: the one home for dataset rows on disk.

Rows are JSON objects, one per line, UTF-8 (``ensure_ascii=False``), the schema of the shipped data files:
``id``, ``problem``, ``answer`` (plus optional fields such as ``solution``). A ``.gz`` suffix means
gzip-compressed (written with a fixed header time, so the same rows give the same bytes).

Writes are atomic: a temporary file in the destination folder, flushed and fsync'd, then ``os.replace``;
a killed job never leaves a complete-looking file.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from acerl.errors import BadInputError, MissingInputError

DEFAULT_REQUIRED: tuple[str, ...] = ("id", "problem", "answer")


class DataFormatError(BadInputError):
    """A dataset file is malformed; the message names the file, the line and the key."""


def _open_text_read(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open("r", encoding="utf-8")


def read_jsonl(path: Path | str, required: Sequence[str] = DEFAULT_REQUIRED) -> list[dict[str, Any]]:
    """Read a JSON Lines file into a list of dicts, checking that every row has the ``required`` keys.

    Blank lines are skipped. Raises :class:`DataFormatError` naming the file and the 1-based line number for
    invalid JSON, a row that is not an object, or a missing required key; ``FileNotFoundError`` if absent.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"dataset file not found: {path} (run prepare-data first, or fix the path)")
    rows: list[dict[str, Any]] = []
    with _open_text_read(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(
                    f"{path}:{lineno}: invalid JSON ({err.msg} at column {err.colno})"
                ) from None
            if not isinstance(row, dict):
                raise DataFormatError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            missing = [key for key in required if key not in row]
            if missing:
                raise DataFormatError(
                    f"{path}:{lineno}: missing required key(s) {', '.join(map(repr, missing))} "
                    f"(row has {', '.join(map(repr, row)) or 'no keys'})"
                )
            rows.append(row)
    return rows


def write_jsonl(path: Path | str, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Atomically write ``rows`` as JSON Lines to ``path`` (gzip if it ends in ``.gz``); returns ``path``.

    Parent folders are created. Keys keep their insertion order; the output is byte-deterministic.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.suffix == ".gz":
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                    _write_rows(gz, rows)
            else:
                _write_rows(raw, rows)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _write_rows(fh: IO[bytes], rows: Iterable[Mapping[str, Any]]) -> None:
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"row {i}: expected a mapping, got {type(row).__name__}")
        fh.write(json.dumps(row, ensure_ascii=False).encode("utf-8"))
        fh.write(b"\n")
