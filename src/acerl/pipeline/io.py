"""Files on disk: JSON Lines reading and every atomic write of the pipeline (the ground floor: it imports only
:mod:`acerl.errors`).

Every write goes to a temporary name beside the target (``.tmp-<name>.<random>``), is fsync'd, replaces the
target in one ``os.replace`` and then fsyncs the folder, so a killed job (or a power cut) leaves the old file or
the new one, never a complete-looking partial one. The result has the permissions of a plain ``open`` under the
process's umask (``tempfile`` makes its files 0600 and folders 0700: a lab's shared results folder would be
unreadable to everyone but their writer). Leftover temporaries of killed writes start with
:data:`TMP_PREFIX` (:func:`acerl.train.checkpoint.remove_stale_temps` deletes them).

- :func:`atomic_path` / :func:`atomic_dir`: a temporary file / folder for writers that open their own files
  (matplotlib, pyarrow, ``save_pretrained``);
- :func:`write_text`, :func:`write_json`, :func:`write_jsonl` (gzip for ``.gz``), :func:`write_parquet`,
  :func:`save_hf_folder`;
- :func:`read_jsonl`: dataset and generation rows, with errors that name the file, the line and the key.

JSON Lines rows are JSON objects, one per line, UTF-8 (``ensure_ascii=False``); a ``.gz`` file is written with a
fixed header time, so the same rows give the same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from acerl.errors import BadInputError, MissingInputError, fix_command, reading

__all__ = [
    "DEFAULT_REQUIRED",
    "TMP_PREFIX",
    "DataFormatError",
    "atomic_dir",
    "atomic_path",
    "current_umask",
    "fsync_path",
    "link_folder",
    "link_or_copy",
    "read_jsonl",
    "save_hf_folder",
    "write_json",
    "write_jsonl",
    "write_parquet",
    "write_text",
]

TMP_PREFIX = ".tmp-"
"""Name prefix of every temporary file or folder an atomic write creates beside its target."""

DEFAULT_REQUIRED: tuple[str, ...] = ("id", "problem", "answer")
"""Keys every dataset row must have (the schema of the shipped data files)."""


class DataFormatError(BadInputError):
    """A JSON Lines file is malformed; the message names the file, the line and the key."""


# ---------------------------------------------------------------------------------------------- atomic
def fsync_path(path: Path | str) -> None:
    """fsync a file's data, or a folder's entries (after a rename in it), by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``); elsewhere set
    and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same suffix, so format-sniffing writers still work); on a clean
    exit it is fsync'd and replaces ``path``, on an exception it is deleted. The parent folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=path.parent, prefix=f"{TMP_PREFIX}{path.name}.", suffix=path.suffix
        )
    except PermissionError as e:  # name the file being written, not the temporary one
        raise PermissionError(e.errno, e.strerror, str(path)) from e
    os.close(fd)
    tmp = Path(tmp_name)
    allowed = 0o666 & ~current_umask()
    tmp.chmod(allowed)
    try:
        yield tmp
        _widen_to_umask(tmp, allowed)
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def check_writable(folders: Iterable[Path | str]) -> None:
    """Create each of ``folders`` and a file in it (removed at once): a step that writes several files checks
    first, so that a folder this user may not write stops it before anything is written (a ``PermissionError``
    naming the folder)."""
    for folder in map(Path, folders):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=TMP_PREFIX)
        except PermissionError as e:
            raise PermissionError(e.errno, e.strerror, str(folder)) from e
        os.close(fd)
        os.unlink(probe)


