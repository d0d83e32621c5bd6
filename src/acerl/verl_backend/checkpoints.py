"""verl checkpoints -> the project's Hugging Face folders: save schedule, diagnostic snapshots, export.

verl (0.9.1, FSDP) saves ``<default_local_dir>/global_step_<N>/actor/`` (model / optimizer / extra-state shards
per rank, ``fsdp_config.json``, ``huggingface/`` with config and tokenizer) every ``trainer.save_freq`` steps
and at the last step, keeps the newest ``trainer.max_actor_ckpt_to_keep``, and records the newest complete one
in ``latest_checkpointed_iteration.txt`` (``trainer.resume_mode=auto`` resumes from it).

Diagnostic checkpoints (paper Sec. 6: every 25 steps, plus the early window) must survive that rotation:

- the save schedule :func:`save_frequency` is the gcd of ``save_every`` and every diagnostic step, so verl
  saves at each diagnostic step;
- :class:`DiagnosticSnapshots` (``trainer.checkpoint_callback_class``) runs on the driver after each save and,
  at a diagnostic step, hard-links the actor's model shards and ``huggingface/`` folder (not the optimizer
  state) into ``<run>/diag_raw/step_<N>/actor`` (:func:`acerl.pipeline.paths.verl_snapshot_dir`), which rotation does
  not touch; hard links cost no space or time (a copy is made across file systems);
- after training, :func:`export_checkpoint` merges each snapshot with verl's model merger
  (``python -m verl.model_merger merge --backend fsdp --local_dir .../actor --target_dir OUT``) into
  ``paths.diag_step_dir(root, run, N)``, and the final checkpoint into ``paths.policy_dir(root, run)``,
  both written atomically.

verl rotates ``global_step_*`` folders through a list of the paths it saved *in this process*
(``BaseCheckpointManager.previous_saved_paths`` starts empty), so the checkpoints of an earlier attempt are never
deleted by a resumed one. :func:`prune_checkpoints` removes them: the launcher calls it before every launch and
:class:`DiagnosticSnapshots` after every save, so at most ``max_actor_ckpt_to_keep`` folders stay on disk
across restarts. After a successful export the launcher deletes the whole ``checkpoints/`` folder unless
``compute.keep_verl_checkpoints`` is set (docs/cluster.md, "Disk").

This module does not import verl (the callback is loaded by verl by its dotted name).
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from acerl.pipeline.io import atomic_dir, link_folder, link_or_copy, write_text

logger = logging.getLogger(__name__)

__all__ = [
    "CALLBACK_CLASS",
    "checkpoint_steps",
    "DiagnosticSnapshots",
    "export_checkpoint",
    "latest_step",
    "link_folder",
    "merge_command",
    "prune_checkpoints",
    "repair_tracker",
    "save_frequency",
    "snapshot_actor",
    "snapshot_step_dir",
    "step_dir",
]

CALLBACK_CLASS = "acerl.verl_backend.checkpoints.DiagnosticSnapshots"
LATEST_FILE = "latest_checkpointed_iteration.txt"
_OPTIMIZER_FILE = re.compile(r"^optim_world_size_\d+_rank_\d+\.pt$")
_STEP_FOLDER = re.compile(r"^global_step_(\d+)$")


def save_frequency(save_every: int, diagnostic_steps: Iterable[int]) -> int:
    """``trainer.save_freq``: the gcd of ``save_every`` and every positive diagnostic step.

    verl saves at multiples of ``save_freq`` (and the last step), so every diagnostic step gets a checkpoint.
    E.g. ``save_every=10`` with steps ``{5, 10, ..., 25, 50, 75, 90}`` gives 5.
    """
    freq = int(save_every)
    for step in diagnostic_steps:
        if step > 0:
            freq = math.gcd(freq, int(step))
    return freq


def step_dir(checkpoints: Path | str, step: int) -> Path:
    """verl's ``global_step_<N>`` folder under ``trainer.default_local_dir``."""
    return Path(checkpoints) / f"global_step_{step}"


