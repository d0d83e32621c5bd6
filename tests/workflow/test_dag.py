"""The Snakemake DAG: job counts for the paper grid (dry run) and the whole CI-scale study end to end."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.study import REPO, SNAKEMAKE, TEST_CONFIG_ARG, TEST_CONFIG_FILES, copy_workflow, snakemake_env

from acerl.config import load_config
from acerl.pipeline import paths
from acerl.pipeline.stages import main_grid_runs


def snakemake(cwd: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SNAKEMAKE), *args],
        cwd=cwd,
        env=snakemake_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def job_counts(dry_run_stdout: str) -> Counter[str]:
    """Parse the 'Job stats' table of a dry run."""
    table = dry_run_stdout.split("Job stats:", 1)[1]
    counts: Counter[str] = Counter()
    for line in table.splitlines()[3:]:
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if not m:
            break
        if m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts


def expected_counts(config_files: list[Path]) -> Counter[str]:
    cfg = load_config(config_files)
    runs = cfg.runs()
    main = cfg.study.main
    in_main = [
        r for r in runs if r.model in main.models and r.method in main.methods and r.seed in main.seeds
    ]
    # base models and the main grid on every benchmark; the extra alpha-sweep / ablation runs on one
    evaluations = (len(in_main) + len(cfg.base_runs())) * len(cfg.evaluation.benchmarks)
    evaluations += len(runs) - len(in_main)
    return Counter(
        prepare_data=1,
        prepare_base=len({r.model for r in runs + cfg.base_runs()}),
        prepare_verl_data=len({r.model for r in runs}) if cfg.compute.backend == "verl" else 0,
        train_policy=len(runs),
        sample=evaluations,
        grade=evaluations,
        passk=evaluations,
        diagnose=len(cfg.diagnostic_runs()),
        report=1,
        all=1,
    )


def test_paper_grid_dry_run_job_counts(tmp_path: Path) -> None:
    wd = copy_workflow(tmp_path)
    proc = snakemake(wd, "-n", "all", "--configfile", "config/paper.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = job_counts(proc.stdout)
    expected = expected_counts([REPO / "config/config.yaml", REPO / "config/paper.yaml"])
    assert counts == expected
    # the paper's grid: 3 models x 4 methods x 5 seeds + 4 new alphas (seed 0; alpha = 0 is the main grid's GRPO
    # run, alpha = 1.0 its ACE-GRPO run) + ACE-ReLU over the 5 main seeds (every Table 3 row the same seeds)
    assert counts["train_policy"] == 3 * 4 * 5 + 4 + 5
    dag = proc.stdout
    assert "ace_grpo-alpha0/" not in dag and "ace_grpo-alpha0.1/seed0" in dag  # no alpha = 0 training job
    assert all(f"qwen25_math_7b/ace_grpo_relu/seed{s}" in dag for s in range(5))
    assert (
        counts["sample"] == (60 + 3) * 2 + 9
    )  # the 9 sweep / ablation-only runs: MATH-500 only (Tables 3-4)
    assert counts["diagnose"] == 2 * 2 * 1


def test_gpu_config_dry_run_job_counts(tmp_path: Path) -> None:
    """config/gpu.yaml (the one-GPU study, docs/gpu.md) plans the whole study: 4 methods x 5 seeds on the
    small model, the alpha sweep's 4 alphas besides 0 (the GRPO run) and 1 (the ACE-GRPO run), and the ReLU
    ablation on 5 seeds."""
    wd = copy_workflow(tmp_path)
    proc = snakemake(wd, "-n", "all", "--configfile", "config/gpu.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = job_counts(proc.stdout)
    assert counts == expected_counts([REPO / "config/config.yaml", REPO / "config/gpu.yaml"])
    assert counts["train_policy"] == 4 * 5 + 4 + 5 and counts["prepare_base"] == 1
    assert counts["diagnose"] == 2 * 5


def test_snakemake_config_override_is_refused(tmp_path: Path) -> None:
    wd = copy_workflow(tmp_path)
    proc = snakemake(wd, "-n", "all", "--config", "name=other")
    assert proc.returncode != 0
    assert "--configfile" in proc.stderr + proc.stdout


def test_snakemake_config_override_of_an_unknown_key_is_refused_with_the_fix(tmp_path: Path) -> None:
    """``--config seed=3`` (no such key) is refused as every ``--config`` override is, not blamed on
    config/config.yaml. (A dotted key, ``--config a.b=1``, never reaches the workflow: Snakemake's own parser
    rejects it; README says so.)"""
    wd = copy_workflow(tmp_path)
    proc = snakemake(wd, "-n", "all", "--config", "seed=3")
    assert proc.returncode != 0
    assert "--configfile FILE" in proc.stderr + proc.stdout
    assert "config/config.yaml: invalid config" not in proc.stderr + proc.stdout


def test_a_failed_report_keeps_the_previous_report(tmp_path: Path) -> None:
    """A truncated result file fails the report job (exit 4, the message names the file and the command that writes it again); Snakemake
    puts the previous tables, figures, compute.md and report.md back instead of deleting them."""
    wd = copy_workflow(tmp_path)
    cfg = load_config([wd / f for f in TEST_CONFIG_FILES])
    previous = {"results/tables/t.md": "table\n", "results/figures/f.png": "figure\n",
                "results/compute.md": "compute\n", "results/report.md": "report\n"}  # fmt: skip
    for rel, text in previous.items():
        (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        (wd / rel).write_text(text)
    for run in main_grid_runs(cfg):  # the training-dynamics figure's inputs: present, older than the results
        paths.policy_dir(wd, run).mkdir(parents=True, exist_ok=True)
    results = [paths.passk_file(wd, b, r) for b, r in cfg.evaluations()]
    results += [paths.diagnostics_file(wd, r) for r in cfg.diagnostic_runs()]
    for path in results:  # newer than the report: every file cut short, as by a full disk
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"benchmark": "synth')
    proc = snakemake(wd, "-c1", TEST_CONFIG_ARG, "report", timeout=600)
    log = (wd / "logs" / "report" / "report.log").read_text()
    assert proc.returncode != 0
    assert (
        "acerl report: bad input:" in log and "truncated or corrupt" in log and "--forcerun report" in log
    ), log
    for rel, text in previous.items():
        assert (wd / rel).read_text() == text, rel


@pytest.mark.slow
def test_whole_dag_on_test_config(ci_study: Path) -> None:
    """snakemake -c2 all on config/test.yaml (the session's ``ci_study``): every Pass@k file, diagnostic,
    table and figure, then nothing left to do."""
    wd = ci_study
    cfg = load_config([wd / f for f in TEST_CONFIG_FILES])
    for bench, run in cfg.evaluations():
        record = json.loads(paths.passk_file(wd, bench, run).read_text())
        assert set(map(int, record["pass_at_k"])) == set(cfg.evaluation.ks)
        values = [record["pass_at_k"][str(k)] for k in sorted(cfg.evaluation.ks)]
        assert values == sorted(values), f"pass@k must grow with k: {run.id} {bench} {values}"
    for run in cfg.diagnostic_runs():
        diag = json.loads(paths.diagnostics_file(wd, run).read_text())
        assert [r["step"] for r in diag["records"]] == cfg.diagnostic_steps(run.model)
    tables = {p.name for p in paths.tables_dir(wd).iterdir()}
    figures = {p.name for p in paths.figures_dir(wd).iterdir()}
    for bench in cfg.evaluation.benchmarks:
        assert any(bench in t and t.endswith(".tex") for t in tables), tables
        assert any(bench in t and t.endswith(".md") for t in tables), tables
    assert any(f.endswith(".pdf") for f in figures) and any(f.endswith(".png") for f in figures)
    again = snakemake(wd, "-n", "all", TEST_CONFIG_ARG)
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr


def test_config_files_enter_the_commands_relative_to_the_project(tmp_path: Path) -> None:
    """Snakemake makes --configfile absolute; the jobs' commands (and so their recorded params) must not carry
    the checkout's location, or a copied, cloned or moved project would rerun every job."""
    wd = copy_workflow(tmp_path)
    proc = snakemake(wd, "-n", "-p", "all", f"--configfile={wd / 'config' / 'test.yaml'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "acerl prepare-data --config config/config.yaml --config config/test.yaml --root ." in out
    assert str(tmp_path) not in out.split("Job stats:")[1]


def test_portable_path(tmp_path: Path) -> None:
    from acerl.pipeline.stages import portable_path

    assert portable_path(tmp_path / "config" / "x.yaml", tmp_path) == "config/x.yaml"
    assert portable_path("/tmp/elsewhere/x.yaml", tmp_path) == "/tmp/elsewhere/x.yaml"


def test_the_workflow_prints_its_config_files_in_merge_order(tmp_path: Path) -> None:
    """Snakemake's banner lists ``--configfile`` files before config/config.yaml, the reverse of how they merge."""
    wd = copy_workflow(tmp_path)
    proc = snakemake(wd, "-n", "all", TEST_CONFIG_ARG)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "acerl: config files, later ones win: config/config.yaml < config/test.yaml"
        in proc.stdout + proc.stderr
    )
