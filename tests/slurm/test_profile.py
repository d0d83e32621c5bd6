"""The site profile template, its installer, and what the paper grid asks SLURM for. No cluster needed: the
installed profile is resolved by ``snakemake --profile slurm`` through ``XDG_CONFIG_HOME``, and the submissions
are recorded by a stand-in ``sbatch`` on PATH."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from support.slurm_helpers import (
    INSTALLER,
    REPO,
    SNAKEMAKE,
    DryRunJob,
    copy_workflow,
    parse_dry_run,
    run_bounded,
    snakemake_env,
    tail,
)

from acerl.config import Config, Run, load_config
from acerl.pipeline import paths

TEMPLATE = REPO / "profiles" / "slurm-template" / "config.yaml"
PARTITION, ACCOUNT = "gpu-test", "lab_test"
PAPER = "config/paper.yaml"
TWO_NODES = "config/paper_2node.yaml"  # Qwen3-8B-Base on 2 nodes: the multi-node sbatch path


def install(xdg: Path, *args: str, path_prefix: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACERL_SLURM_")}
    env["XDG_CONFIG_HOME"] = str(xdg)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["bash", str(INSTALLER), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def installed(xdg: Path) -> Path:
    return xdg / "snakemake" / "slurm" / "config.yaml"


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# ------------------------------------------------------------------------------------------- the installer
def test_template_marks_site_values_as_placeholders() -> None:
    profile = yaml.safe_load(TEMPLATE.read_text())
    assert profile["executor"] == "slurm"
    assert profile["default-resources"] == {
        "slurm_partition": "<your-partition>",
        "slurm_account": "<your-account>",
    }
    assert profile["retries"] >= 1 and profile["rerun-incomplete"] is True
    assert profile["slurm-status-command"] in {"sacct", "squeue"}


def test_install_fills_in_partition_and_account(tmp_path: Path) -> None:
    proc = install(tmp_path, "--partition", PARTITION, "--account", ACCOUNT, "--status-command", "sacct")
    assert proc.returncode == 0, proc.stderr
    profile = yaml.safe_load(installed(tmp_path).read_text())
    assert profile["default-resources"] == {"slurm_partition": PARTITION, "slurm_account": ACCOUNT}
    assert "<your-" not in installed(tmp_path).read_text()
    template = yaml.safe_load(TEMPLATE.read_text())
    changed = {k for k in template if template[k] != profile[k]}
    assert changed == {"default-resources"}  # nothing else differs from the template


def test_install_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert install(tmp_path, "--partition", PARTITION, "--account", ACCOUNT).returncode == 0
    before = installed(tmp_path).read_text()
    proc = install(tmp_path, "--partition", "other", "--account", ACCOUNT)
    assert proc.returncode == 1 and "--force" in proc.stderr
    assert installed(tmp_path).read_text() == before
    proc = install(tmp_path, "--partition", "other", "--account", ACCOUNT, "--force")
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(installed(tmp_path).read_text())["default-resources"]["slurm_partition"] == "other"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--account", ACCOUNT], "no partition"),
        (["--partition", PARTITION], "no account"),
        (["--partition", "a b", "--account", ACCOUNT], "may only contain"),
        (["--partition", PARTITION, "--account", "x;rm -rf /"], "may only contain"),
        (["--partition", PARTITION, "--account", ACCOUNT, "--no-account"], "not both"),
        (
            ["--partition", PARTITION, "--account", ACCOUNT, "--status-command", "qstat"],
            "sacct, squeue or auto",
        ),
    ],
)
def test_install_rejects_missing_or_unsafe_values(tmp_path: Path, args: list[str], message: str) -> None:
    proc = install(tmp_path, *args)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    assert not installed(tmp_path).exists()


def test_install_refuses_a_placeholder_it_cannot_fill(tmp_path: Path) -> None:
    template = tmp_path / "template.yaml"
    template.write_text(
        TEMPLATE.read_text().replace("default-resources:\n", 'default-resources:\n  qos: "<your-qos>"\n')
    )
    proc = install(tmp_path, "--partition", PARTITION, "--account", ACCOUNT, "--template", str(template))
    assert proc.returncode == 1 and "<your-qos>" in proc.stderr, proc.stderr
    assert not installed(tmp_path).exists() and not list(installed(tmp_path).parent.glob(".config.yaml.*"))


def test_install_without_account(tmp_path: Path) -> None:
    assert install(tmp_path, "--partition", PARTITION, "--no-account").returncode == 0
    profile = yaml.safe_load(installed(tmp_path).read_text())
    assert profile["default-resources"] == {"slurm_partition": PARTITION}
    assert profile["slurm-no-account"] is True


def test_install_picks_squeue_status_when_accounting_is_disabled(tmp_path: Path) -> None:
    """``--status-command auto`` (the default) asks sacct; a cluster without slurmdbd gets squeue."""
    fake = tmp_path / "bin"
    fake.mkdir()
    write_script(fake / "sacct", "#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n")
    write_script(fake / "scontrol", "#!/bin/sh\necho 'MinJobAge               = 300 sec'\n")
    proc = install(tmp_path, "--partition", PARTITION, "--account", ACCOUNT, path_prefix=fake)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(installed(tmp_path).read_text())["slurm-status-command"] == "squeue"
    write_script(fake / "sacct", "#!/bin/sh\nexit 0\n")
    proc = install(tmp_path, "--partition", PARTITION, "--account", ACCOUNT, "--force", path_prefix=fake)
    assert yaml.safe_load(installed(tmp_path).read_text())["slurm-status-command"] == "sacct"


# ----------------------------------------------------------------------------- the paper grid, dry-run
@pytest.fixture(scope="module")
def paper_cfg() -> Config:
    return load_config([REPO / "config" / "config.yaml", REPO / PAPER])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(XDG_CONFIG_HOME with the installed `slurm` profile, a copy of the workflow)."""
    base = tmp_path_factory.mktemp("site")
    xdg = base / "xdg"
    proc = install(xdg, "--partition", PARTITION, "--account", ACCOUNT, "--status-command", "sacct")
    assert proc.returncode == 0, proc.stderr
    return xdg, copy_workflow(base / "wf")


