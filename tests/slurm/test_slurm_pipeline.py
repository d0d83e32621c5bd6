"""The CI-scale pipeline (``config/test.yaml``) through SLURM: every job after the prepared inputs runs as a SLURM
job, and the results equal the session's local run of the same study (``tests/study.py``), which started from the
very same prepared data and base model. Every rule runs, on a slice of the study's grid (GRPO and ACE-GRPO with
the base model, diagnostics of ACE-GRPO: 23 SLURM jobs of the 46): more runs of the same rules would test SLURM
no further. A run's spec does not depend on the grid, so each result must equal the full local run's file of the
same name. Slow: about 4 minutes on a 2-core machine."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml
from support.slurm_helpers import (
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
# The slice of the grid, written into the copy's config/test.yaml (not a third config file: every job's command
# names its config files, so another file would change every command and rerun the prepared inputs). A run's
# spec, and so its outputs, does not depend on the grid.
SLICE = {
    "main": {"models": ["tiny"], "methods": ["grpo", "ace_grpo"], "seeds": [0], "include_base": True},
    "alpha_sweep": None,
    "ablation": None,
    "diagnostics": {"methods": ["ace_grpo"]},
}
RESULT_GLOBS = ("metrics/**/*.json", "diagnostics/**/*.json")  # pass@k per (benchmark, run); diagnostics


def _results(root: Path) -> dict[str, object]:
    """Every result file's content without its software stamp (what made it, not what it says: the two runs'
    processes may see the checkout differently, e.g. a commit where the other sees none)."""
    return {
        str(p.relative_to(root)): _without_stamp(json.loads(p.read_text()))
        for pattern in RESULT_GLOBS
        for p in root.glob(pattern)
    }


def _slice_the_grid(test_yaml: Path) -> None:
    config = yaml.safe_load(test_yaml.read_text())
    study = config["study"]
    for key, value in SLICE.items():
        study[key] = {**study[key], **value} if isinstance(value, dict) and study.get(key) else value
    test_yaml.write_text(yaml.safe_dump(config, sort_keys=False))


def _without_stamp(data: object) -> object:
    return {k: v for k, v in data.items() if k != "software"} if isinstance(data, dict) else data


def test_pipeline_runs_every_job_on_slurm_and_matches_a_local_run(
    local_cluster: LocalCluster, prepared_inputs: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # the inputs (data, SFT'd base model) as the local run had them; prepare_base's SFT is the longest job and
    # a SLURM job like any other (the smoke and preemption tests run jobs through sbatch too)
    wf = tmp_path / "slurm"
    shutil.copytree(prepared_inputs, wf, symlinks=True)
    _slice_the_grid(wf / "config" / "test.yaml")
    env = snakemake_env(local_cluster.xdg_config_home)
    dry = run_bounded(
        [str(SNAKEMAKE), "--profile", "slurm", "-n", TEST_CONFIG, "all"], cwd=wf, env=env, timeout_s=300
    )
    assert dry.returncode == 0, tail(dry.stdout)
    planned = Counter(j.rule for j in parse_dry_run(dry.stdout))
    assert planned["train_policy"] == 2 and planned["diagnose"] == 1 and planned["report"] == 1
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

    # the same results as the local run of the whole study: every result of the slice, file by file (the
    # local run is asked for only now, so that under scripts/run_tests.sh's parallel sessions the SLURM run
    # overlaps it instead of waiting for it)
    local_reference: Path = request.getfixturevalue("local_reference")
    ours, reference = _results(wf), _results(local_reference)
    assert reference, f"the local run wrote no {RESULT_GLOBS} files"
    runs = {"base", "grpo", "ace_grpo"}
    assert {name for name in ours if name.startswith("metrics/")} == {
        name for name in reference if name.startswith("metrics/") and Path(name).parent.name in runs
    }, "the slice's pass@k files are not those of its runs"
    assert any(name.startswith("diagnostics/") for name in ours)
    for name in ours:
        assert name in reference and ours[name] == reference[name], name
    tables = {p.name for p in (wf / "results" / "tables").iterdir()}
    assert tables and tables <= {p.name for p in (local_reference / "results" / "tables").iterdir()}
