"""Resumable trainer checkpoints and HF policy folders, all written atomically.

Layout under ``paths.checkpoints_dir(root, run)``::

    step_000010/
        model.safetensors      policy weights (safetensors; tied weights stored once)
        ref.safetensors        reference weights (only with an EMA reference)
        optimizer.pt           AdamW state_dict
        trainer_state.pt       step, scheduler state, data position, RNG states (python, numpy, torch)
                               and the run spec
    step_000020/ ...
    latest                     text: the name of the newest complete checkpoint folder

A checkpoint folder is written under a temporary name (``.tmp-...``) and renamed once complete, then ``latest``
is replaced atomically; only then are checkpoints beyond ``keep_checkpoints`` deleted. A killed job therefore
leaves either the previous state or the new one, plus possibly a ``.tmp-*`` folder that is ignored (and
removed on the next start). A checkpoint whose files are truncated or corrupt (a full disk, a copy cut short) is
skipped with a warning naming it, and training resumes from the previous complete one
(:func:`latest_usable`); with none left it is a :class:`~acerl.errors.BadInputError` (exit 4) naming the folder
to delete. ``*.pt`` files hold only tensors and plain Python values and are read with
``torch.load(weights_only=True)``: no arbitrary pickles.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from acerl.config import Run, spec_json
from acerl.config.settings import without_resource_keys
from acerl.errors import BadInputError, reading
from acerl.optim import AdamW
from acerl.pipeline import paths
from acerl.pipeline.io import TMP_PREFIX, atomic_dir, write_text

logger = logging.getLogger(__name__)

__all__ = [
    "LATEST_FILE",
    "check_complete",
    "checkpoint_name",
    "find_latest",
    "get_rng_states",
    "latest_usable",
    "list_checkpoints",
    "load_checkpoint",
    "read_trainer_state",
    "remove_stale_temps",
    "save_checkpoint",
    "seed_rng_states",
    "set_rng_states",
    "supersede_stale_state",
]

LATEST_FILE = "latest"
MODEL_FILE = "model.safetensors"
REF_FILE = "ref.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.pt"
_NAME = re.compile(r"^step_(\d{6,})$")
_REMAKE = "rerun the same command (training resumes from an earlier checkpoint, or starts again from step 0)"
_ERRORS = (SafetensorError, zipfile.BadZipFile)  # what a truncated .safetensors / torch.save file raises


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def remove_stale_temps(folder: Path) -> None:
    """Delete leftovers (``.tmp-*``) of writes killed half-way in ``folder``."""
    if not folder.is_dir():
        return
    for p in folder.glob(f"{TMP_PREFIX}*"):
        logger.info("removing leftover temporary %s", p)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------ RNG
def get_rng_states() -> dict[str, Any]:
    """The global random states, as tensors and plain values (``weights_only``-safe). The sampling generator's
    is not one of them: every batch reseeds it from (run seed, step, attempt), so it holds nothing to resume."""
    version, mt, gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "python": [version, list(mt), gauss],
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def seed_rng_states(seed: int) -> None:
    """Seed python's, numpy's and torch's global random states (what :func:`get_rng_states` records), so a
    fresh run's checkpoints do not depend on the state its process started with."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`get_rng_states` returned (a ``sampling`` entry, which older checkpoints hold, is
    ignored)."""
    version, mt, gauss = states["python"]
    random.setstate((version, tuple(mt), gauss))
    n = states["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


# ---------------------------------------------------------------------------------------- checkpoints
def list_checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoint folders in ``ckpt_dir`` as ``(step, path)``, oldest first (temps ignored)."""
    if not ckpt_dir.is_dir():
        return []
    found = []
    for p in ckpt_dir.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir() and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def find_latest(ckpt_dir: Path) -> Path | None:
    """The checkpoint ``latest`` names; if the pointer is missing or stale, the newest complete folder."""
    pointer = ckpt_dir / LATEST_FILE
    if pointer.is_file():
        target = ckpt_dir / pointer.read_text(encoding="utf-8").strip()
        if _NAME.match(target.name) and (target / STATE_FILE).is_file():
            return target
        logger.warning("%s points to a missing checkpoint %s; scanning the folder", pointer, target.name)
    found = list_checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def check_complete(path: Path) -> None:
    """Raise :class:`~acerl.errors.BadInputError` naming the first file of checkpoint folder ``path`` that is
    missing or truncated (cheap: the safetensors headers against the file sizes, the ``*.pt`` zip directories;
    no tensor is read)."""
    for name in (STATE_FILE, MODEL_FILE, OPTIMIZER_FILE, REF_FILE):
        file = path / name
        if name == REF_FILE and not file.exists():
            continue  # written only with an EMA reference; load_checkpoint says so when it is needed
        with reading(file, _REMAKE, _ERRORS, delete=path):
            if name.endswith(".safetensors"):
                with safe_open(str(file), framework="pt"):
                    pass
            else:
                zipfile.ZipFile(file).close()


