"""Where every artifact lives: the one place paths are derived (Snakemake rules, DVC stages and the CLI
all call these functions; no path is typed twice).

Layout under the work directory (``root``)::

    data/<split>.jsonl                               prepare_data
    data/real_data_report.json                       prepare_data (data.kind: real)
    data/verl/<model>/{train,val}.parquet            prepare_verl_data (compute.backend: verl)
    models/base/<model>/                             prepare_base (HF folder, safetensors)
    runs/<model>/<method>/seed<s>/final/             train_policy (HF folder of the final policy)
    runs/<model>/<method>/seed<s>/checkpoints/       resumable training state (never a rule output)
    runs/<model>/<method>/seed<s>/diag/step_<N>/     diagnostic checkpoints (HF folders)
    runs/<model>/<method>/seed<s>/metrics.jsonl      per-step training metrics
    runs/<model>/<method>/seed<s>/dvclive/           the same metrics as dvclive plots (local backend)
    runs/<model>/<method>/seed<s>/verl_logs/         verl's own per-step metrics (verl backend)
    runs/<model>/<method>/seed<s>/verl_command.json  the last verl launch's command line (verl backend)
    runs/<model>/<method>/seed<s>/diag_raw/          verl's raw actor snapshots at diagnostic steps (verl backend)
    tracker/<model>/<method>/seed<s>/                TensorBoard event files (compute.tracker, or
                                                     ``acerl report training --tensorboard``)
    generations/<benchmark>/<run>.jsonl.gz           sample
    scored/<benchmark>/<run>.parquet                 grade
    metrics/<benchmark>/<run>.json                   passk
    metrics/<benchmark>/<run>.curve.tsv              passk (rows ``k, pass_at_k``: ``dvc plots``)
    diagnostics/<run>.json                           diagnose
    diagnostics/<model>/<method>/.seed<s>.json.partial   records of the checkpoints diagnosed so far (resume)
    results/tables/, results/figures/                report
    config/paper_results/                            the paper's published numbers (tracked; the report reads them)
    results/report.md, results/compute.md            report (compute: from the benchmark TSVs below)
    benchmarks/logs/<rule>/<job>.tsv                 Snakemake's benchmark of each job (compute accounting)
    logs/<rule>/<job>.log                            each Snakemake job's output

``<run>`` is ``<model>/<method>/seed<s>``; the untrained base model is ``<model>/base/seed0`` and its policy
folder is the base model folder itself.
"""

from __future__ import annotations

import re
from pathlib import Path

from acerl.config import Run


def data_file(root: Path | str, split: str) -> Path:
    return Path(root) / "data" / f"{split}.jsonl"


def real_data_report_file(root: Path | str) -> Path:
    """Row counts, de-duplication and held-out summary of the last real-data prepare."""
    return Path(root) / "data" / "real_data_report.json"


def verl_data_dir(root: Path | str, model: str) -> Path:
    """verl's parquet files of one model, rendered with its prompt template."""
    return Path(root) / "data" / "verl" / model


def verl_train_file(root: Path | str, model: str) -> Path:
    return verl_data_dir(root, model) / "train.parquet"


def verl_val_file(root: Path | str, model: str) -> Path:
    return verl_data_dir(root, model) / "val.parquet"


def base_model_dir(root: Path | str, model: str) -> Path:
    return Path(root) / "models" / "base" / model


def run_dir(root: Path | str, run: Run) -> Path:
    return Path(root) / "runs" / run.model / run.method / f"seed{run.seed}"


def run_lock_file(root: Path | str, run: Run) -> Path:
    """The lock ``acerl train`` holds while it works on the run (one trainer per run)."""
    return run_dir(root, run) / "train.lock"


def run_spec_file(root: Path | str, run: Run) -> Path:
    """The settings a run was (last) started with: what decides whether its checkpoints can be resumed."""
    return run_dir(root, run) / "run_spec.json"


def software_file(root: Path | str, run: Run) -> Path:
    """The package versions and commit of each launch of a run (:func:`acerl.pipeline.provenance.record_launch`)."""
    return run_dir(root, run) / "software.json"


def policy_dir(root: Path | str, run: Run) -> Path:
    """The HF folder evaluated for a run: the final policy, or the base model for ``method == 'base'``."""
    if run.is_base:
        return base_model_dir(root, run.model)
    return run_dir(root, run) / "final"


def model_folder_command(folder: Path | str) -> list[str] | None:
    """``[subcommand, *args]`` of the ``acerl`` command that writes the model folder ``folder``: a base model
    (``models/base/<model>``) or a run's final policy (``runs/<model>/<method>/seed<s>/final``), told by its
    place in this layout; ``None`` for any other folder."""
    parts = Path(folder).parts
    if len(parts) >= 3 and parts[-3:-1] == ("models", "base"):
        return ["prepare-base", "--model", parts[-1]]
    if (
        len(parts) >= 5
        and parts[-5] == "runs"
        and parts[-1] == "final"
        and re.fullmatch(r"seed\d+", parts[-2])
    ):
        return [
            "train",
            "--model",
            parts[-4],
            "--method",
            parts[-3],
            "--seed",
            parts[-2].removeprefix("seed"),
        ]
    return None


def checkpoints_dir(root: Path | str, run: Run) -> Path:
    return run_dir(root, run) / "checkpoints"


def diag_dir(root: Path | str, run: Run) -> Path:
    return run_dir(root, run) / "diag"


