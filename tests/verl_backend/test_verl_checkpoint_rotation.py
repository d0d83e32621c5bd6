"""Checkpoint rotation across a resume with verl's real ``BaseCheckpointManager`` rotation methods.

verl's rotation list (``previous_saved_paths``) starts empty in every process, so a resumed attempt never
deletes what the earlier attempt saved. The project's checkpoint callback and the launcher prune those folders
(:func:`acerl.verl_backend.checkpoints.prune_checkpoints`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from acerl.verl_backend.checkpoints import (
    DiagnosticSnapshots,
    checkpoint_steps,
    latest_step,
    prune_checkpoints,
    step_dir,
)

checkpoint_manager = pytest.importorskip("verl.utils.checkpoint.checkpoint_manager")


def _verl_rotation() -> object:
    """verl's ``BaseCheckpointManager`` as a new process builds it, without a model: its ``__init__`` only sets
    ``previous_saved_paths = []`` besides the model, optimizer and process-group handles, which rotation does
    not read. The rotation methods are verl's own."""
    manager = object.__new__(checkpoint_manager.BaseCheckpointManager)
    manager.previous_saved_paths = []
    manager.previous_global_step = None
    return manager


def _attempt(ckpts: Path, steps: range, keep: int, callback: DiagnosticSnapshots) -> list[list[int]]:
    """One process of verl's trainer: per save, what ``FSDPCheckpointManager.save_checkpoint`` does for the
    rotation (capacity, write ``global_step_N/actor``, register), then ``_save_checkpoint``'s ``data.pt``,
    tracker and callback. Returns the step folders holding an actor after each save."""
    manager = _verl_rotation()
    seen = []
    for step in steps:
        actor = step_dir(ckpts, step) / "actor"
        manager.ensure_checkpoint_capacity(keep)
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"w" * 64)
        (actor / "fsdp_config.json").write_text("{}")
        manager.register_checkpoint(str(actor), keep)
        (step_dir(ckpts, step) / "data.pt").write_bytes(b"d")
        (ckpts / "latest_checkpointed_iteration.txt").write_text(str(step))
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(step_dir(ckpts, step)))
        seen.append([s for s in checkpoint_steps(ckpts) if (step_dir(ckpts, s) / "actor").is_dir()])
    return seen


def test_rotation_across_a_resume_keeps_keep_checkpoints(tmp_path: Path) -> None:
    """Two attempts of 4 saves each with keep=2: verl alone leaves attempt 1's steps 3 and 4 forever (each a
    full fp32 weight + Adam checkpoint at paper scale); with the callback at most 2 step folders ever exist."""
    ckpts = tmp_path / "checkpoints"
    config = OmegaConf.create(
        {"trainer": {"max_actor_ckpt_to_keep": 2, "acerl": {"snapshot_steps": [], "snapshot_dir": None}}}
    )
    callback = DiagnosticSnapshots(config)
    first = _attempt(ckpts, range(1, 5), 2, callback)
    second = _attempt(ckpts, range(5, 9), 2, DiagnosticSnapshots(config))  # a new process: a new list
    assert first == [[1], [1, 2], [2, 3], [3, 4]]
    assert second == [[4, 5], [5, 6], [6, 7], [7, 8]]
    assert checkpoint_steps(ckpts) == [7, 8] and latest_step(ckpts) == 8


def test_prune_at_launch(tmp_path: Path) -> None:
    """Before a launch: the newest ``keep`` complete steps stay; older ones and an interrupted save go."""
    ckpts = tmp_path / "checkpoints"
    for step in (2, 4, 6, 8, 10):
        (step_dir(ckpts, step) / "actor").mkdir(parents=True)
    (ckpts / "other").mkdir()
    assert prune_checkpoints(ckpts, 2) == []  # no tracker: nothing is known to be complete
    (ckpts / "latest_checkpointed_iteration.txt").write_text("8\n")
    removed = prune_checkpoints(ckpts, 2)
    assert removed == [step_dir(ckpts, s) for s in (2, 4, 10)]
    assert checkpoint_steps(ckpts) == [6, 8] and (ckpts / "other").is_dir()
    assert prune_checkpoints(ckpts, None) == [] and prune_checkpoints(ckpts, 1) == [step_dir(ckpts, 6)]