@contextmanager
def atomic_dir(final: Path | str) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``final``; on a clean exit it replaces ``final`` in one rename.

    Files inside are fsync'd before the rename. On an exception the temporary folder is removed and ``final``
    is left untouched. An existing ``final`` is moved aside first and deleted after the rename.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}.", dir=final.parent))
    mask = current_umask()
    tmp.chmod(0o777 & ~mask)
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if not f.is_symlink():
                _widen_to_umask(f, (0o777 if f.is_dir() else 0o666) & ~mask)
            if f.is_file():
                fsync_path(f)
        old = None
        if final.exists():
            old = final.parent / f"{TMP_PREFIX}{final.name}.old-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_path(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link file ``src`` (a symlink is followed) to ``dst``; a copy where no hard link can be made (another
    filesystem)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_folder(src: Path | str, target: Path | str, skip: Sequence[str] = ()) -> Path:
    """Hard-link (or copy) every file of the HF folder ``src`` into ``target``, atomically (a symlink ``target``
    is replaced by the folder)."""
    src, target = Path(src), Path(target)
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"{src}: not a Hugging Face model folder (no config.json)")
    with atomic_dir(target) as tmp:
        for f in sorted(src.rglob("*")):
            rel = f.relative_to(src)
            if rel.parts[0] in skip:
                continue
            if f.is_dir():
                (tmp / rel).mkdir(parents=True, exist_ok=True)
            else:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                link_or_copy(f, tmp / rel)
        if target.is_symlink():
            target.unlink()
    return target


def _widen_to_umask(path: Path, allowed: int) -> None:
    """Widen ``path``'s permissions to what a plain ``open`` / ``mkdir`` gives under the umask (``allowed``):
    writers that save through their own private temporary file (safetensors' ``save_file``) leave 0600."""
    mode = path.stat().st_mode & 0o7777
    if mode | allowed != mode:
        path.chmod(mode | allowed)


def write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``Path(path)``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(
    path: Path | str, obj: Any, *, indent: int = 1, ensure_ascii: bool = True, sort_keys: bool = False
) -> Path:
    """Write ``obj`` as indented JSON plus a newline, atomically; strict JSON (NaN/inf are rejected).
    ``sort_keys`` for files whose bytes must not follow the order a dict was built in (run specs, records)."""
    text = json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii, allow_nan=False, sort_keys=sort_keys)
    return write_text(path, text + "\n")


def write_jsonl(path: Path | str, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Atomically write ``rows`` as JSON Lines to ``path`` (gzip if it ends in ``.gz``); returns ``path``.

    Keys keep their insertion order; the output is byte-deterministic.
    """
    path = Path(path)
    with atomic_path(path) as tmp, tmp.open("wb") as raw:
        if path.suffix == ".gz":
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                _write_rows(gz, rows)
        else:
            _write_rows(raw, rows)
    return path


def _write_rows(fh: io.BufferedIOBase, rows: Iterable[Mapping[str, Any]]) -> None:
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"row {i}: expected a mapping, got {type(row).__name__}")
        fh.write(json.dumps(row, ensure_ascii=False).encode("utf-8"))
        fh.write(b"\n")


def write_parquet(path: Path | str, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Atomically write ``rows`` (dicts with nested lists/structs) as a parquet file; returns ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows))
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def save_hf_folder(
    out_dir: Path | str, model: Any, tokenizer: Any, extra_files: Mapping[str, str] | None = None
) -> Path:
    """Save ``model`` and ``tokenizer`` (``save_pretrained``: safetensors weights, tokenizer files) and
    ``extra_files`` (name -> text) as a Hugging Face folder, atomically."""
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
    return Path(out_dir)


# ------------------------------------------------------------------------------------------------ read
def _open_text_read(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open("r", encoding="utf-8")


def read_jsonl(
    path: Path | str,
    required: Sequence[str] = DEFAULT_REQUIRED,
    remake: str = "rerun the step that wrote it",
) -> list[dict[str, Any]]:
    """Read a JSON Lines file into a list of dicts, checking that every row has the ``required`` keys.

    Blank lines are skipped. Raises :class:`DataFormatError` naming the file and the 1-based line number for
    invalid JSON, a row that is not an object, or a missing required key; a truncated or corrupt file
    (a ``.gz`` cut short) is a :class:`~acerl.errors.BadInputError` saying to delete it and ``remake``;
    :class:`~acerl.errors.MissingInputError` if absent.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(
            f"dataset file not found: {path} (run {fix_command('prepare-data')} first, or fix the path)"
        )
    rows: list[dict[str, Any]] = []
    with reading(path, remake), _open_text_read(path) as fh:
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
