"""Resumable sharded work (acerl.generate.shards): shard layout, resume after an interruption."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from acerl.generate.shards import (
    MANIFEST_NAME,
    SOFTWARE_KEY,
    remove_shards,
    run_sharded,
    shard_path,
    shard_ranges,
)
from acerl.pipeline.io import write_jsonl
from acerl.pipeline.provenance import software_stamp
from acerl.pipeline.seeds import derive_seed


class Interrupted(Exception):
    pass


class Work:
    """A deterministic shard job that records which shards it computed and can fail at a given shard."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[int] = []
        self.fail_at = fail_at

    def __call__(self, index: int, items: Sequence[int]) -> list[dict]:
        if index == self.fail_at:
            raise Interrupted(f"killed at shard {index}")
        self.calls.append(index)
        seed = derive_seed(7, index)
        return [{"item": x, "value": x * x, "seed": seed} for x in items]


def test_shard_ranges_cover_items_in_order():
    assert shard_ranges(7, 3) == [range(0, 3), range(3, 6), range(6, 7)]
    assert shard_ranges(6, 3) == [range(0, 3), range(3, 6)]
    assert shard_ranges(2, 10) == [range(0, 2)]
    assert shard_ranges(0, 4) == []
    with pytest.raises(ValueError, match="shard_size"):
        shard_ranges(3, 0)


def test_run_sharded_writes_every_shard(tmp_path):
    work = Work()
    rows = run_sharded(list(range(7)), 3, tmp_path / "s", {"k": 1}, work, progress=False)
    assert [r["item"] for r in rows] == list(range(7))
    assert work.calls == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        MANIFEST_NAME,
        "shard_00000.jsonl.gz",
        "shard_00001.jsonl.gz",
        "shard_00002.jsonl.gz",
    ]
    remove_shards(tmp_path / "s")
    assert not (tmp_path / "s").exists()
    remove_shards(tmp_path / "s")  # missing folder is fine


def test_interrupted_job_resumes_without_recomputing_finished_shards(tmp_path):
    items = list(range(10))
    reference = run_sharded(items, 3, tmp_path / "ref", {"k": 1}, Work(), progress=False)

    first = Work(fail_at=2)
    with pytest.raises(Interrupted):
        run_sharded(items, 3, tmp_path / "s", {"k": 1}, first, progress=False)
    assert first.calls == [0, 1]
    assert shard_path(tmp_path / "s", 1).is_file() and not shard_path(tmp_path / "s", 2).exists()

    second = Work()
    resumed = run_sharded(items, 3, tmp_path / "s", {"k": 1}, second, progress=False)
    assert second.calls == [2, 3]  # shards 0 and 1 were read back, not recomputed
    assert resumed == reference


def test_changed_manifest_discards_old_shards(tmp_path, caplog):
    run_sharded(list(range(4)), 2, tmp_path / "s", {"temperature": 0.7}, Work(), progress=False)
    work = Work()
    with caplog.at_level("WARNING"):
        run_sharded(list(range(4)), 2, tmp_path / "s", {"temperature": 1.0}, work, progress=False)
    assert work.calls == [0, 1]
    assert "other settings" in caplog.text
    stored = json.loads((tmp_path / "s" / MANIFEST_NAME).read_text())
    assert stored["temperature"] == 1.0 and stored["shard_size"] == 2 and stored["num_items"] == 4

    # a different shard size is a different manifest too
    work = Work()
    run_sharded(list(range(4)), 3, tmp_path / "s", {"temperature": 1.0}, work, progress=False)
    assert work.calls == [0, 1]


def test_shards_of_other_software_are_reused_with_a_warning(tmp_path, caplog):
    """The software stamp records what made the shards but does not decide reuse; a change of a deciding
    package is said in one warning line."""
    old = software_stamp()
    old["packages"]["torch"] = "0.0.1"
    run_sharded(list(range(4)), 2, tmp_path / "s", {"t": 1, SOFTWARE_KEY: old}, Work(), progress=False)
    work = Work()
    with caplog.at_level("WARNING"):
        run_sharded(
            list(range(4)), 2, tmp_path / "s", {"t": 1, SOFTWARE_KEY: software_stamp()}, work, progress=False
        )
    assert work.calls == []
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"torch 0.0.1 -> {software_stamp()['packages']['torch']}" in warnings[0]


def test_truncated_shard_is_recomputed(tmp_path, caplog):
    items = list(range(4))
    reference = run_sharded(items, 2, tmp_path / "s", {}, Work(), progress=False)
    write_jsonl(shard_path(tmp_path / "s", 1), [{"item": 2, "value": 4}])  # one row short
    work = Work()
    with caplog.at_level("WARNING"):
        assert run_sharded(items, 2, tmp_path / "s", {}, work, progress=False) == reference
    assert work.calls == [1]
    assert "expected 2" in caplog.text


def test_work_must_return_one_row_per_item(tmp_path):
    with pytest.raises(RuntimeError, match="1 rows for 2 items"):
        run_sharded([1, 2], 2, tmp_path / "s", {}, lambda i, xs: [{"x": 1}], progress=False)
    assert not shard_path(tmp_path / "s", 0).exists()
