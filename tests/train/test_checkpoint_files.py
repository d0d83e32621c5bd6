"""The checkpoint folder's bookkeeping on files we make (acerl.train.checkpoint): which folders count as
checkpoints, which one is the latest, and what makes one incomplete. The kill-and-resume tests
(``test_resume.py``) run whole trainings with at most two checkpoints kept; these cover the cases they do not reach
(a third checkpoint, steps of different widths, a folder that only looks like a checkpoint), and save, load,
fall-back and supersede in this process, where the resume tests' killed trainings run in subprocesses."""

from __future__ import annotations

import calendar
import logging
import os
import re
import time
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from acerl.config import Run
from acerl.errors import BadInputError
from acerl.pipeline import paths
from acerl.train.checkpoint import (
    LATEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    REF_FILE,
    STATE_FILE,
    check_complete,
    checkpoint_name,
    find_latest,
    latest_usable,
    list_checkpoints,
    load_checkpoint,
    read_trainer_state,
    save_checkpoint,
    supersede_stale_state,
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


# ------------------------------------------------------------------- save, load, fall back (in this process)
def _modules(seed: int) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer]:
    """A policy, a reference that differs from it, and an AdamW that has taken one step (non-empty state)."""
    torch.manual_seed(seed)
    model, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return model, ref, optimizer


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_save_and_load_round_trip_with_an_ema_reference(tmp_path):
    model, ref, optimizer = _modules(0)
    path = save_checkpoint(tmp_path, 4, model, optimizer, {"epoch": 1}, keep=2, ref_model=ref)
    assert path == tmp_path / checkpoint_name(4)
    assert (tmp_path / LATEST_FILE).read_text() == checkpoint_name(4) + "\n"
    model2, ref2, optimizer2 = _modules(1)
    assert not _same(model2, model) and not _same(ref2, ref)
    state = load_checkpoint(path, model2, optimizer2, ref_model=ref2)  # the default device, the CPU
    assert state == {"epoch": 1, "step": 4} == read_trainer_state(path)
    assert _same(model2, model) and _same(ref2, ref) and not _same(ref2, model)
    saved, loaded = optimizer.state_dict()["state"][0], optimizer2.state_dict()["state"][0]
    assert all(torch.equal(saved[k], loaded[k]) for k in ("step", "exp_avg", "exp_avg_sq"))


def test_save_keeps_the_newest_checkpoints(tmp_path):
    model, _, optimizer = _modules(0)
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, model, optimizer, {}, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]


def test_loading_a_reference_the_checkpoint_does_not_have_says_so(tmp_path):
    model, ref, optimizer = _modules(0)
    path = save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=2)
    with pytest.raises(FileNotFoundError, match=f"{path} has no {REF_FILE}; it was not written with an EMA"):
        load_checkpoint(path, model, optimizer, ref_model=ref)


def test_loading_into_another_architecture_fails(tmp_path):
    """``strict``: a checkpoint of other parameter names is refused, not loaded half-way (one check per file). The
    run spec check (:func:`supersede_stale_state`) keeps a changed architecture from getting this far."""
    model, ref, optimizer = _modules(0)
    path = save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=2, ref_model=ref)
    other = torch.nn.Sequential(torch.nn.Linear(3, 2))  # the same shapes under the names 0.weight, 0.bias
    with pytest.raises(BadInputError, match=rf"^{re.escape(str(path / MODEL_FILE))} .*Missing key"):
        load_checkpoint(path, other, torch.optim.AdamW(other.parameters()))
    with pytest.raises(BadInputError, match=rf"^{re.escape(str(path / REF_FILE))} .*Missing key"):
        load_checkpoint(path, model, optimizer, ref_model=other)


@pytest.mark.parametrize("name", [MODEL_FILE, REF_FILE, OPTIMIZER_FILE, STATE_FILE])
def test_a_corrupt_file_is_a_bad_input_naming_it_and_the_folder_to_delete(tmp_path, name):
    model, ref, optimizer = _modules(0)
    path = save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=2, ref_model=ref)
    (path / name).write_bytes(b"\x00" * 64)
    with pytest.raises(BadInputError) as err:
        load_checkpoint(path, model, optimizer, ref_model=ref)
    message = str(err.value)
    assert message.startswith(f"{path / name} is unreadable (truncated or corrupt")
    assert f"delete {path} and rerun the same command" in message


def test_fallback_to_an_older_checkpoint_is_logged_and_only_then(tmp_path, caplog):
    for step in (2, 4):
        _checkpoint(tmp_path, step)
    with caplog.at_level(logging.WARNING, logger="acerl.train.checkpoint"):
        assert latest_usable(tmp_path) == tmp_path / checkpoint_name(4)
    assert caplog.records == []  # the newest is complete: nothing to say
    newest = tmp_path / checkpoint_name(4) / MODEL_FILE
    newest.write_bytes(newest.read_bytes()[:10])
    with caplog.at_level(logging.WARNING, logger="acerl.train.checkpoint"):
        assert latest_usable(tmp_path) == tmp_path / checkpoint_name(2)
    (record,) = caplog.records
    assert record.getMessage().startswith(f"{newest} is unreadable")
    assert record.getMessage().endswith(
        f"; resuming from the previous complete checkpoint {tmp_path / checkpoint_name(2)} instead"
    )


