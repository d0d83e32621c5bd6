"""The progress watchdog the long end-to-end tests run under (:mod:`support.watchdog`): it stops a stuck command
and names where it stood, and never stops a slow one that keeps writing."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from support.watchdog import Stalled, progress_signature, run_watched

# a "training run": logs steps to metrics.jsonl, then (with STALL) hangs at the next step without a word
TRAINER = """
import json, sys, time
metrics, steps, stall, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "stall", float(sys.argv[4])
for step in range(1, steps + 1):
    time.sleep(pause)
    with open(metrics, "a") as f:
        f.write(json.dumps({"step": step}) + "\\n")
    print(f"step {step} done", flush=True)
if stall:
    time.sleep(3600)
"""


def _last_step(metrics: Path) -> str:
    steps = (
        [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    )
    return f"the run had logged step {max(steps, default=0)}"


def _run(tmp_path: Path, steps: int, mode: str, pause: float, stall_s: float) -> int:
    metrics = tmp_path / "run" / "metrics.jsonl"
    metrics.parent.mkdir()
    return run_watched(
        [sys.executable, "-c", TRAINER, str(metrics), str(steps), mode, str(pause)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        log=tmp_path / "train.log",
        watched=[metrics.parent],
        stall_s=stall_s,
        where=lambda: _last_step(metrics),
    )


def test_a_stalled_step_is_stopped_and_named(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(Stalled, match=r"no progress for 2 s .*the run had logged step 2; stopped") as err:
        _run(tmp_path, steps=2, mode="stall", pause=0.0, stall_s=2)
    assert "step 2 done" in str(err.value)  # the log's tail
    assert time.monotonic() - t0 < 600  # stopped, not left to the hour-long sleep
    # the whole process group is gone: nothing still writes the log
    size = (tmp_path / "train.log").stat().st_size
    time.sleep(0.5)
    assert (tmp_path / "train.log").stat().st_size == size


def test_a_slow_run_that_keeps_writing_is_never_stopped(tmp_path: Path) -> None:
    """Twelve steps of 0.5 s: three times the stall limit in all, but never 1.5 s without a write."""
    assert _run(tmp_path, steps=12, mode="finish", pause=0.5, stall_s=1.5) == 0
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 12


def test_a_failure_is_returned_not_raised(tmp_path: Path) -> None:
    log = tmp_path / "fail.log"
    rc = run_watched([sys.executable, "-c", "raise SystemExit(3)"], cwd=tmp_path, env={}, log=log, stall_s=30)
    assert rc == 3 and log.read_text().startswith("$ ")


def test_the_signature_sees_a_write_anywhere_below_a_folder(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    before = progress_signature([tmp_path / "a"])
    (tmp_path / "a" / "b" / "f.txt").write_text("x")
    assert progress_signature([tmp_path / "a"]) != before
    assert progress_signature([tmp_path / "missing"]) == (0, 0)


def test_a_folder_removed_while_the_signature_walks_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watched command removes a folder (a rotated checkpoint, a step's scratch folder) between the walk
    listing it and entering it: the signature skips it. Path.rglob raised FileNotFoundError there and failed
    verl's CPU loop, a correct run, from the watchdog itself."""
    (tmp_path / "a" / "doomed" / "deep").mkdir(parents=True)
    (tmp_path / "a" / "kept.txt").write_text("x")
    doomed = tmp_path / "a" / "doomed"
    real_scandir = os.scandir

    def scandir_after_removal(path=None):  # the folder disappears just before it is entered
        if isinstance(path, (str, os.PathLike)) and Path(path) == doomed:
            shutil.rmtree(doomed)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_after_removal)
    assert progress_signature([tmp_path / "a"]) == ((tmp_path / "a" / "kept.txt").stat().st_mtime_ns, 1)
    assert not doomed.exists()
