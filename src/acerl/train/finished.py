"""Whether a run's existing final policy answers the requested run: its recorded run spec against the requested one.

The trainer writes the run spec it trained with into the final policy folder (:data:`FINAL_SPEC_FILE`, beside the
weights). A later ``acerl train`` of the same (model, method, seed) returns that folder only when the spec it
would train with is the same; otherwise :func:`check_final` raises a one-line error naming the folder, each
differing key (``key: old vs new``) and the fix. A final folder written before the spec was recorded inside it
is checked against ``run_spec.json`` of its run folder (the settings its training started with).

The training data (``data/``) and the base model (``models/base/<model>/``) a new training reuses are checked the
same way against the params their preparation recorded beside them; that check reads the pipeline's stage table,
so it lives above the trainer (:func:`acerl.pipeline.reuse.check_reused_inputs`), which raises
:class:`StaleInputError` and formats with :func:`spec_differences` and :func:`shown_differences`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from acerl.config.settings import without_resource_keys
from acerl.errors import BadInputError, reading

logger = logging.getLogger(__name__)

__all__ = [
    "FINAL_SPEC_FILE",
    "SHOWN_DIFFERENCES",
    "StaleFinalError",
    "StaleInputError",
    "check_final",
    "shown_differences",
    "spec_differences",
]

FINAL_SPEC_FILE = "run_spec.json"
SHOWN_DIFFERENCES = 4  # differing keys named in the message; the rest are counted


class StaleFinalError(BadInputError):
    """The final policy folder was trained with other settings than the ones requested."""


class StaleInputError(BadInputError):
    """The training data or base model was prepared with other settings than the requested run needs."""


def shown_differences(diffs: list[str]) -> str:
    """The first :data:`SHOWN_DIFFERENCES` of ``diffs`` joined by ``; ``, the rest counted (`` (and N more)``)."""
    more = f" (and {len(diffs) - SHOWN_DIFFERENCES} more)" if len(diffs) > SHOWN_DIFFERENCES else ""
    return "; ".join(diffs[:SHOWN_DIFFERENCES]) + more


def spec_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``key: old vs new`` for every leaf where two run specs differ (dotted key paths, sorted; a key only one
    spec has shows ``(absent)`` on the other side)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            out += spec_differences(old.get(key, _ABSENT), new.get(key, _ABSENT), path)
        return out
    if old == new:
        return []
    return [f"{prefix or '(spec)'}: {_show(old)} vs {_show(new)}"]


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, _Absent) else json.dumps(value, sort_keys=True)


def _recorded(final: Path, run_spec_file: Path) -> tuple[Path, dict[str, Any]] | None:
    """The spec the final folder was trained with and the file it was read from (``None``: none recorded)."""
    for file in (final / FINAL_SPEC_FILE, run_spec_file):
        if file.is_file():
            with reading(file, f"delete {final} too and rerun the same command (the run is trained again)"):
                return file, json.loads(file.read_text(encoding="utf-8"))
    return None


def check_final(final: Path, run_spec_file: Path, requested: dict[str, Any], run_id: str) -> None:
    """Raise :class:`StaleFinalError` when the finished run's recorded spec differs from ``requested``.

    ``requested`` is what the trainer would write to :data:`FINAL_SPEC_FILE` now. A spec recorded in the run
    folder (older final folders) holds no ``code_version``, which is then not compared. Without any record the
    folder is returned as it is, with a warning saying so."""
    found = _recorded(final, run_spec_file)
    if found is None:
        logger.warning(
            "%s: %s records no run spec, so it cannot be checked against the requested settings; "
            "delete it and rerun to be sure it matches them",
            run_id,
            final,
        )
        return
    file, old = found
    old = without_resource_keys(old)  # recorded before the resource keys left the spec
    new = requested if "code_version" in old else {k: v for k, v in requested.items() if k != "code_version"}
    diffs = spec_differences(old, new)
    if not diffs:
        return
    raise StaleFinalError(
        f"{final} was trained with other settings than the requested run {run_id} ({file.relative_to(final.parent)}: "
        f"{shown_differences(diffs)}): give the config that trained it (--config/--set), "
        f"or delete {final} and rerun the same command to train the requested settings"
    )
