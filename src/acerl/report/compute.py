"""Compute accounting of a study from Snakemake's ``benchmark:`` TSVs: what a reproduction costs.

Every rule writes one TSV per job (:func:`acerl.pipeline.paths.benchmark_file`): wall seconds ``s``, ``cpu_time``
(seconds, user + system of the job's processes), ``max_rss`` (MB, peak resident memory), ... :func:`study_jobs`
lists the jobs of a configured study from the stage table (:mod:`acerl.pipeline.stages`, which the workflow's rules
read), :func:`load_benchmarks` reads their TSVs, and :func:`compute_tables` sums them per rule, per method and
per run, with GPU-hours = wall x the GPUs the job requested (``compute.resources`` /
``compute.model_resources``: ``gpus`` per node x ``nodes``).

What it does not count: the report job itself (its TSV is written after it ends), Snakemake's own process, and
the attempts before a retry (a retried or resumed job's TSV holds its last attempt only). A job run by DVC writes
no TSV; with none present the report keeps the study's previous accounting (:func:`kept_accounting`: the file,
or, where DVC deleted it before rerunning the report, its copy in DVC's cache), or says there is none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import yaml

from acerl.config import BASE_METHOD, Config
from acerl.errors import BadInputError
from acerl.pipeline import stages
from acerl.pipeline.stages import Job, job_benchmark_file, log_parts
from acerl.report.aggregate import MissingData
from acerl.report.inputs import COMPUTE_TITLE
from acerl.report.table_format import Cell, Row, Table

__all__ = [
    "GPU_RULES",
    "study_jobs",
    "load_benchmarks",
    "compute_tables",
    "BENCH_COLUMNS",
    "kept_accounting",
    "dvc_cached_output",
]

log = logging.getLogger(__name__)

GPU_RULES = ("prepare_base", "train_policy", "sample", "diagnose")
"""The rules whose ``resources:`` request ``gpus`` (``workflow/rules/*.smk``; a test keeps the two in step)."""
MULTI_NODE_RULES = ("train_policy",)
"""The rules whose ``resources:`` request ``nodes`` (GPUs requested = gpus per node x nodes)."""
BENCH_COLUMNS = ("rule", "job", "model", "method", "seed", "wall_s", "cpu_s", "max_rss_mb", "gpus")
NOTE = (
    "Wall and CPU time summed over jobs (jobs run in parallel, so the study's elapsed time is shorter); "
    "peak memory = the largest resident set of one job; GPU-hours = wall x GPUs requested "
    "(compute.resources: gpus per node x nodes). From Snakemake's benchmarks/logs/ TSVs (the last "
    "attempt of each job; the report job and Snakemake itself are not counted). CPU time is Snakemake's "
    "sampled cpu_time (every 0.5 s for about a job's first 15 s, then every 30 s), a lower bound: it misses "
    "whatever a job uses after its last sample (up to 30 CPU s per thread; at the embedded scale a third of a "
    "training job) and child processes that end between two samples."
)
SHARED = "(shared)"  # the method label of jobs that belong to no method: data and base-model preparation


NO_ACCOUNTING = "No compute accounting"  # how compute.md starts when no benchmark file was found


def dvc_cached_output(root: Path, path: Path) -> Path | None:
    """The file in DVC's local cache (DVC 3's layout, ``.dvc/cache/files/md5/``) that ``<root>/dvc.lock`` records
    for output ``path``; ``None`` without a lock entry or a cached copy."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return None
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()
    stages_ = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {})
    for out in (o for st in stages_.values() for o in st.get("outs", [])):
        if out.get("path") == rel and out.get("md5"):
            cached = root / ".dvc" / "cache" / "files" / "md5" / out["md5"][:2] / out["md5"][2:]
            return cached if cached.is_file() else None
    return None


def kept_accounting(root: Path, path: Path, study_name: str) -> str | None:
    """The body of the study's previous ``compute.md`` (``path``) when it holds an accounting, else ``None``.

    What the report writes again when no benchmark file is present (a pulled clone, jobs run by DVC): the cost
    of the study, measured where it ran, is kept rather than replaced by "No compute accounting". ``dvc repro``
    deletes the file before it reruns the report, so its copy in DVC's cache (:func:`dvc_cached_output`) stands
    in; ``dvc.lock`` then stays as it was. A file of another study (its ``# Compute: <name>`` header) is not
    kept."""
    source = path if path.is_file() else dvc_cached_output(Path(root), path)
    if source is None:
        return None
    head = f"{COMPUTE_TITLE}{study_name}\n\n"
    text = source.read_text(encoding="utf-8")
    if not text.startswith(head) or text[len(head) :].startswith(NO_ACCOUNTING):
        return None
    return text[len(head) :]


def study_jobs(cfg: Config) -> list[Job]:
    """Every job ``snakemake all`` runs for ``cfg`` (the stage table's) except the report, whose TSV is written
    after it ends."""
    return [job for job in stages.study_jobs(cfg) if job.stage != "report"]


def gpus_requested(cfg: Config, job: Job) -> int:
    """GPUs the job asked SLURM for: the rule's ``gpus`` per node x ``nodes`` (0 for rules that ask none)."""
    if job.stage not in GPU_RULES:
        return 0
    res = cfg.resources(job.stage, job.model)
    return res.gpus * (res.nodes if job.stage in MULTI_NODE_RULES else 1)


def _number(value: object) -> float:
    """A TSV field as a float (Snakemake writes ``NA`` / ``-`` where a job was too short to measure)."""
    out = pd.to_numeric(value, errors="coerce")
    return float(out) if pd.notna(out) else float("nan")


def read_benchmark_tsv(path: Path) -> dict[str, float]:
    """The last row of one Snakemake benchmark TSV: wall and CPU seconds, peak RSS in MB."""
    frame = pd.read_csv(path, sep="\t")
    if frame.empty or "s" not in frame.columns:
        raise BadInputError(
            f"{path}: not a Snakemake benchmark file (no 's' column or no row); delete it (the job's next run "
            "writes it again)"
        )
    row = frame.iloc[-1]
    return {
        "wall_s": _number(row["s"]),
        "cpu_s": _number(row.get("cpu_time")),
        "max_rss_mb": _number(row.get("max_rss")),
    }


def load_benchmarks(cfg: Config, root: str | Path, jobs: Iterable[Job] | None = None) -> pd.DataFrame:
    """One row per job of the study whose benchmark TSV exists (:data:`BENCH_COLUMNS`)."""
    rows = []
    for job in study_jobs(cfg) if jobs is None else jobs:
        path = job_benchmark_file(root, job)
        if not path.is_file():
            continue
        rows.append(
            {
                "rule": job.stage,
                "job": "/".join(log_parts(job)),
                "model": job.model,
                "method": job.run.method if job.run else SHARED,
                "seed": job.run.seed if job.run else None,
                **read_benchmark_tsv(path),
                "gpus": gpus_requested(cfg, job),
            }
        )
    return pd.DataFrame(rows, columns=list(BENCH_COLUMNS))


def _totals(frame: pd.DataFrame) -> dict[str, float]:
    return {
        "jobs": float(len(frame)),
        "wall_s": float(frame["wall_s"].sum()),
        "cpu_s": float(frame["cpu_s"].sum()),
        "max_rss_mb": float(frame["max_rss_mb"].max()) if frame["max_rss_mb"].notna().any() else float("nan"),
        "gpu_h": float((frame["wall_s"] * frame["gpus"]).sum() / 3600.0),
    }


def _unit(total_wall_s: float) -> tuple[str, float]:
    """Hours for a study that took ten hours or more, minutes below (so a CI run does not read 0.00 h)."""
    return ("h", 3600.0) if total_wall_s >= 36000 else ("min", 60.0)


def _row(label: str, t: dict[str, float], scale: float, bold: bool = False) -> Row:
    gib = t["max_rss_mb"] / 1024.0
    return Row(
        label,
        (
            Cell(raw=f"{int(t['jobs'])}"),
            Cell(raw=f"{t['wall_s'] / scale:.2f}"),
            Cell(raw=f"{t['cpu_s'] / scale:.2f}" if pd.notna(t["cpu_s"]) else "--"),
            Cell(raw=f"{gib:.2f}" if pd.notna(gib) else "--"),
            Cell(raw=f"{t['gpu_h']:.2f}"),
        ),
        bold_label=bold,
    )


def _table(
    name: str,
    caption: str,
    first: str,
    groups: dict[str, pd.DataFrame],
    unit: tuple[str, float],
    total_label: str = "Total",
    notes: tuple[str, ...] = (),
) -> Table:
    label, scale = unit
    body = tuple(_row(key, _totals(part), scale) for key, part in groups.items())
    total = _row(total_label, _totals(pd.concat(list(groups.values()))), scale, bold=True)
    return Table(
        name=name,
        caption=caption,
        label=f"tab:{name}",
        header=(first, "Jobs", f"Wall ({label})", f"CPU ({label})", "Peak memory (GiB)", "GPU-hours"),
        groups=(body, (total,)),
        notes=notes,
    )


def compute_tables(cfg: Config, root: str | Path) -> list[Table]:
    """Compute per rule, per method and per run (each with the study's total) from the benchmark TSVs.

    Raises :class:`~acerl.report.aggregate.MissingData` when no job of the study has a TSV (e.g. a DVC run).
    """
    bench = load_benchmarks(cfg, root)
    if bench.empty:
        raise MissingData("no Snakemake benchmark files (benchmarks/logs/) for this study's jobs")
    expected = len(study_jobs(cfg))
    if len(bench) < expected:
        log.warning("compute accounting: %d of %d jobs have a benchmark file", len(bench), expected)
    unit = _unit(float(bench["wall_s"].sum()))
    method_names = {BASE_METHOD: "Base", **{k: m.display for k, m in cfg.resolved_methods.items()}}
    by_rule = {r: bench[bench["rule"] == r] for r in stages.STAGES if (bench["rule"] == r).any()}
    methods = [SHARED, BASE_METHOD, *cfg.resolved_methods]
    by_method = {
        method_names.get(m, m): bench[bench["method"] == m] for m in methods if (bench["method"] == m).any()
    }
    in_run = bench[bench["seed"].notna()]
    by_run = {
        f"{cfg.models[mk].display} / {method_names.get(me, me)} / seed {int(s)}": part
        for (mk, me, s), part in in_run.groupby(["model", "method", "seed"], sort=False)
    }
    study = f"{cfg.name}: {len(bench)} jobs"
    return [
        _table("compute_rules", f"Compute per rule ({study}).", "Rule", by_rule, unit, notes=(NOTE,)),
        _table("compute_methods", f"Compute per method ({study}).", "Method", by_method, unit),
        _table(
            "compute_runs",
            f"Compute per run, base models included ({study}).",
            "Run",
            by_run,
            unit,
            "Total of the runs",
        ),
    ]
