"""The base model does not depend on the cores a job holds: ``acerl prepare-base`` under Snakemake (which sets
``OMP_NUM_THREADS`` to the rule's threads) and under DVC (which sets nothing) builds the same folder, byte for
byte (docs/training.md, "Threads")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.study import TEST_CONFIG_FILES, copy_workflow

from acerl.models.sft import METRICS_FILE
from acerl.pipeline import paths

ACERL = Path(sys.executable).parent / "acerl"
SMALL_SFT = ("--set", "models.tiny.sft.steps=8", "--set", "models.tiny.sft.warmup_steps=2")


def _acerl(project: Path, *argv: str, threads: str | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = threads  # what Snakemake sets for a rule's threads
    args = [str(ACERL), *argv, "--config", TEST_CONFIG_FILES[1], *SMALL_SFT, "--root", "."]
    subprocess.run(args, cwd=project, env=env, check=True, capture_output=True)


def _folder(base: Path) -> dict[str, object]:
    """Every file of a base model folder, its bytes; the SFT's metrics without their wall time."""
    files: dict[str, object] = {f.name: f.read_bytes() for f in sorted(base.iterdir())}
    metrics = json.loads(files.pop(METRICS_FILE))  # type: ignore[arg-type]
    metrics.pop("train_seconds")
    files[METRICS_FILE] = metrics
    return files


def test_the_base_model_is_the_same_under_one_and_two_job_threads(tmp_path: Path) -> None:
    """The CI-scale config (``compute.torch_threads: job``) with a short SFT, built as DVC runs it (no
    ``OMP_NUM_THREADS``) and as Snakemake runs a 2-thread rule: the same bytes, recorded as one thread."""
    projects = {name: copy_workflow(tmp_path / name) for name in ("dvc", "snakemake")}
    for project in projects.values():
        _acerl(project, "prepare-data")
    _acerl(projects["dvc"], "prepare-base", "--model", "tiny")
    _acerl(projects["snakemake"], "prepare-base", "--model", "tiny", threads="2")
    dvc, snakemake = (_folder(paths.base_model_dir(p, "tiny")) for p in projects.values())
    assert "model.safetensors" in dvc
    assert dvc == snakemake
    assert dvc[METRICS_FILE]["threads"] == 1  # type: ignore[index]
