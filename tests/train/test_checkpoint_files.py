"""The checkpoint folder's bookkeeping on files we make (acerl.train.checkpoint): which folders count as
checkpoints, which one is the latest, and what makes one incomplete. The kill-and-resume tests
(``test_resume.py``) run whole trainings with at most two checkpoints kept; these cover the cases they do not reach
(a third checkpoint, steps of different widths, a folder that only looks like a checkpoint)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from acerl.errors import BadInputError
from acerl.train.checkpoint import (
    LATEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    REF_FILE,
    STATE_FILE,
    check_complete,
    checkpoint_name,
    find_latest,
    list_checkpoints,
)


def _checkpoint(ckpt_dir: Path, step: int, *, ref: bool = False, skip: tuple[str, ...] = ()) -> Path:
    """A complete checkpoint folder of small but real files (torch.save zips, safetensors)."""
    path = ckpt_dir / checkpoint_name(step)
    path.mkdir(parents=True)
    tensors = {"w": torch.zeros(2)}
    files = {STATE_FILE: "pt", OPTIMIZER_FILE: "pt", MODEL_FILE: "st", **({REF_FILE: "st"} if ref else {})}
    for name, kind in files.items():
        if name in skip:
            continue
        if kind == "pt":
            torch.save({"step": step}, path / name)
        else:
            save_file(tensors, str(path / name))
    return path


def test_list_checkpoints_keeps_complete_step_folders_in_step_order(tmp_path):
    for step in (9, 10, 1000000, 2):
        _checkpoint(tmp_path, step)
    (tmp_path / checkpoint_name(5)).mkdir()  # no trainer state: a checkpoint killed half-way
    (tmp_path / checkpoint_name(6)).write_text("not a folder")
    (tmp_path / "step_7").mkdir()  # not the checkpoint name pattern (six digits at least)
    (tmp_path / "step_7" / STATE_FILE).write_bytes(b"x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / STATE_FILE).write_bytes(b"x")
    assert [(s, p.name) for s, p in list_checkpoints(tmp_path)] == [
        (2, "step_000002"), (9, "step_000009"), (10, "step_000010"), (1000000, "step_1000000")
    ]  # fmt: skip
    assert list_checkpoints(tmp_path / "absent") == []


def test_find_latest_follows_the_pointer_else_the_newest_complete_folder(tmp_path):
    assert find_latest(tmp_path) is None
    for step in (10, 20, 30):
        _checkpoint(tmp_path, step)
    assert find_latest(tmp_path) == tmp_path / "step_000030"  # no pointer: the newest of three
    (tmp_path / LATEST_FILE).write_text("step_000020\n", encoding="utf-8")
    assert find_latest(tmp_path) == tmp_path / "step_000020"  # the pointer, even if not the newest
    (tmp_path / LATEST_FILE).write_text("step_000040\n", encoding="utf-8")
    assert find_latest(tmp_path) == tmp_path / "step_000030"  # a stale pointer: the newest again


@pytest.mark.parametrize("missing", [STATE_FILE, MODEL_FILE, OPTIMIZER_FILE])
def test_check_complete_names_a_missing_file(tmp_path, missing):
    path = _checkpoint(tmp_path, 3, skip=(missing,))
    with pytest.raises(BadInputError, match=missing):
        check_complete(path)


def test_check_complete_accepts_a_checkpoint_without_reference_and_refuses_a_truncated_one(tmp_path):
    check_complete(_checkpoint(tmp_path, 1))
    check_complete(_checkpoint(tmp_path, 2, ref=True))
    bad = _checkpoint(tmp_path, 3, ref=True)
    (bad / REF_FILE).write_bytes((bad / REF_FILE).read_bytes()[:20])
    with pytest.raises(BadInputError, match=REF_FILE):
        check_complete(bad)
    worse = _checkpoint(tmp_path, 4)
    with zipfile.ZipFile(worse / OPTIMIZER_FILE) as z:
        assert z.namelist()  # a real torch.save zip ...
    (worse / OPTIMIZER_FILE).write_bytes((worse / OPTIMIZER_FILE).read_bytes()[:-30])  # ... cut short
    with pytest.raises(BadInputError, match=OPTIMIZER_FILE):
        check_complete(worse)
