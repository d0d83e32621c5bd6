"""Whether the prepared inputs a new training reuses were made for the requested config: the stage table's check.

``data/`` and ``models/base/<model>/`` record the params their preparation was run with
(:func:`acerl.pipeline.stages.params_record_file`); :func:`check_reused_inputs` compares them with what the
config gives now (:func:`acerl.pipeline.stages.param_values`) and raises
:class:`acerl.train.finished.StaleInputError` naming each differing key and the command that rebuilds the folder.
A folder without that record (made by older code) is not checked. It reads the stage table, so the trainer does
not call it itself: the backends' dispatcher (:func:`acerl.trainers.train_local`) hands it to
:func:`acerl.train.train_run`, which runs it under the run's lock before a new training starts; the verl launcher
calls it itself at the same point of its run.
"""

from __future__ import annotations

import json
from pathlib import Path

from acerl.config import Config, Run
from acerl.errors import fix_command, reading
from acerl.models.prepare import check_base_folder
from acerl.pipeline.stages import Job, param_values, params_record_file, spec
from acerl.train.finished import StaleInputError, shown_differences, spec_differences

__all__ = ["check_reused_inputs"]


def check_reused_inputs(cfg: Config, root: Path | str, run: Run) -> None:
    """Raise :class:`~acerl.train.finished.StaleInputError` when ``data/`` or the run's base model folder records other preparation
    params than ``cfg`` gives (each differing key, old vs new, and the command that rebuilds it), and
    :class:`~acerl.errors.MissingInputError` when this node cannot read the base model folder
    (:func:`acerl.models.prepare.check_base_folder`)."""
    check_base_folder(root, run.model)
    for job in (Job("prepare_data"), Job("prepare_base", run.model)):
        file = params_record_file(root, job)
        if file is None or not file.is_file():
            continue
        rebuild = fix_command(spec(job.stage).subcommand, *(("--model", job.model) if job.model else ()))
        with reading(file, f"rerun {rebuild}"):
            old = json.loads(file.read_text(encoding="utf-8"))
        diffs = spec_differences(old, json.loads(json.dumps(param_values(cfg, job))))
        if diffs:
            raise StaleInputError(
                f"{file.parent} was made for another config than the requested run {run.id} ({file.name}: "
                f"{shown_differences(diffs)}): rebuild it with {rebuild}, or give the config that made it"
            )