def latest_step(checkpoints: Path | str) -> int | None:
    """The step in verl's ``latest_checkpointed_iteration.txt`` (None if there is no checkpoint yet).

    A tracker that holds no step number (a kill while verl rewrote it: it opens the file for writing after the
    step's folder is saved) counts as the newest ``global_step_<N>`` folder, with a warning; None without one.
    :func:`repair_tracker` writes that step back for verl, which would stop on the torn file."""
    tracker = Path(checkpoints) / LATEST_FILE
    if not tracker.is_file():
        return None
    text = tracker.read_text(errors="replace").strip()
    if text.isdigit():
        return int(text)
    steps = checkpoint_steps(checkpoints)
    logger.warning(
        "%s holds %r, not a step number (a kill while verl wrote it): resuming from %s",
        tracker,
        text,
        step_dir(checkpoints, steps[-1]) if steps else "step 0 (no global_step_* folder)",
    )
    return steps[-1] if steps else None


def repair_tracker(checkpoints: Path | str) -> int | None:
    """Make a torn ``latest_checkpointed_iteration.txt`` readable for verl (``int(f.read())`` on resume): write
    :func:`latest_step`'s answer into it, or remove it when no checkpoint folder is left. Returns that step."""
    tracker = Path(checkpoints) / LATEST_FILE
    step = latest_step(checkpoints)
    if tracker.is_file() and tracker.read_text(errors="replace").strip() != str(step):
        if step is None:
            tracker.unlink()
        else:
            write_text(tracker, str(step))
    return step