def diag_step_dir(root: Path | str, run: Run, step: int) -> Path:
    return diag_dir(root, run) / f"step_{step:06d}"


def train_metrics_file(root: Path | str, run: Run) -> Path:
    return run_dir(root, run) / "metrics.jsonl"


def tracker_dir(root: Path | str, run: Run) -> Path:
    """The run's experiment-tracker folder (``compute.tracker``: TensorBoard event files, or wandb's files):
    ``tracker/<model>/<method>/seed<s>``, so ``tensorboard --logdir tracker`` names each run by its id."""
    return Path(root) / "tracker" / run.model / run.method / f"seed{run.seed}"


def live_dir(root: Path | str, run: Run) -> Path:
    """The run's dvclive folder (``plots/metrics/<prefix>/<name>.tsv``), rebuilt from ``metrics.jsonl``."""
    return run_dir(root, run) / "dvclive"


def verl_logs_dir(root: Path | str, run: Run) -> Path:
    """verl's per-step metrics (``metrics.jsonl``; earlier attempts are renamed to
    ``metrics.attempt-<UTC time>.jsonl`` because verl's file logger truncates its file on start)."""
    return run_dir(root, run) / "verl_logs"


def verl_command_file(root: Path | str, run: Run) -> Path:
    """The verl command line and environment of the run's last launch (what to rerun by hand)."""
    return run_dir(root, run) / "verl_command.json"


def verl_snapshot_dir(root: Path | str, run: Run) -> Path:
    """Raw (sharded) verl actor snapshots at diagnostic steps, kept apart from verl's checkpoint rotation until
    they are exported to :func:`diag_step_dir` (:mod:`acerl.verl_backend.checkpoints`)."""
    return run_dir(root, run) / "diag_raw"


def generations_file(root: Path | str, benchmark: str, run: Run) -> Path:
    return Path(root) / "generations" / benchmark / run.model / run.method / f"seed{run.seed}.jsonl.gz"


def generations_shard_dir(root: Path | str, benchmark: str, run: Run) -> Path:
    """Partial shards of an interrupted sampling job (merged into :func:`generations_file`)."""
    return Path(root) / "generations" / ".shards" / benchmark / run.model / run.method / f"seed{run.seed}"


def scored_file(root: Path | str, benchmark: str, run: Run) -> Path:
    return Path(root) / "scored" / benchmark / run.model / run.method / f"seed{run.seed}.parquet"


def passk_file(root: Path | str, benchmark: str, run: Run) -> Path:
    return Path(root) / "metrics" / benchmark / run.model / run.method / f"seed{run.seed}.json"


def passk_curve_file(root: Path | str, benchmark: str, run: Run) -> Path:
    """The run's Pass@k curve, rows ``k, pass_at_k`` (what ``dvc plots`` draws; the JSON holds the same)."""
    return Path(root) / "metrics" / benchmark / run.model / run.method / f"seed{run.seed}.curve.tsv"


def diagnostics_file(root: Path | str, run: Run) -> Path:
    return Path(root) / "diagnostics" / run.model / run.method / f"seed{run.seed}.json"


def diagnostics_partial_file(root: Path | str, run: Run) -> Path:
    """Hidden file beside :func:`diagnostics_file` holding the records of the checkpoints diagnosed so far."""
    out = diagnostics_file(root, run)
    return out.with_name(f".{out.name}.partial")


def results_dir(root: Path | str) -> Path:
    return Path(root) / "results"


def paper_results_dir(root: Path | str) -> Path:
    """The paper's published numbers (tracked in the repository, ``config/paper_results/README.md``), which the
    report's "ours vs paper" table reads (:mod:`acerl.report.paper`). An input like the config, so it lives
    beside it: deleting the output folder ``results/`` leaves it in place."""
    return Path(root) / "config" / "paper_results"


def tables_dir(root: Path | str) -> Path:
    return results_dir(root) / "tables"


def figures_dir(root: Path | str) -> Path:
    return results_dir(root) / "figures"


def report_file(root: Path | str) -> Path:
    """A one-page Markdown view of every table and figure."""
    return results_dir(root) / "report.md"


def report_page_file(root: Path | str) -> Path:
    """:func:`report_file` as an HTML page (tables inline, figures embedded): the landing page of the report."""
    return results_dir(root) / "report.html"


def headline_file(root: Path | str) -> Path:
    """The study's result in a few lines (the primary endpoint of each comparison, its interval, where the report
    is): what ``make run`` prints at its end."""
    return results_dir(root) / "headline.txt"


def compute_file(root: Path | str) -> Path:
    """The study's compute accounting (wall, CPU, memory, GPU-hours) from the jobs' benchmark TSVs."""
    return results_dir(root) / "compute.md"


def _job_file(folder: Path, rule: str, parts: tuple[str, ...], suffix: str) -> Path:
    *dirs, last = parts
    return folder / rule / Path(*dirs) / f"{last}{suffix}"


def benchmark_file(root: Path | str, rule: str, *parts: str) -> Path:
    """Snakemake's ``benchmark:`` TSV of one job: ``benchmarks/logs/<rule>/<part>/.../<last part>.tsv``."""
    return _job_file(Path(root) / "benchmarks" / "logs", rule, parts, ".tsv")


def log_file(root: Path | str, rule: str, *parts: str) -> Path:
    """The ``log:`` of one Snakemake job (its command's output): ``logs/<rule>/<part>/.../<last part>.log``."""
    return _job_file(Path(root) / "logs", rule, parts, ".log")
