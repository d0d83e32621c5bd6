"""Per-step training metrics: one JSON line per step in ``metrics.jsonl`` and a dvclive folder for plots.

``metrics.jsonl`` is the record: ``{"step": s, "train/...": ..., "actor/...": ..., "ace/...": ...,
"timing/...": ...}`` with non-finite values written as ``null``. On resume from a checkpoint at step ``s`` the
file is cut back to steps ``<= s`` (atomically), so it holds every step exactly once.

The dvclive folder (``<run>/dvclive``: ``plots/metrics/<prefix>/<name>.tsv`` and ``metrics.json``) is a view
rebuilt from ``metrics.jsonl`` whenever the trainer starts, then appended step by step. dvclive's repository
integration is switched off (no ``dvc.yaml``, no experiment, no DVC/Git repository lookup, which in dvclive
3.49 would ``dvc init`` an enclosing Git repository), so logging never changes DVC or Git state.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from acerl.pipeline.io import write_text
from acerl.train.tracker import Tracker

__all__ = ["MetricsLog", "Timer", "read_metrics"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a torn last line from a kill is dropped)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def _live(live_dir: Path) -> Any:
    from dvclive.live import Live

    class _IsolatedLive(Live):
        """dvclive without the DVC/Git repository lookup (see the module docstring)."""

        def _init_dvc(self) -> None:
            self._dvc_repo = None

    if live_dir.exists():
        shutil.rmtree(live_dir)
    return _IsolatedLive(dir=str(live_dir), resume=False, report=None, save_dvc_exp=False, dvcyaml=None)


class MetricsLog:
    """Appends step records to ``jsonl_path`` and mirrors them into a dvclive folder.

    Args:
        jsonl_path: the ``metrics.jsonl`` file.
        resume_step: records with a larger step are removed (0 on a fresh start: the file is emptied).
        live_dir: dvclive folder, rebuilt from the kept records; ``None`` disables dvclive.
        tracker: an experiment tracker (:func:`acerl.train.tracker.open_tracker`) that receives each new record
            and is closed with the log; ``None``: none.
    """

    def __init__(
        self, jsonl_path: Path, resume_step: int, live_dir: Path | None = None, tracker: Tracker | None = None
    ) -> None:
        self.path = Path(jsonl_path)
        self._tracker = tracker
        kept = [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= resume_step]
        write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self._fh = self.path.open("a", encoding="utf-8")
        self._live = _live(live_dir) if live_dir is not None else None
        for record in kept:
            self._to_live(record)

    def _to_live(self, record: Mapping[str, Any]) -> None:
        if self._live is None:
            return
        self._live.step = int(record["step"])
        for key, value in record.items():
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                self._live.log_metric(key, float(value))
        self._live.make_summary()

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Append one record (flushed and fsync'd) and mirror it to dvclive."""
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._to_live(record)
        if self._tracker is not None:
            self._tracker.log(step, record)

    def close(self) -> None:
        self._fh.close()
        if self._tracker is not None:
            self._tracker.close()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Timer:
    """Accumulates wall-clock seconds per name (``timing/<name>``). A nested name's seconds count for it alone,
    not for the names around it, so the names' seconds add up to the time timed."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._inner: list[float] = []  # per open name: the seconds its nested names took

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[name] += elapsed - self._inner.pop()
            if self._inner:
                self._inner[-1] += elapsed

    def metrics(self) -> dict[str, float]:
        return {f"timing/{k}": v for k, v in self.seconds.items()}
