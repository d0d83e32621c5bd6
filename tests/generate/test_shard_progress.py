"""Job logs show sampling progress: with the progress bar off, one line per shard computed."""

from __future__ import annotations

import logging

import pytest

from acerl.generate.shards import run_sharded


def _work(index: int, items: list[int]) -> list[dict]:
    return [{"item": x} for x in items]


def test_one_log_line_per_shard_without_the_bar(tmp_path, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger="acerl.generate.shards"):
        run_sharded(list(range(7)), 3, tmp_path / "s", {"k": 1}, _work, progress=False, desc="synth_easy/x")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "synth_easy/x: shard 1/3 done (3 items)",
        "synth_easy/x: shard 2/3 done (3 items)",
        "synth_easy/x: shard 3/3 done (1 items)",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="acerl.generate.shards"):
        run_sharded(list(range(7)), 3, tmp_path / "t", {"k": 1}, _work, progress=True, desc="bar")
    assert not [r for r in caplog.records if "shard 1/3" in r.getMessage()]  # the bar shows it instead
