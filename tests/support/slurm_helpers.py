"""Helpers for the SLURM tests: a copy of the workflow, bounded Snakemake runs, dry-run parsing, the local
cluster (``scripts/slurm_local.sh``) and its job records."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from support.study import (  # noqa: F401  (re-exported for the SLURM tests)
    KILL_GRACE_S,
    REPO,
    SNAKEMAKE,
    TEST_CONFIG_ARG,
    copy_workflow,
    run_bounded,
    snakemake_env,
    tail,
)

INSTALLER = REPO / "scripts" / "install_slurm_profile.sh"


# ------------------------------------------------------------------------------------------------ dry runs
@dataclass
class DryRunJob:
    """One job of ``snakemake -n`` output: its rule, wildcards and resources (values as printed)."""

    rule: str
    local: bool
    wildcards: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)


_JOB_START = re.compile(r"^(local)?rule (\w+):$")


def _pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(", "):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_dry_run(text: str) -> list[DryRunJob]:
    """The jobs of a dry run's job blocks (``rule X:`` / ``localrule X:`` then indented ``key: value``)."""
    jobs: list[DryRunJob] = []
    current: DryRunJob | None = None
    for line in text.splitlines():
        start = _JOB_START.match(line)
        if start:
            current = DryRunJob(rule=start.group(2), local=bool(start.group(1)))
            jobs.append(current)
        elif current is not None and line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "wildcards":
                current.wildcards = _pairs(value)
            elif key == "resources":
                current.resources = _pairs(value)
        elif current is not None and not line.startswith("    "):
            current = None
    return jobs


# --------------------------------------------------------------------------------------- the local cluster
@dataclass(frozen=True)
class LocalCluster:
    """The cluster ``scripts/slurm_local.sh start`` runs, and the `slurm` profile it wrote."""

    state_dir: Path
    accounting: bool
    proctrack: str

    @property
    def xdg_config_home(self) -> Path:
        """Point ``XDG_CONFIG_HOME`` here and ``snakemake --profile slurm`` finds the cluster's profile."""
        return self.state_dir / "xdg"

    @property
    def profile(self) -> Path:
        return self.xdg_config_home / "snakemake" / "slurm" / "config.yaml"

    @property
    def status_command(self) -> str:
        """How the profile polls job states: ``sacct`` or ``squeue``."""
        return str(yaml.safe_load(self.profile.read_text())["slurm-status-command"])


def find_local_cluster() -> LocalCluster | str:
    """The running local cluster, or the reason why there is none (a pytest skip message)."""
    if shutil.which("sinfo") is None:
        return "no SLURM cluster: sinfo is not installed (start one with: sudo scripts/slurm_local.sh start)"
    try:
        proc = subprocess.run(
            ["timeout", "-k", "2", "10", "sinfo", "-h", "-o", "%a %t"], capture_output=True, text=True
        )
    except OSError as e:
        return f"no SLURM cluster: sinfo failed to run ({e})"
    states = proc.stdout.split()
    if proc.returncode != 0 or not states or states[0] != "up":
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"exit code {proc.returncode}"
        return (
            f"no SLURM cluster reachable (sinfo: {reason}); start one with: sudo scripts/slurm_local.sh start"
        )
    if not any(s.startswith(("idle", "mix", "alloc", "comp")) for s in states[1:]):
        return f"SLURM node not usable (sinfo states: {' '.join(states[1:])})"
    state_dir = Path(os.environ.get("ACERL_SLURM_DIR", "/tmp/acerl-slurm"))
    cluster = LocalCluster(state_dir, accounting=False, proctrack="linuxproc")
    if not cluster.profile.is_file():
        return f"no profile for the local cluster at {cluster.profile} (run scripts/slurm_local.sh start)"
    config = scontrol_config()
    return LocalCluster(
        state_dir,
        accounting=config.get("AccountingStorageType", "accounting_storage/none")
        != "accounting_storage/none",
        proctrack=config.get("ProctrackType", "").removeprefix("proctrack/"),
    )


def scontrol_config() -> dict[str, str]:
    out = subprocess.run(
        ["timeout", "-k", "2", "10", "scontrol", "show", "config"], capture_output=True, text=True
    ).stdout
    config: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    return config


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    comment: str  # the plugin's job comment: rule_<rule>_wildcards_<values joined by _>
    exit_code: str  # "<code>:<signal>"

    @property
    def rule(self) -> str:
        return self.comment.removeprefix("rule_").split("_wildcards_")[0]


RUN_ID = re.compile(r"SLURM run ID: (\S+)")


def run_id_of(snakemake_output: str) -> str:
    """The executor's run id (every job of one Snakemake invocation is submitted under this job name)."""
    match = RUN_ID.search(snakemake_output)
    assert match, "no 'SLURM run ID' in the Snakemake output: did it use the slurm executor?"
    return match.group(1)


def slurm_jobs(cluster: LocalCluster, job_name: str) -> list[SlurmJob]:
    """The jobs submitted under ``job_name``: from ``sacct`` with accounting, else ``squeue`` + ``scontrol``."""
    if cluster.accounting:
        out = _check(
            [
                "sacct",
                "-X",
                "-n",
                "-P",
                "-S",
                "now-1days",
                "--name",
                job_name,
                "-o",
                "JobIDRaw,State,Comment,ExitCode",
            ]
        )
        rows = [line.split("|") for line in out.splitlines() if line.strip()]
        return [SlurmJob(r[0], r[1].split()[0], r[2], r[3]) for r in rows]
    out = _check(["squeue", "-h", "--states=all", "--name", job_name, "-o", "%i|%T|%k"])
    jobs = []
    for line in out.splitlines():
        if not line.strip():
            continue
        job_id, state, comment = line.split("|", 2)
        detail = _check(["scontrol", "show", "job", job_id])
        match = re.search(r"\bExitCode=(\S+)", detail)
        jobs.append(SlurmJob(job_id, state, comment, match.group(1) if match else "?"))
    return jobs


def _check(cmd: list[str]) -> str:
    proc = subprocess.run(["timeout", "-k", "2", "20", *cmd], capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed: {proc.stderr.strip()}"
    return proc.stdout
