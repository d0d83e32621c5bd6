"""The default study's CPU time (`make run` = `snakemake -c2 all`) side by side: models loaded with transformers
against the lean Llama loader, or any two commits, with every result compared byte for byte.

Each run is a fresh `git clone` (of HEAD, or of the run's ref) whose whole DAG Snakemake runs from scratch with
this checkout's `.venv` (the clone's `src` first on `PYTHONPATH`, so each run executes its own code; setup is not
timed). Reported per run: wall time; the CPU time of all jobs, exact: user + system of every process Snakemake
waited for, and of the processes its jobs left behind (``getrusage`` at the Snakemake process's exit, recorded by
the launcher :data:`LAUNCH`, a child subreaper), the same per
rule (each job's ``wait4`` rusage), and Snakemake's own CPU beside it (scheduling, the benchmark threads); and the
sum of the ``cpu_time`` column of Snakemake's benchmark files, for comparison: that one is *sampled* (every 0.5 s
for about a job's first 15 s, then every 30 s; whatever a job uses after its last sample is missed), a lower bound
that misses about a third of a 40-second training job. Afterwards the results of every run (generations, scored
samples, Pass@k, diagnostics, tables, report) are hashed and compared with the first run's.

  python benchmarks/bench_run.py [--runs HEAD:transformers,HEAD:lean] [--repeats 1] [--out FILE.md]
                                 [--configfile config/test.yaml] [--keep DIR] [--venvs DIR,DIR]

A run spec is `REF[:lean|:transformers|:system-malloc]` (`:transformers` sets ACERL_LEAN_MODEL=0, `:system-malloc`
ACERL_MALLOC=system: :data:`VARIANTS`). One run takes 10-25 minutes on
2 cores; run it on an otherwise idle machine, and compare only runs of one invocation.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT_DIRS = ("generations", "scored", "metrics", "diagnostics", "results")
"""What a study computes (hashed and compared across runs); logs, benchmarks and checkpoints are left out."""
SKIP_SUFFIXES = (".log",)
STAMP = "software"
"""The key of the software record (commit, packages) that result files carry: :func:`content_hash` leaves it out."""
TIMED = ("results/compute.md", "results/report.md")
"""Result files that report the run's own measured compute time (report.md embeds compute.md): they differ
between any two runs by design and are listed apart."""


LAUNCH = """
import atexit, ctypes, json, os, re, resource, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: a job's orphaned descendants come back to us
per_rule = {}
def try_wait(self, wait_flags):  # subprocess.Popen._try_wait with wait4: each child's own rusage
    try:
        pid, status, usage = os.wait4(self.pid, wait_flags)
    except ChildProcessError:
        return self.pid, 0
    if pid:
        rule = re.search(r"logs/(\\w+)/", str(self.args))
        key = rule.group(1) if rule else "other"
        per_rule[key] = per_rule.get(key, 0.0) + usage.ru_utime + usage.ru_stime
    return pid, status
subprocess.Popen._try_wait = try_wait
def cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime
def reap_orphans(limit_s=60.0):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            time.sleep(0.1)
def record():
    waited = cpu(resource.RUSAGE_CHILDREN)
    reap_orphans()
    jobs = cpu(resource.RUSAGE_CHILDREN)
    with open(os.environ["ACERL_BENCH_RUSAGE"], "w") as fh:
        json.dump({"snakemake": cpu(resource.RUSAGE_SELF), "jobs": jobs, "orphans": jobs - waited,
                   "per_rule": per_rule}, fh)
