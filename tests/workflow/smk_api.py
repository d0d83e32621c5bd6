"""Snakemake's own view of the workflow, through its Python API, in a subprocess (one workflow per process state).

    python smk_api.py WORKDIR jobs CONFIG...        every job of ``all``: rule, input, output, log, benchmark,
                                                    params and shell command (JSON)
    python smk_api.py WORKDIR rules CONFIG...       every rule as written: its input (patterns, or ``<function>``
                                                    for an input function), output, log and benchmark patterns,
                                                    with the ``directory`` flag, and its shell command template
    python smk_api.py WORKDIR changes VARIANTS CONFIG...
        VARIANTS: a JSON file ``[[label, {config path: text}], ...]``. For each variant the files are written,
        the workflow loaded, and the outputs whose recorded params differ from the job's current params listed
        (what ``--rerun-triggers params`` reruns); prints
        ``{label: [outputs]}``.

CONFIG: the ``--configfile`` files (relative to WORKDIR).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def _workflow(workdir: Path, configfiles: list[str]) -> Iterator[Any]:
    """The loaded workflow (Snakemake's internal ``Workflow``: the API gives no other way to its DAG's jobs)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[workdir / f for f in configfiles]),
            snakefile=workdir / "Snakefile",
            workdir=workdir,
        )
        yield wf.dag(DAGSettings(targets={"all"})).workflow_api._workflow


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | dict | list) or value is None else str(value)


def jobs(workdir: Path, configfiles: list[str]) -> list[dict[str, Any]]:
    with _workflow(workdir, configfiles) as w:
        w._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
        w._build_dag()
        return [
            {
                "rule": job.rule.name,
                "input": sorted(map(str, job.input)),
                "output": sorted(map(str, job.output)),
                "params": {k: _plain(v) for k, v in job.params.items()},
                "log": [str(f) for f in job.log],
                "benchmark": str(job.benchmark) if job.benchmark else None,
                "shell": job.shellcmd,
            }
            for job in w.dag.jobs
            if job.rule.name != "all"
        ]


def _unconstrained(pattern: Any) -> str:
    """A pattern as the rule spells it: without the Snakefile's ``wildcard_constraints`` Snakemake adds."""
    return re.sub(r"\{(\w+),[^{}]*\}", r"{\1}", str(pattern))


def _pattern(value: Any) -> Any:
    if callable(value):
        return "<function>"
    if isinstance(value, list):
        return [_pattern(v) for v in value]
    flags = getattr(value, "flags", {})
    return {"path": _unconstrained(value), "directory": bool(flags.get("directory"))}


def _named(files: Any) -> dict[str, Any]:
    """A rule's ``input:`` / ``output:`` by name: a pattern, a list of them, or ``<function>``."""
    names = files._get_names()
    return {
        name: _pattern(files[start] if end is None else list(files[start:end]))
        for name, (start, end) in names
    }


def rules(workdir: Path, configfiles: list[str]) -> dict[str, Any]:
    with _workflow(workdir, configfiles) as w:
        return {
            rule.name: {
                "input": _named(rule.input),
                "unnamed_input": len(rule.input)
                - sum(1 if end is None else end - start for _, (start, end) in rule.input._get_names()),
                "output": _named(rule.output),
                "unnamed_output": len(rule.output)
                - sum(1 if end is None else end - start for _, (start, end) in rule.output._get_names()),
                "log": [_unconstrained(f) for f in rule.log],
                "benchmark": _unconstrained(rule.benchmark) if rule.benchmark else None,
                "shell": rule.shellcmd,
            }
            for rule in w.rules
            if rule.name != "all"
        }


def changes(
    workdir: Path, variants: list[tuple[str, dict[str, str]]], configfiles: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, files in variants:
        for rel, text in files.items():
            (workdir / rel).write_text(text)
        with _workflow(workdir, configfiles) as w:
            w._prepare_dag(forceall=False, ignore_incomplete=False, lock_warn_only=True)
            w._build_dag()
            # the truth value the params rerun trigger tests (DAG.needrun); not ``--list-params-changes``, which
            # in Snakemake 9.27 lists every output (ParamsChange.__or__ keeps the files of unchanged records)
            changed = [
                job for job in w.dag.jobs if job.rule.name != "all" and w.persistence.params_changed(job)
            ]
            out[label] = sorted(str(f) for job in changed for f in job.output)
    return out


def main(argv: list[str]) -> int:
    workdir, mode, *rest = argv
    wd = Path(workdir).resolve()
    with contextlib.redirect_stdout(io.StringIO()):  # Snakemake's own chatter
        if mode == "jobs":
            result: Any = jobs(wd, rest)
        elif mode == "rules":
            result = rules(wd, rest)
        else:
            result = changes(wd, json.loads(Path(rest[0]).read_text()), rest[1:])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