@pytest.fixture(scope="module")
def paper_dry_run(site: tuple[Path, Path]) -> tuple[str, list[DryRunJob]]:
    xdg, wf = site
    proc = run_bounded(
        [str(SNAKEMAKE), "--profile", "slurm", "-n", f"--configfile={PAPER}", "all"],
        cwd=wf,
        env=snakemake_env(xdg),
        timeout_s=300,
    )
    assert proc.returncode == 0, tail(proc.stdout)
    return proc.stdout, parse_dry_run(proc.stdout)


def test_dry_run_resolves_the_installed_profile(paper_dry_run: tuple[str, list[DryRunJob]]) -> None:
    text, jobs = paper_dry_run
    assert "Using profiles slurm and workflow specific profile profiles/default" in text
    remote = [j for j in jobs if not j.local]
    assert remote, "no jobs in the dry run"
    for job in remote:
        assert job.resources.get("slurm_partition") == PARTITION, job
        assert job.resources.get("slurm_account") == ACCOUNT, job


def test_paper_grid_requests_gpus_and_nodes_from_the_config(
    paper_dry_run: tuple[str, list[DryRunJob]], paper_cfg: Config
) -> None:
    _, jobs = paper_dry_run
    train = [j for j in jobs if j.rule == "train_policy"]
    assert len(train) == len(paper_cfg.runs())
    nodes_seen = set()
    for job in train:
        want = paper_cfg.resources("train_policy", job.wildcards["model"])
        assert int(job.resources["gpus"]) == want.gpus == 8, job
        assert int(job.resources["nodes"]) == want.nodes, job
        assert int(job.resources["mem_mb"]) == want.mem_mb and int(job.resources["runtime"]) == want.runtime
        assert job.resources["slurm_extra"] == "--signal=TERM@300"
        nodes_seen.add((job.wildcards["model"], want.nodes))
    assert ("qwen3_8b_base", 1) in nodes_seen and ("qwen25_math_7b", 1) in nodes_seen  # one node each
    for rule in ("sample", "diagnose"):
        gpus = {int(j.resources["gpus"]) for j in jobs if j.rule == rule}
        assert gpus == {1}, (rule, gpus)