atexit.register(record)
from snakemake.cli import main
sys.argv[0] = "snakemake"
sys.exit(main())
"""
"""Snakemake run in this process (``python -c LAUNCH ARGS``), which at exit writes to the JSON file
``ACERL_BENCH_RUSAGE`` names: its own CPU seconds, those of every process it waited for (all jobs: the local
executor runs each job's shell as its child) and the same per rule, from each child's own ``wait4`` rusage (its
waited-for descendants included; the rule read from the job's log path ``logs/<rule>/``, "other" for anything
else Snakemake ran). The launcher is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): a process a job
started and did not wait for (the grader's forkserver and its workers, multiprocessing's resource tracker)
is re-parented to it when the job exits and reaped at the end, so its CPU counts in ``jobs`` (and apart, as
``orphans``: no rule is known for it) instead of going to init uncounted. ``subprocess.Popen._try_wait`` is
CPython's; the stand-in keeps its contract."""


@dataclass
class Run:
    spec: str
    wall_s: float
    jobs_cpu_s: float  # exact: every process Snakemake waited for, and the orphans of its jobs
    snakemake_cpu_s: float  # Snakemake's own process
    returncode: int
    rule_cpu_s: dict[str, float] = field(default_factory=dict)  # rule -> exact CPU of its jobs
    sampled_cpu_s: float = 0.0  # the sum of the benchmark files' sampled cpu_time (a lower bound)
    jobs: int = 0
    hashes: dict[str, str] = field(default_factory=dict)  # result file -> sha256 of its bytes
    content: dict[str, str] = field(default_factory=dict)  # result file -> :func:`content_hash`
    orphans_cpu_s: float = 0.0  # of jobs_cpu_s: processes the jobs did not wait for (no rule known)

    @property
    def total_cpu_s(self) -> float:
        return self.jobs_cpu_s + self.snakemake_cpu_s


def resolve(spec: str) -> str:
    """``spec`` with its ref resolved to a commit now, so that every run of one invocation runs the same code
    (a commit made while the benchmark runs would otherwise change what ``HEAD`` means between runs, and with it
    the code revision that every result file's software stamp records)."""
    ref, variant = parse_spec(spec)
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=REPO, capture_output=True, text=True
    )
    if commit.returncode:
        raise SystemExit(f"--runs: {ref!r} is not a commit of {REPO}")
    return f"{commit.stdout.strip()[:12]}:{variant}"


VARIANTS = {
    "lean": {"ACERL_LEAN_MODEL": "1"},
    "transformers": {"ACERL_LEAN_MODEL": "0"},
    "system-malloc": {"ACERL_LEAN_MODEL": "1", "ACERL_MALLOC": "system"},
}
"""A run spec's variant -> the environment its jobs get: the model loader (``acerl.models.loading``) and the C
allocator's settings (``acerl.pipeline.allocator``; commits before it ignore the variable)."""


def parse_spec(spec: str) -> tuple[str, str]:
    ref, _, variant = spec.partition(":")
    variant = variant or "lean"
    if variant not in VARIANTS or not ref:
        raise SystemExit(f"--runs: {spec!r} is not REF[:{'|:'.join(VARIANTS)}]")
    return ref, variant


def sampled_cpu(clone: Path) -> tuple[dict[str, float], int]:
    """Summed ``cpu_time`` per rule from Snakemake's benchmark files (``benchmarks/logs/<rule>/...tsv``; sampled,
    a lower bound: see the module docstring) and the number of jobs."""
    per_rule: dict[str, float] = defaultdict(float)
    jobs = 0
    for tsv in sorted((clone / "benchmarks" / "logs").rglob("*.tsv")):
        rule = tsv.relative_to(clone / "benchmarks" / "logs").parts[0]
        with tsv.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        for row in rows[-1:]:  # the job's last (successful) attempt
            per_rule[rule] += float(row["cpu_time"])
            jobs += 1
    return dict(per_rule), jobs


def result_files(clone: Path) -> list[Path]:
    return [
        path
        for top in RESULT_DIRS
        for path in sorted((clone / top).rglob("*"))
        if path.is_file() and not path.name.endswith(SKIP_SUFFIXES)
    ]


def result_hashes(clone: Path) -> dict[str, str]:
    return {
        str(p.relative_to(clone)): hashlib.sha256(p.read_bytes()).hexdigest() for p in result_files(clone)
    }