def checkpoint_steps(checkpoints: Path | str) -> list[int]:
    """The steps of the ``global_step_<N>`` folders under ``checkpoints``, ascending."""
    folder = Path(checkpoints)
    if not folder.is_dir():
        return []
    found = (_STEP_FOLDER.match(p.name) for p in folder.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def prune_checkpoints(checkpoints: Path | str, keep: int | None) -> list[Path]:
    """Delete the ``global_step_<N>`` folders that verl's rotation no longer tracks; returns them, ascending.

    Kept: the newest ``keep`` folders at or below the step in ``latest_checkpointed_iteration.txt`` (the
    resume point is always among them). Deleted: older ones, and folders above that step (a save that a kill
    interrupted before verl wrote the tracker; verl saves that step again). Nothing is deleted without a
    tracker, or when ``keep`` is None or below 1 (verl then keeps every checkpoint).
    """
    latest = latest_step(checkpoints)
    if latest is None or keep is None or keep < 1:
        return []
    steps = checkpoint_steps(checkpoints)
    done = [s for s in steps if s <= latest]
    doomed = sorted([*done[: max(len(done) - keep, 0)], *(s for s in steps if s > latest)])
    removed = [step_dir(checkpoints, s) for s in doomed]
    for folder in removed:
        logger.info("acerl: removing checkpoint %s (beyond the newest %d)", folder, keep)
        shutil.rmtree(folder)
    return removed


def snapshot_step_dir(snapshots: Path | str, step: int) -> Path:
    return Path(snapshots) / f"step_{step:06d}"


def snapshot_actor(actor_dir: Path | str, target: Path | str) -> Path:
    """Hard-link (or copy) a verl actor checkpoint without its optimizer shards to ``target/actor``, atomically.

    Returns ``target``. An existing complete snapshot is kept (a resumed run re-saving the same step).
    """
    actor_dir, target = Path(actor_dir), Path(target)
    if (target / "actor" / "fsdp_config.json").is_file():
        return target
    if not (actor_dir / "fsdp_config.json").is_file():
        raise FileNotFoundError(f"{actor_dir}: not a verl FSDP actor checkpoint (no fsdp_config.json)")
    with atomic_dir(target) as tmp:
        for src in sorted(actor_dir.rglob("*")):
            rel = src.relative_to(actor_dir)
            dst = tmp / "actor" / rel
            if src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
            elif not _OPTIMIZER_FILE.match(src.name):
                dst.parent.mkdir(parents=True, exist_ok=True)
                link_or_copy(src, dst)
    return target


class DiagnosticSnapshots:
    """verl checkpoint callback (``trainer.checkpoint_callback_class``): snapshot diagnostic steps, then prune.

    Reads ``trainer.acerl.snapshot_steps`` (list of steps, may be empty) and ``trainer.acerl.snapshot_dir``
    from the verl config; after verl saves ``global_step_<N>`` with ``N`` in the list, calls
    :func:`snapshot_actor`. After every save it calls :func:`prune_checkpoints` with
    ``trainer.max_actor_ckpt_to_keep``, which deletes what an earlier attempt left behind (verl's own rotation
    forgets it). Duck-types ``verl.trainer.ppo.checkpoint_callback.CheckpointCallback`` (verl does not check the
    base).
    """

    def __init__(self, config: Any = None) -> None:
        self.config = config
        section = config.trainer.get("acerl", None) if config is not None else None
        if section is None:
            raise ValueError(
                f"{CALLBACK_CLASS} needs trainer.acerl.snapshot_steps and trainer.acerl.snapshot_dir in the config"
            )
        self.steps = frozenset(int(s) for s in section.get("snapshot_steps", None) or [])
        snapshot_dir = section.get("snapshot_dir", None)
        if self.steps and snapshot_dir is None:
            raise ValueError(f"{CALLBACK_CLASS}: trainer.acerl.snapshot_steps is set but snapshot_dir is not")
        self.directory = Path(str(snapshot_dir)) if snapshot_dir is not None else None
        keep = config.trainer.get("max_actor_ckpt_to_keep", None)
        self.keep = int(keep) if keep is not None else None

    def on_save(
        self,
        trainer: Any = None,
        global_step: int = 0,
        checkpoint_dir: str = "",
        async_save: bool = False,
        **kwargs: Any,
    ) -> None:
        if async_save:
            raise RuntimeError(
                "acerl's checkpoint callback needs synchronous checkpoints (actor.checkpoint.async_save=False)"
            )
        if int(global_step) in self.steps and self.directory is not None:
            target = snapshot_actor(
                Path(checkpoint_dir) / "actor", snapshot_step_dir(self.directory, int(global_step))
            )
            logger.info("acerl: diagnostic snapshot of step %d at %s", global_step, target)
        prune_checkpoints(Path(checkpoint_dir).parent, self.keep)


def merge_command(actor_dir: Path | str, target_dir: Path | str, python: str | None = None) -> list[str]:
    """verl's model merger: FSDP actor shards -> a Hugging Face folder (bf16 safetensors + tokenizer)."""
    return [
        python or sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(actor_dir),
        "--target_dir",
        str(target_dir),
    ]


def export_checkpoint(
    actor_dir: Path | str, target: Path | str, *, env: dict[str, str] | None = None, run: Any = subprocess.run
) -> Path:
    """Merge a verl actor checkpoint into the HF folder ``target`` (atomically; an existing one is replaced).

    Args:
        actor_dir: ``.../global_step_<N>/actor`` or a snapshot's ``actor`` folder.
        target: the HF folder to write (e.g. ``paths.policy_dir(root, run)``).
        env: environment for the merger process.
        run: ``subprocess.run``-compatible callable (tests pass a recorder).
    """
    actor_dir, target = Path(actor_dir), Path(target)
    if not (actor_dir / "fsdp_config.json").is_file():
        raise FileNotFoundError(f"{actor_dir}: not a verl FSDP actor checkpoint (no fsdp_config.json)")
    with atomic_dir(target) as tmp:
        cmd = merge_command(actor_dir, tmp)
        logger.info("export %s -> %s: %s", actor_dir, target, " ".join(cmd))
        run(cmd, check=True, env=env)
        if not (tmp / "config.json").is_file():
            raise RuntimeError(f"verl model merger wrote no config.json into {tmp} (from {actor_dir})")
    return target
