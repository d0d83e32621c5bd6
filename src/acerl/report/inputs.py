"""The report's result files, checked before any is used: a truncated or corrupt one is a one-line error whose fix
is a command that really writes it again.

Deleting a result file is not enough with Snakemake 9: a missing intermediate whose consumers (the report's
outputs, which a failed report keeps: ``update()``) are up to date is not rebuilt, and ``snakemake all`` says
"Nothing to be done". ``--forcerun report`` reruns the report, and a job that runs has its missing inputs made
first. So the fix is ``snakemake -c1 all --forcerun report`` with the study's ``--configfile``; for a work
directory other than the current one (``--root``), the two ``acerl`` commands that write the file and the report.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

from acerl.config import Config
from acerl.errors import BadInputError, reading
from acerl.pipeline import paths
from acerl.pipeline.records import read_json, validate_passk_record
from acerl.pipeline.stages import Job, job_command, stage_command

__all__ = [
    "COMPUTE_TITLE",
    "SNAKEFILE_CONFIG",
    "check_problem_sets",
    "check_result_files",
    "partial_notice",
    "rebuild_advice",
    "reported_study_name",
    "result_jobs",
    "with_notice",
]

SNAKEFILE_CONFIG = "config/config.yaml"  # the Snakefile's own `configfile:` (not given again as --configfile)


COMPUTE_TITLE = "# Compute: "
"""The first line of ``results/compute.md`` before the name of the study that wrote it."""


def reported_study_name(root: str | Path) -> str | None:
    """The name of the study whose report is in ``root`` (the title of ``results/compute.md``), or ``None``
    before any report: Snakemake's HTML report names the study its results come from, whichever config it was
    given (the embedded default's name without ``--configfile``)."""
    compute = paths.compute_file(root)
    if not compute.is_file():
        return None
    first = compute.read_text(encoding="utf-8").partition("\n")[0]
    if not first.startswith(COMPUTE_TITLE):
        return None
    return first.removeprefix(COMPUTE_TITLE).strip() or None


def result_jobs(cfg: Config, root: str | Path) -> dict[Path, Job]:
    """Every Pass@k and diagnostics file the report reads, and the job that writes it."""
    out = {paths.passk_file(root, b, r): Job("passk", r.model, r, b) for b, r in cfg.evaluations()}
    out.update({paths.diagnostics_file(root, r): Job("diagnose", r.model, r) for r in cfg.diagnostic_runs()})
    return out


def rebuild_advice(
    job: Job, config_files: Sequence[str | Path], root: str | Path, before: Sequence[Job] = ()
) -> str:
    """What to run after deleting an output of ``job`` (and of the jobs ``before`` it, which make its inputs) so
    that they and the report are written again."""
    if Path(root).resolve() != Path.cwd().resolve():
        first = "".join(f"`{job_command(j, config_files, root)}`, " for j in before)
        return f"run {first}`{job_command(job, config_files, root)}` then `{stage_command('report', config_files, root)}`"
    extra = [Path(f).as_posix() for f in config_files if Path(f).as_posix() != SNAKEFILE_CONFIG]
    argv = ["snakemake", "-c1", "all", "--forcerun", "report", *(["--configfile", *extra] if extra else [])]
    return f"run `{shlex.join(argv)}` (it writes the file again, then the report)"


def check_result_files(files: dict[Path, Job], config_files: Sequence[str | Path], root: str | Path) -> None:
    """Decode each file of ``files`` that exists: a truncated or corrupt one is a
    :class:`~acerl.errors.BadInputError` naming it, to delete, and :func:`rebuild_advice`."""
    for path, job in files.items():
        if path.is_file():
            with reading(path, rebuild_advice(job, config_files, root)):
                json.loads(path.read_bytes())


def check_problem_sets(files: dict[Path, Job], config_files: Sequence[str | Path], root: str | Path) -> None:
    """Each Pass@k file of ``files`` that exists is over its benchmark's problems, all of them (those of
    ``data/<benchmark>.jsonl``; without that file, every problem another run's file holds): a run scored on part
    of the benchmark is a :class:`~acerl.errors.BadInputError` naming the file, how many problems it misses, and
    the commands that evaluate the run again once its generations and scored files are deleted with it."""
    from acerl.evaluate.pipeline import benchmark_ids

    held: dict[str, dict[Path, set[str]]] = {}
    for path, job in files.items():
        if job.stage == "passk" and job.benchmark is not None and path.is_file():
            record = validate_passk_record(read_json(path), str(path))
            held.setdefault(job.benchmark, {})[path] = {str(p["id"]) for p in record["problems"]}
    for benchmark, records in held.items():
        expected = benchmark_ids(root, benchmark) or sorted(set().union(*records.values()))
        for path, ids in records.items():
            missing = [i for i in expected if i not in ids]
            if not missing:
                continue
            job = files[path]
            run = job.run
            assert run is not None, job
            remake = [Job(stage, job.model, run, benchmark) for stage in ("sample", "grade")]
            raise BadInputError(
                f"{path}: Pass@k over {len(expected) - len(missing)} of {benchmark}'s {len(expected)} problems "
                f"({len(missing)} missing, e.g. {missing[0]!r}): a run's Pass@k is over all of them; delete it, "
                f"{paths.generations_file(root, benchmark, run)} and {paths.scored_file(root, benchmark, run)}, "
                f"and {rebuild_advice(job, config_files, root, before=remake)}"
            )


_LISTED = 20  # missing files named in the notice; the rest are counted


def partial_notice(missing: Sequence[Path], total: int, root: str | Path) -> str:
    """The paragraph a partial report (``acerl report --partial``) opens with: how many result files are
    missing and which (paths relative to ``root``), so that no reader takes it for the whole study."""
    names = [
        Path(p).relative_to(root).as_posix() if Path(p).is_relative_to(root) else str(p) for p in missing
    ]
    shown = [f"> - `{n}`" for n in names[:_LISTED]]
    if len(names) > _LISTED:
        shown.append(f"> - and {len(names) - _LISTED} more")
    return "\n".join(
        [
            f"> **Partial report** (`acerl report --partial`): {len(missing)} of {total} result files are missing, "
            "so their runs are left out of every table and figure below:",
            *shown,
        ]
    )


def with_notice(markdown: str, notice: str) -> str:
    """``markdown`` with ``notice`` after its title line (its first line)."""
    title, _, rest = markdown.partition("\n")
    return f"{title}\n\n{notice}\n{rest}"
