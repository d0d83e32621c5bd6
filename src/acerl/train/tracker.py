"""Experiment trackers the training loop also logs to (``compute.tracker``): TensorBoard or wandb, off by default.

``metrics.jsonl`` stays the record (:mod:`acerl.train.metrics`); a tracker is a view for the tools RL
researchers already use. TensorBoard writes event files with ``torch.utils.tensorboard`` (the ``tensorboard``
package is in the lock); wandb is imported only when chosen, so it is never a dependency of a default run.
The verl backend passes the same choice to verl's ``trainer.logger`` (:func:`verl_loggers`). A finished run's
curves are written after the fact from its ``metrics.jsonl`` (:func:`export_tensorboard`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from acerl.config import ConfigError
from acerl.pipeline.io import atomic_dir

__all__ = ["Tracker", "TrackerKind", "export_tensorboard", "open_tracker", "verl_loggers"]

TrackerKind = Literal["none", "tensorboard", "wandb"]


class Tracker(Protocol):
    def log(self, step: int, metrics: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in metrics.items()
        if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


class _TensorBoard:
    def __init__(self, log_dir: Path, *, flush: bool = True) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))
        self._flush = flush  # live: each step shows at once; an export flushes at close

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        for key, value in _scalars(metrics).items():
            self._writer.add_scalar(key, value, global_step=step)
        if self._flush:
            self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class _Wandb:
    def __init__(self, log_dir: Path, project: str, name: str) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(
                "compute.tracker: wandb is not installed; pip install wandb, or set compute.tracker: tensorboard"
            ) from e
        self._run = wandb.init(project=project, name=name, id=name.replace("/", "-"), dir=str(log_dir),
                               resume="allow")  # fmt: skip

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._run.log(_scalars(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


def open_tracker(kind: TrackerKind, log_dir: Path | str, *, project: str, name: str) -> Tracker | None:
    """The tracker ``kind`` writing under ``log_dir`` (created), or ``None`` for ``"none"``."""
    if kind == "none":
        return None
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    if kind == "tensorboard":
        return _TensorBoard(log_dir)
    if kind == "wandb":
        return _Wandb(log_dir, project, name)
    raise ConfigError(f"compute.tracker: unknown tracker {kind!r}; valid: none, tensorboard, wandb")


def verl_loggers(kind: TrackerKind) -> list[str]:
    """verl's ``trainer.logger`` list for ``kind``: the console and the file logger the launcher reads, plus the
    tracker (verl's own names: ``tensorboard``, ``wandb``)."""
    return ["console", "file"] + ([] if kind == "none" else [kind])


def export_tensorboard(records: Iterable[Mapping[str, Any]], log_dir: Path | str) -> int:
    """Write a run's logged metrics (``metrics.jsonl`` records, each with its ``step``) as TensorBoard event files
    in ``log_dir``, which is replaced whole and atomically (an earlier export's or a live tracker's events do not
    double the curves); returns the number of steps written."""
    steps = 0
    with atomic_dir(log_dir) as tmp:
        board = _TensorBoard(tmp, flush=False)
        try:
            for record in records:
                board.log(int(record["step"]), record)
                steps += 1
        finally:
            board.close()
    return steps