# --------------------------------------------------------------------- the sbatch calls of the paper grid
FAKE_SBATCH = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_SBATCH_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
print("fake sbatch: not submitting", file=sys.stderr)
sys.exit(1)
"""
FAKE_SACCTMGR = f"#!/bin/sh\necho {ACCOUNT}\n"


def _sbatch_calls(site: tuple[Path, Path], cfg: Config, tmp_path: Path) -> dict[str, list[str]]:
    """Run Snakemake with a recording ``sbatch`` for one 1-node and one 2-node training run and a base-model
    sampling job (their inputs faked); returns the sbatch arguments by job comment."""
    xdg, wf = site
    fake = tmp_path / "bin"
    fake.mkdir()
    write_script(fake / "sbatch", FAKE_SBATCH)
    write_script(fake / "sacctmgr", FAKE_SACCTMGR)
    for split in cfg.data_splits:  # every prepare_data output, so that only the targets need to run
        paths.data_file(wf, split).parent.mkdir(parents=True, exist_ok=True)
        paths.data_file(wf, split).write_text("")
    for model in ("qwen25_math_7b", "qwen3_8b_base"):
        paths.base_model_dir(wf, model).mkdir(parents=True, exist_ok=True)
        for verl_file in (
            paths.verl_train_file(wf, model),
            paths.verl_val_file(wf, model),
        ):  # prepare_verl_data
            verl_file.parent.mkdir(parents=True, exist_ok=True)
            verl_file.write_text("")
    targets = [
        str(paths.policy_dir(".", Run("qwen25_math_7b", "grpo", 0))),
        str(paths.policy_dir(".", Run("qwen3_8b_base", "grpo", 0))),
        str(paths.generations_file(".", "math500", Run("qwen25_math_7b", "base", 0))),
    ]
    env = snakemake_env(xdg)
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    env["FAKE_SBATCH_LOG"] = str(tmp_path / "sbatch.jsonl")
    proc = run_bounded(
        [
            str(SNAKEMAKE),
            "--profile",
            "slurm",
            "--configfile",
            PAPER,
            TWO_NODES,
            "--retries",
            "0",
            "--slurm-init-seconds-before-status-checks",
            "1",
            *targets,
        ],
        cwd=wf,
        env=env,
        timeout_s=300,
    )
    assert proc.returncode != 0, "the fake sbatch refuses every job, so Snakemake must fail"
    log = tmp_path / "sbatch.jsonl"
    assert log.is_file(), f"sbatch was never called:\n{tail(proc.stdout)}"
    calls = {}
    for line in log.read_text().splitlines():
        argv = json.loads(line)
        calls[argv[argv.index("--comment") + 1]] = argv
    return calls


@pytest.fixture(scope="module")
def sbatch_calls(
    site: tuple[Path, Path], paper_cfg: Config, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[str]]:
    two_nodes = load_config([REPO / "config" / "config.yaml", REPO / PAPER, REPO / TWO_NODES])
    return _sbatch_calls(site, two_nodes, tmp_path_factory.mktemp("sbatch"))


def _options(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv if not a.startswith("--wrap"))


def test_sbatch_gets_partition_account_nodes_memory_time_and_signal(
    sbatch_calls: dict[str, list[str]],
) -> None:
    two_nodes = load_config([REPO / "config" / "config.yaml", REPO / PAPER, REPO / TWO_NODES])
    for model, nodes in (("qwen25_math_7b", 1), ("qwen3_8b_base", 2)):
        argv = sbatch_calls[f"rule_train_policy_wildcards_{model}_grpo_0"]
        want = two_nodes.resources("train_policy", model)
        assert want.nodes == nodes
        opts = _options(argv)
        for expected in (
            f"-p {PARTITION}",
            f"-A {ACCOUNT}",
            f"--nodes={nodes}",
            f"--mem {want.mem_mb}",
            f"-t {want.runtime}",
            f"--cpus-per-task={want.threads}",
            "--signal=TERM@300",
        ):
            assert expected in opts, (expected, opts)


def test_sbatch_requests_the_gpus_per_node(sbatch_calls: dict[str, list[str]], paper_cfg: Config) -> None:
    """The GPUs per node, and one task: the plugin's default ``--ntasks-per-gpu=1`` would ask for 8 tasks of
    ``--cpus-per-task`` CPUs each (512 CPUs for the paper's training job), which no node has, and SLURM refuses
    the job ("Requested node configuration is not available"; the canary test meets it on the local cluster)."""
    for model in ("qwen25_math_7b", "qwen3_8b_base"):
        opts = _options(sbatch_calls[f"rule_train_policy_wildcards_{model}_grpo_0"])
        assert f"--gres=gpu:{paper_cfg.resources('train_policy', model).gpus}" in opts, opts
        assert "--ntasks-per-gpu" not in opts and "--ntasks=" not in opts, opts  # sbatch's default: 1 task
    opts = _options(sbatch_calls["rule_sample_wildcards_math500_qwen25_math_7b_base_0"])
    assert "--gres=gpu:1" in opts and "--ntasks-per-gpu" not in opts, opts
