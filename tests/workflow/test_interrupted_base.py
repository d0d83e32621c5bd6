"""A base model that an interrupted rebuild left missing is made again by the next ``snakemake all``.

Snakemake deletes a job's outputs before it runs the job. Ctrl-C during ``prepare_base`` (say under
``--forcerun prepare_base`` in a finished study) therefore leaves ``models/base/<model>`` gone while every result
made from it is still there; a base model that is only an intermediate would then be left missing ("Nothing to
be done"). The state is built here from the stage table: every output of the CI-scale study present, newer than
every input, except the base model.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from support.study import SNAKEMAKE, TEST_CONFIG_ARG, TEST_CONFIG_FILES, copy_workflow, snakemake_env

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.pipeline.stages import job_outputs, study_jobs


def _finished_study_without_its_base(wd: Path) -> Path:
    cfg = load_config([wd / f for f in TEST_CONFIG_FILES])
    (model,) = {r.model for r in cfg.runs() + cfg.base_runs()}
    base = paths.base_model_dir(".", model).as_posix()
    later = time.time() + 60  # every output newer than the project's own files (configs, paper results)
    for job in study_jobs(cfg):
        for out in job_outputs(cfg, job):
            if out.path == base:
                continue
            path = wd / out.path
            if out.directory:
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("made\n")
            os.utime(path, (later, later))
    return wd / base


def test_a_base_model_gone_after_an_interrupted_rebuild_is_made_again(tmp_path: Path) -> None:
    wd = copy_workflow(tmp_path)
    base = _finished_study_without_its_base(wd)
    proc = subprocess.run(
        [str(SNAKEMAKE), "-n", "all", TEST_CONFIG_ARG],
        cwd=wd,
        env=snakemake_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Nothing to be done" not in out
    assert "rule prepare_base:" in out, out
    assert f"reason: Missing output files: {base.relative_to(wd).as_posix()}" in out, out
