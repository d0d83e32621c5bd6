"""The whole CI-scale pipeline (``config/test.yaml``) through SLURM: every job after the prepared inputs runs as a
SLURM job, and the results equal the session's local run of the same study (``tests/study.py``), which started
from the very same prepared data and base model. Slow: about 7 minutes on a 2-core machine."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from slurm_helpers import (
    SNAKEMAKE,
    LocalCluster,
    parse_dry_run,
    run_bounded,
    run_id_of,
    slurm_jobs,
    snakemake_env,
    tail,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TEST_CONFIG = "--configfile=config/test.yaml"
RESULT_GLOBS = ("metrics/**/*.json", "diagnostics/**/*.json")  # pass@k per (benchmark, run); diagnostics


def _results(root: Path) -> dict[str, object]:
    """Every result file's content without its software stamp (what made it, not what it says: the two runs'
    processes may see the checkout differently, e.g. a commit where the other sees none)."""
    return {
        str(p.relative_to(root)): _without_stamp(json.loads(p.read_text()))
        for pattern in RESULT_GLOBS
        for p in root.glob(pattern)
    }


def _without_stamp(data: object) -> object:
    return {k: v for k, v in data.items() if k != "software"} if isinstance(data, dict) else data


def test_pipeline_runs_every_job_on_slurm_and_matches_a_local_run(
    local_cluster: LocalCluster, prepared_inputs: Path, local_reference: Path, tmp_path: Path
) -> None:
    # the inputs (data, SFT'd base model) as the local run had them; prepare_base's SFT is the longest job and
    # a SLURM job like any other (the smoke and preemption tests run jobs through sbatch too)
    wf = tmp_path / "slurm"
    shutil.copytree(prepared_inputs, wf, symlinks=True)
    env = snakemake_env(local_cluster.xdg_config_home)
    dry = run_bounded(
        [str(SNAKEMAKE), "--profile", "slurm", "-n", TEST_CONFIG, "all"], cwd=wf, env=env, timeout_s=300
    )
    assert dry.returncode == 0, tail(dry.stdout)
    planned = Counter(j.rule for j in parse_dry_run(dry.stdout))
    assert planned["train_policy"] > 0 and planned["report"] == 1
    assert not planned["prepare_data"] and not planned["prepare_base"], "the prepared inputs should be reused"

    proc = run_bounded(
        [str(SNAKEMAKE), "--profile", "slurm", TEST_CONFIG, "all"],
        cwd=wf,
        env=env,
        timeout_s=1500,
        log=tmp_path / "snakemake-slurm.log",
    )
    assert proc.returncode == 0, tail(proc.stdout)

    # every job but the target rule `all` (no command: Snakemake runs it itself) ran as a SLURM job of this
    # run, and completed
    local = Counter(j.rule for j in parse_dry_run(proc.stdout) if j.local)
    assert local == Counter({"all": 1})
    planned -= local
    jobs = slurm_jobs(local_cluster, run_id_of(proc.stdout))
    assert Counter(j.rule for j in jobs) == planned
    assert {j.state for j in jobs} == {"COMPLETED"}, [j for j in jobs if j.state != "COMPLETED"]
    logs = Counter(
        p.relative_to(wf / ".snakemake" / "slurm_logs").parts[0].removeprefix("rule_")
        for p in (wf / ".snakemake" / "slurm_logs").rglob("*.log")
    )
    assert logs == planned  # one SLURM log per job (the local profile keeps them)

    # the same results as a local run of the same workflow and config
    ours, reference = _results(wf), _results(local_reference)
    assert reference, f"the local run wrote no {RESULT_GLOBS} files"
    assert sorted(ours) == sorted(reference)
    for name in reference:
        assert ours[name] == reference[name], name
    assert sorted(p.name for p in (wf / "results" / "tables").iterdir()) == sorted(
        p.name for p in (local_reference / "results" / "tables").iterdir()
    )
