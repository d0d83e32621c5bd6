"""acerl.pipeline.io: atomic (fsync'd) writes of every kind, JSON Lines round trips, and read errors that name the file,
line and key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import acerl.pipeline.io
from acerl.pipeline.io import (
    DataFormatError,
    atomic_dir,
    atomic_path,
    read_jsonl,
    save_hf_folder,
    write_json,
    write_jsonl,
    write_parquet,
    write_text,
)

ROWS = [
    {"id": "a", "problem": "Compute 1+2.", "answer": "3", "solution": "1+2=3. \\boxed{3}"},
    {"id": "b", "problem": "Solve x+1=2 — ünïcode.", "answer": "1", "extra": [1, None]},
]


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.jsonl.gz"])
def test_round_trip(tmp_path, name):
    path = write_jsonl(tmp_path / "sub" / name, ROWS)
    assert path == tmp_path / "sub" / name
    assert read_jsonl(path) == ROWS
    assert [p.name for p in path.parent.iterdir()] == [name]  # no temporary file left behind


def test_plain_file_is_one_utf8_object_per_line(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == ROWS
    assert "ünïcode" in lines[1]  # ensure_ascii=False


def test_gzip_output_is_byte_deterministic(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl.gz", ROWS).read_bytes()
    second = write_jsonl(tmp_path / "b.jsonl.gz", ROWS).read_bytes()
    assert first == second


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    before = path.read_bytes()

    def broken():
        yield ROWS[0]
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed"):
        write_jsonl(path, broken())
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]


def test_non_mapping_row_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="row 1"):
        write_jsonl(tmp_path / "rows.jsonl", [ROWS[0], ["not", "a", "dict"]])


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n\n", encoding="utf-8")
    assert read_jsonl(path) == ROWS


def test_missing_key_names_file_line_and_key(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps(ROWS[0]) + "\n" + json.dumps({"id": "x", "problem": "p"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(DataFormatError) as err:
        read_jsonl(path)
    assert str(path) in str(err.value) and ":2:" in str(err.value) and "'answer'" in str(err.value)
    assert read_jsonl(path, required=("id",))[1] == {"id": "x", "problem": "p"}


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:2: invalid JSON"):
        read_jsonl(path)


def test_non_object_line_is_rejected(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":1: expected a JSON object, got list"):
        read_jsonl(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_write_text_replaces_atomically(tmp_path):
    target = tmp_path / "latest"
    write_text(target, "a\n")
    write_text(target, "b\n")
    assert target.read_text() == "b\n" and [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_atomic_dir_leaves_nothing_on_error(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "new.txt").write_text("new")
        raise RuntimeError("killed")
    assert (final / "old.txt").read_text() == "old" and list(tmp_path.iterdir()) == [final]
    with atomic_dir(final) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in final.iterdir()] == ["new.txt"] and list(tmp_path.iterdir()) == [final]


class _Folder:
    """Stands in for a model or tokenizer: ``save_pretrained`` writes one file, as the real ones do."""

    def __init__(self, name: str) -> None:
        self.name = name

    def save_pretrained(self, folder: Path) -> None:
        (folder / self.name).write_text(self.name, encoding="utf-8")


WRITERS = {
    "text": (lambda p: write_text(p, "x\n"), "out.txt"),
    "json": (lambda p: write_json(p, {"a": 1}), "out.json"),
    "jsonl": (lambda p: write_jsonl(p, ROWS), "out.jsonl"),
    "jsonl.gz": (lambda p: write_jsonl(p, ROWS), "out.jsonl.gz"),
    "parquet": (lambda p: write_parquet(p, ROWS[:1]), "out.parquet"),
    "folder": (lambda p: save_hf_folder(p, _Folder("model.bin"), _Folder("tok.json"), {"note": "n"}), "hf"),
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_every_writer_fsyncs_the_data_then_the_folder(tmp_path, monkeypatch, kind):
    """Durability, not only atomicity: the new bytes reach the disk before the rename, the rename after it."""
    write, name = WRITERS[kind]
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(acerl.pipeline.io.os, "fsync", recording_fsync)
    target = tmp_path / "sub" / name
    write(target)
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    inodes = [p.stat().st_ino for p in files]  # a rename keeps the inode: these are the fsync'd temporaries
    assert set(inodes) <= set(synced[:-1]), f"{kind}: not every written file was fsync'd before the rename"
    assert synced[-1] == target.parent.stat().st_ino, f"{kind}: the folder was not fsync'd after the rename"
    assert [p.name for p in target.parent.iterdir()] == [name]


def test_atomic_path_keeps_the_suffix_and_cleans_up_on_error(tmp_path):
    target = tmp_path / "fig.pdf"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        assert (
            tmp.parent == tmp_path
            and tmp.suffix == ".pdf"
            and tmp.name.startswith(acerl.pipeline.io.TMP_PREFIX)
        )
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_write_json_is_strict_and_keeps_the_old_file(tmp_path):
    target = write_json(tmp_path / "r.json", {"b": 1, "a": "é"}, indent=2, ensure_ascii=False)
    assert target.read_text(encoding="utf-8") == '{\n  "b": 1,\n  "a": "é"\n}\n'
    with pytest.raises(ValueError, match="JSON compliant"):
        write_json(target, {"x": float("nan")})
    assert json.loads(target.read_text(encoding="utf-8")) == {"b": 1, "a": "é"}
    assert list(tmp_path.iterdir()) == [target]


def test_parquet_and_folder_round_trip(tmp_path):
    table = pq.read_table(write_parquet(tmp_path / "rows.parquet", ROWS[:1]))
    assert table.to_pylist() == ROWS[:1]
    out = save_hf_folder(tmp_path / "hf", _Folder("model.bin"), _Folder("tok.json"), {"note": "n"})
    assert sorted(p.name for p in out.iterdir()) == ["model.bin", "note", "tok.json"]


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_written_files_and_folders_follow_the_umask(tmp_path, mask):
    """An atomic write leaves what a plain ``open`` / ``mkdir`` would under the umask, not tempfile's private
    0600 / 0700 (a shared results folder was unreadable to every colleague)."""
    old = os.umask(mask)
    try:
        assert acerl.pipeline.io.current_umask() == mask
        text = write_text(tmp_path / "a.txt", "x")
        rows = write_jsonl(tmp_path / "b.jsonl.gz", [{"id": 1}])
        with atomic_dir(tmp_path / "folder") as d:
            (d / "f.txt").write_text("y")
        plain = tmp_path / "plain.txt"
        plain.write_text("z")
        (tmp_path / "plain_dir").mkdir()
    finally:
        os.umask(old)
    assert oct(text.stat().st_mode & 0o777) == oct(rows.stat().st_mode & 0o777) == oct(0o666 & ~mask)
    assert oct(plain.stat().st_mode & 0o777) == oct(0o666 & ~mask)
    assert oct((tmp_path / "folder").stat().st_mode & 0o777) == oct(0o777 & ~mask)
    assert oct((tmp_path / "plain_dir").stat().st_mode & 0o777) == oct(0o777 & ~mask)