def _unstamped(value: object) -> object:
    if isinstance(value, dict):
        return {k: _unstamped(v) for k, v in value.items() if k != STAMP}
    if isinstance(value, list):
        return [_unstamped(v) for v in value]
    return value


def content_hash(path: Path) -> str:
    """sha256 of what a result file says less its software stamp (the ``software`` record of the commit and
    packages that made it, which differs between any two commits): JSON and JSON lines (gzipped or not) without
    any ``software`` key, Parquet's rows without the file's metadata; any other file (or one that does not
    parse): its bytes."""
    name = path.name
    try:
        if name.endswith(".json"):
            data = _unstamped(json.loads(path.read_text()))
        elif name.endswith((".jsonl", ".jsonl.gz")):
            with gzip.open(path, "rt") if name.endswith(".gz") else path.open() as fh:
                data = [_unstamped(json.loads(line)) for line in fh if line.strip()]
        elif name.endswith(".parquet"):
            import pyarrow.parquet as pq

            data = pq.read_table(path).to_pylist()
        else:
            return hashlib.sha256(path.read_bytes()).hexdigest()
    except (ValueError, OSError):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def content_hashes(clone: Path) -> dict[str, str]:
    return {str(p.relative_to(clone)): content_hash(p) for p in result_files(clone)}


def run_once(
    spec: str,
    scratch: Path,
    log: Path,
    cores: int,
    configfile: str | None = None,
    keep: Path | None = None,
    venv: Path | None = None,
) -> Run:
    """One run of ``spec`` in a fresh clone under ``scratch`` (moved to ``keep`` afterwards when given), with the
    virtualenv ``venv`` (default: this checkout's ``.venv``)."""
    ref, variant = parse_spec(spec)
    clone = scratch / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", ref], cwd=clone, check=True)
    venv_bin = (venv or REPO / ".venv") / "bin"
    env = {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(clone / "src"),
        **VARIANTS[variant],
    }
    rusage = scratch / "rusage.json"
    rusage.unlink(missing_ok=True)
    env["ACERL_BENCH_RUSAGE"] = str(rusage)
    start = time.perf_counter()
    with log.open("w") as fh:
        extra = ["--configfile", configfile] if configfile else []
        proc = subprocess.run(
            [str(venv_bin / "python"), "-c", LAUNCH, f"-c{cores}", "all", *extra],
            cwd=clone,
            env=env,
            stdout=fh,
            stderr=fh,
        )
    wall = time.perf_counter() - start
    cpu = json.loads(rusage.read_text())
    run = Run(spec, wall, cpu["jobs"], cpu["snakemake"], proc.returncode, cpu["per_rule"])
    run.orphans_cpu_s = cpu.get("orphans", 0.0)
    sampled, run.jobs = sampled_cpu(clone)
    run.sampled_cpu_s = sum(sampled.values())
    run.hashes, run.content = result_hashes(clone), content_hashes(clone)
    if keep is not None:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.move(str(clone), str(keep))
    shutil.rmtree(clone, ignore_errors=True)
    return run


