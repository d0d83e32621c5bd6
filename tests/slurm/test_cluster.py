"""A smoke job through sbatch on the local cluster, with the `slurm` profile that ``scripts/slurm_local.sh``
wrote from the site template (start the cluster first: ``sudo scripts/slurm_local.sh start``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.slurm_helpers import (
    SNAKEMAKE,
    LocalCluster,
    run_bounded,
    run_id_of,
    slurm_jobs,
    snakemake_env,
    tail,
)

pytestmark = pytest.mark.slurm

SMOKE_SNAKEFILE = """
rule all:
    input: "out/hello.txt"

rule hello:
    output: "out/hello.txt"
    resources: mem_mb=200, runtime=2
    shell: "echo job=$SLURM_JOB_ID host=$(hostname -s) cpus=$SLURM_CPUS_PER_TASK > {output}"
"""


def test_local_profile_differs_from_the_template_only_where_one_node_must(
    local_cluster: LocalCluster,
) -> None:
    from support.slurm_helpers import REPO

    template = yaml.safe_load((REPO / "profiles" / "slurm-template" / "config.yaml").read_text())
    profile = yaml.safe_load(local_cluster.profile.read_text())
    changed = {k for k in template if template[k] != profile.get(k)}
    assert changed <= {
        "default-resources",
        "jobs",
        "latency-wait",
        "slurm-status-command",
        "slurm-init-seconds-before-status-checks",
        "slurm-no-account",
        "slurm-keep-successful-logs",
    }, changed
    assert profile["default-resources"] == {"slurm_partition": "debug"}
    assert profile["slurm-status-command"] == ("sacct" if local_cluster.accounting else "squeue")


def test_smoke_job_runs_through_sbatch(local_cluster: LocalCluster, tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SMOKE_SNAKEFILE)
    proc = run_bounded(
        [str(SNAKEMAKE), "--profile", "slurm", "--workflow-profile", "none", "all"],
        cwd=tmp_path,
        env=snakemake_env(local_cluster.xdg_config_home),
        timeout_s=240,
        log=tmp_path / "snakemake.log",
    )
    assert proc.returncode == 0, tail(proc.stdout)
    fields = dict(item.split("=", 1) for item in (tmp_path / "out" / "hello.txt").read_text().split())
    assert fields["job"].isdigit(), fields  # the rule ran inside a SLURM job

    jobs = slurm_jobs(local_cluster, run_id_of(proc.stdout))
    assert [(j.job_id, j.rule, j.state, j.exit_code) for j in jobs] == [
        (fields["job"], "hello", "COMPLETED", "0:0")
    ]
    assert fields["cpus"] == "1"  # threads -> --cpus-per-task

    slurm_log = tmp_path / ".snakemake" / "slurm_logs" / "rule_hello" / f"{fields['job']}.log"
    assert slurm_log.is_file(), f"no SLURM log at {slurm_log}"
    assert "Finished jobid: 0 (Rule: hello)" in slurm_log.read_text()
