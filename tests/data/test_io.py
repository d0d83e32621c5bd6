"""JSON Lines I/O: round trips, atomic writes, and errors that name the file, line and key."""

from __future__ import annotations

import json

import pytest

from acerl.data.io import DataFormatError, read_jsonl, write_jsonl

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