def report(runs: list[Run]) -> str:
    rules = sorted({r for run in runs for r in run.rule_cpu_s})
    lines = [
        "| run | spec | exit | jobs | wall s | job CPU s | Snakemake CPU s | sampled job CPU s | "
        + " | ".join(f"{r} CPU s" for r in rules)
        + " | orphans CPU s |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(rules) + "---|",
    ]
    for i, run in enumerate(runs, 1):
        cells = " | ".join(f"{run.rule_cpu_s.get(r, 0.0):.0f}" for r in rules)
        lines.append(
            f"| {i} | {run.spec} | {run.returncode} | {run.jobs} | {run.wall_s:.0f} | {run.jobs_cpu_s:.0f} | "
            f"{run.snakemake_cpu_s:.0f} | {run.sampled_cpu_s:.0f} | {cells} | {run.orphans_cpu_s:.0f} |"
        )
    specs = list(dict.fromkeys(r.spec for r in runs))
    if len(specs) >= 2:
        first = specs[0]
        lines.append("")
        for label, of in (
            ("job CPU", lambda r: r.jobs_cpu_s),
            ("job + Snakemake CPU", lambda r: r.total_cpu_s),
        ):
            med = {s: statistics.median(of(r) for r in runs if r.spec == s) for s in specs}
            for s in specs[1:]:
                lines.append(
                    f"median {label}: {s} / {first} = **{med[s] / med[first]:.2f}x** "
                    f"({med[s]:.0f} / {med[first]:.0f} s)"
                )
    base, base_content = runs[0].hashes, runs[0].content
    lines.append("")
    for i, run in enumerate(runs[1:], 2):
        differ = sorted(k for k in base.keys() | run.hashes.keys() if base.get(k) != run.hashes.get(k))
        timed = [k for k in differ if k in TIMED]
        differ = [k for k in differ if k not in TIMED]
        in_content = [k for k in differ if k not in base_content or base_content[k] != run.content.get(k)]
        verdict = "byte-identical"
        if differ:
            verdict = (
                f"{len(differ)} files differ, {len(differ) - len(in_content)} of them only in the software stamp "
                f"(the commit and packages that made them); in content: {', '.join(in_content) or 'none'}"
            )
        lines.append(
            f"results of run {i} vs run 1 ({len(base) - len(TIMED)} files besides the timed "
            f"{' and '.join(TIMED)}, which differ by design: {len(timed)} did): {verdict}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--runs", default="HEAD:transformers,HEAD:lean", help="comma-separated REF[:lean|:transformers]"
    )
    ap.add_argument(
        "--repeats", type=int, default=1, help="rounds of --runs (the order alternates; default 1)"
    )
    ap.add_argument("--cores", type=int, default=2, help="snakemake -c (default 2, as make run)")
    ap.add_argument("--out", type=Path, help="also write the report here")
    ap.add_argument("--configfile", help="a config overlay for every run (snakemake --configfile)")
    ap.add_argument("--keep", type=Path, help="keep each run's clone as KEEP/run<i> (default: removed)")
    ap.add_argument(
        "--venvs",
        help="comma-separated virtualenvs, one per --runs spec in its order (default: this checkout's .venv for "
        "all), e.g. to compare environments made by two versions of `make setup`",
    )
    args = ap.parse_args(argv)
    specs = [resolve(spec) for spec in args.runs.split(",")]
    venvs = (
        [Path(v).resolve() for v in args.venvs.split(",")] if args.venvs else [REPO / ".venv"] * len(specs)
    )
    if len(venvs) != len(specs) or not all((v / "bin" / "python").is_file() for v in venvs):
        raise SystemExit(f"--venvs: one virtualenv (with bin/python) per --runs spec, got {args.venvs!r}")
    plan = list(zip(specs, venvs, strict=True))
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="acerl-bench-run-") as tmp:
        for i in range(args.repeats):
            for spec, venv in plan if i % 2 == 0 else plan[::-1]:
                log = Path(tmp) / f"run{len(runs) + 1}.log"
                keep = args.keep / f"run{len(runs) + 1}" if args.keep else None
                run = run_once(spec, Path(tmp), log, args.cores, args.configfile, keep, venv)
                if args.venvs:  # the label names the environment too
                    run.spec = f"{spec}@{venv}"
                runs.append(run)
                print(
                    f"{run.spec}: exit {run.returncode}, {run.jobs} jobs, {run.wall_s:.0f} s wall, "
                    f"{run.jobs_cpu_s:.0f} s job CPU, {run.snakemake_cpu_s:.0f} s Snakemake's",
                    flush=True,
                )
                if run.returncode:
                    print(log.read_text()[-4000:], file=sys.stderr)
    text = report(runs)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if all(r.returncode == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