def test_stale_state_is_moved_aside_under_a_utc_stamp_and_named(tmp_path, caplog):
    run = Run("tiny", "ace_grpo", 3)
    ckpts, diag = paths.checkpoints_dir(tmp_path, run), paths.diag_dir(tmp_path, run)
    newest = _checkpoint(ckpts, 6)
    (diag / "step_000002").mkdir(parents=True)
    extra = tmp_path / "verl_snapshots"
    extra.mkdir()
    (extra / "a.pt").write_bytes(b"x")
    absent = tmp_path / "never_made"
    with caplog.at_level(logging.WARNING, logger="acerl.train.checkpoint"):
        moved = supersede_stale_state(tmp_path, run, newest, also=(extra, absent))
    assert [p.parent for p in moved] == [ckpts.parent, diag.parent, tmp_path]
    for folder, target in zip((ckpts, diag, extra), moved, strict=True):
        assert re.fullmatch(rf"{folder.name}\.superseded-\d{{8}}T\d{{6}}Z", target.name), target.name
        assert target.is_dir() and not folder.exists()
    assert (moved[0] / checkpoint_name(6) / STATE_FILE).is_file()  # moved, not deleted
    assert (moved[2] / "a.pt").read_bytes() == b"x" and not absent.exists()
    (record,) = caplog.records
    assert record.getMessage() == (
        f"{run.id}: checkpoint {newest} was written with other settings (the run spec changed); starting again "
        f"from step 0. The old state was moved to {', '.join(map(str, moved))}: delete it once you no longer "
        "need it"
    )
    assert supersede_stale_state(tmp_path, run, newest) == []  # nothing left to move


def test_the_supersede_stamp_is_utc_whatever_the_local_zone(tmp_path, monkeypatch):
    run = Run("tiny", "grpo", 0)
    _checkpoint(paths.checkpoints_dir(tmp_path, run), 2)
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # UTC+9, no daylight saving
    time.tzset()
    try:
        before = time.time()
        (moved,) = supersede_stale_state(tmp_path, run, tmp_path)
        after = time.time()
    finally:
        monkeypatch.undo()
        time.tzset()
    stamp = moved.name.rsplit("-", 1)[1]
    when = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))  # read as UTC
    assert int(before) <= when <= after


class _NotAllowed:
    """Anything outside torch's weights-only allowlist: loading it needs full unpickling, which runs code."""


@pytest.mark.parametrize("name", [STATE_FILE, OPTIMIZER_FILE])
def test_checkpoint_files_load_weights_only(tmp_path, name):
    """The trainer state and optimizer files are read with ``weights_only``: a file holding any other object is
    refused as unreadable instead of being unpickled (no code from a checkpoint folder runs)."""
    model, _, optimizer = _modules(0)
    path = save_checkpoint(tmp_path, 2, model, optimizer, {}, keep=2)
    torch.save({"step": 2, "payload": _NotAllowed()}, path / name)
    with pytest.raises(
        BadInputError, match=rf"^{re.escape(str(path / name))} is unreadable .*Weights only load"
    ):
        load_checkpoint(path, model, optimizer)


def test_checkpoints_and_model_folders_follow_the_umask(tmp_path):
    """Under umask 022 every checkpoint file and exported ``model.safetensors`` is 0644 like the other written
    files: safetensors' ``save_file`` writes through its own private temporary file, and left them 0600, so a
    colleague on a shared filesystem could not read the weights."""
    from acerl.models.lean import LeanLlamaForCausalLM
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.pipeline.io import save_hf_folder

    model, ref, optimizer = _modules(0)
    arch = TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=32)
    tokenizer = build_char_tokenizer(model_max_length=arch.max_position_embeddings)
    old = os.umask(0o022)
    try:
        ckpt = save_checkpoint(tmp_path / "ckpt", 2, model, optimizer, {}, keep=2, ref_model=ref)
        hf = save_hf_folder(tmp_path / "hf", build_tiny_model(arch, tokenizer, seed=0), tokenizer)
        lean = save_hf_folder(tmp_path / "lean", LeanLlamaForCausalLM.from_folder(hf), tokenizer)
    finally:
        os.umask(old)
    files = [*ckpt.iterdir(), *hf.iterdir(), *lean.iterdir()]
    assert {MODEL_FILE, REF_FILE} <= {f.name for f in ckpt.iterdir()}
    assert {f.name for f in files} >= {"model.safetensors", "config.json"}
    assert {f"{f.parent.name}/{f.name}": oct(f.stat().st_mode & 0o777) for f in files} == {
        f"{f.parent.name}/{f.name}": oct(0o644) for f in files
    }
    assert all(oct(d.stat().st_mode & 0o777) == oct(0o755) for d in (ckpt, hf, lean))