def latest_usable(ckpt_dir: Path) -> Path | None:
    """The checkpoint to resume from: :func:`find_latest`, or, when its files are truncated or corrupt, the newest
    earlier complete one (a warning names the bad folder and the one used). ``None`` without checkpoints; a
    :class:`~acerl.errors.BadInputError` when every checkpoint is unusable."""
    newest = find_latest(ckpt_dir)
    if newest is None:
        return None
    older = [p for _, p in reversed(list_checkpoints(ckpt_dir)) if p != newest]
    first_error: BadInputError | None = None
    for ckpt in [newest, *older]:
        try:
            check_complete(ckpt)
        except BadInputError as e:
            first_error = first_error or e
            continue
        if first_error is not None:
            logger.warning("%s; resuming from the previous complete checkpoint %s instead", first_error, ckpt)
        return ckpt
    assert first_error is not None
    raise first_error


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: AdamW | torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int,
    ref_model: torch.nn.Module | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically, point ``latest`` at it, keep the newest ``keep`` checkpoints.

    Args:
        state: trainer state (step, scheduler, data position, RNG states, spec): tensors and plain values only.
        ref_model: saved too when the reference changes during training (EMA).
    """
    final = ckpt_dir / checkpoint_name(step)
    with atomic_dir(final) as tmp:
        save_model(model, str(tmp / MODEL_FILE))
        if ref_model is not None:
            save_model(ref_model, str(tmp / REF_FILE))
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        torch.save({**state, "step": step}, tmp / STATE_FILE)
    write_text(ckpt_dir / LATEST_FILE, final.name + "\n")
    for _, old in list_checkpoints(ckpt_dir)[:-keep]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: AdamW | torch.optim.Optimizer,
    ref_model: torch.nn.Module | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Load weights and optimizer state in place; returns the trainer state dict (``weights_only`` load). A file
    that cannot be decoded is a :class:`~acerl.errors.BadInputError` naming it and the folder to delete."""
    with reading(path / MODEL_FILE, _REMAKE, _ERRORS, delete=path):
        load_model(model, str(path / MODEL_FILE), strict=True, device=str(device))
    if ref_model is not None:
        ref_file = path / REF_FILE
        if not ref_file.is_file():
            raise FileNotFoundError(f"{path} has no {REF_FILE}; it was not written with an EMA reference")
        with reading(ref_file, _REMAKE, _ERRORS, delete=path):
            load_model(ref_model, str(ref_file), strict=True, device=str(device))
    # loaded on the host: load_state_dict moves each state tensor to its parameter's device and keeps AdamW's
    # step counters on the host, where a fresh optimizer has them (map_location=cuda would put them on the GPU)
    with reading(path / OPTIMIZER_FILE, _REMAKE, _ERRORS, delete=path):
        saved = torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(saved)
    return read_trainer_state(path)


def read_trainer_state(path: Path) -> dict[str, Any]:
    """The trainer state of checkpoint folder ``path`` (step, run spec, ...) without loading any weights; the
    run spec as this code writes it (:func:`acerl.config.settings.without_resource_keys`)."""
    with reading(path / STATE_FILE, _REMAKE, _ERRORS, delete=path):
        state: dict[str, Any] = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("spec"), str):
        state["spec"] = spec_json(without_resource_keys(json.loads(state["spec"])))
    return state


def supersede_stale_state(root: Path, run: Run, ckpt: Path, also: tuple[Path, ...] = ()) -> list[Path]:
    """Move the checkpoints and diagnostic snapshots of ``run`` (and the folders ``also``) aside because ``ckpt``
    (the newest checkpoint) was written with other settings (the run spec changed, e.g. a new alpha): the run
    starts again from step 0, and nothing is deleted. Returns the folders' new names
    (``<name>.superseded-<UTC time>``)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for folder in (paths.checkpoints_dir(root, run), paths.diag_dir(root, run), *also):
        if folder.exists():
            target = folder.with_name(f"{folder.name}.superseded-{stamp}")
            folder.rename(target)
            moved.append(target)
    logger.warning(
        "%s: checkpoint %s was written with other settings (the run spec changed); starting again from step 0. "
        "The old state was moved to %s: delete it once you no longer need it",
        run.id,
        ckpt,
        ", ".join(map(str, moved)),
    )
    return moved
