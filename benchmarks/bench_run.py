"""The default study's CPU time (`make run` = `snakemake -c2 all`) side by side: models loaded with transformers
against the lean Llama loader, or any two commits, with every result compared byte for byte.

Each run is a fresh `git clone` (of HEAD, or of the run's ref) whose whole DAG Snakemake runs from scratch with
this checkout's `.venv` (the clone's `src` first on `PYTHONPATH`, so each run executes its own code; setup is not
timed). Reported per run: wall time, the CPU time of every job (the `cpu_time` column of Snakemake's benchmark
files, user + system of the job's process tree), that CPU time per rule, and the CPU of the whole Snakemake
process tree. Afterwards the results of every run (generations, scored samples, Pass@k, diagnostics, tables,
report) are hashed and compared with the first run's.

  python benchmarks/bench_run.py [--runs HEAD:transformers,HEAD:lean] [--repeats 1] [--out FILE.md]
                                 [--configfile config/test.yaml] [--keep DIR]

A run spec is `REF[:lean|:transformers]` (`:transformers` sets ACERL_LEAN_MODEL=0). One run takes 10-25 minutes on
2 cores; run it on an otherwise idle machine, and compare only runs of one invocation.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import resource
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
TIMED = ("results/compute.md", "results/report.md")
"""Result files that report the run's own measured compute time (report.md embeds compute.md): they differ
between any two runs by design and are listed apart."""


@dataclass
class Run:
    spec: str
    wall_s: float
    tree_cpu_s: float
    returncode: int
    job_cpu_s: dict[str, float] = field(default_factory=dict)  # rule -> summed cpu_time
    jobs: int = 0
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def total_job_cpu_s(self) -> float:
        return sum(self.job_cpu_s.values())


def resolve(spec: str) -> str:
    """``spec`` with its ref resolved to a commit now, so that every run of one invocation runs the same code
    (a commit made while the benchmark runs would otherwise change what ``HEAD`` means between runs, and with it
    the code revision that every result file's software stamp records)."""
    ref, loader = parse_spec(spec)
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=REPO, capture_output=True, text=True
    )
    if commit.returncode:
        raise SystemExit(f"--runs: {ref!r} is not a commit of {REPO}")
    return f"{commit.stdout.strip()[:12]}:{loader}"


def parse_spec(spec: str) -> tuple[str, str]:
    ref, _, loader = spec.partition(":")
    loader = loader or "lean"
    if loader not in ("lean", "transformers") or not ref:
        raise SystemExit(f"--runs: {spec!r} is not REF[:lean|:transformers]")
    return ref, loader


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def job_cpu(clone: Path) -> tuple[dict[str, float], int]:
    """Summed ``cpu_time`` per rule from Snakemake's benchmark files (``benchmarks/logs/<rule>/...tsv``)."""
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


def result_hashes(clone: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for top in RESULT_DIRS:
        for path in sorted((clone / top).rglob("*")):
            if path.is_file() and not path.name.endswith(SKIP_SUFFIXES):
                out[str(path.relative_to(clone))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_once(
    spec: str, scratch: Path, log: Path, cores: int, configfile: str | None = None, keep: Path | None = None
) -> Run:
    """One run of ``spec`` in a fresh clone under ``scratch`` (moved to ``keep`` afterwards when given)."""
    ref, loader = parse_spec(spec)
    clone = scratch / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", ref], cwd=clone, check=True)
    venv_bin = REPO / ".venv" / "bin"
    env = {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(clone / "src"),
        "ACERL_LEAN_MODEL": "0" if loader == "transformers" else "1",
    }
    cpu0, start = children_cpu_s(), time.perf_counter()
    with log.open("w") as fh:
        extra = ["--configfile", configfile] if configfile else []
        proc = subprocess.run(
            [str(venv_bin / "snakemake"), f"-c{cores}", "all", *extra],
            cwd=clone,
            env=env,
            stdout=fh,
            stderr=fh,
        )
    run = Run(spec, time.perf_counter() - start, children_cpu_s() - cpu0, proc.returncode)
    run.job_cpu_s, run.jobs = job_cpu(clone)
    run.hashes = result_hashes(clone)
    if keep is not None:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.move(str(clone), str(keep))
    shutil.rmtree(clone, ignore_errors=True)
    return run


def report(runs: list[Run]) -> str:
    rules = sorted({r for run in runs for r in run.job_cpu_s})
    lines = [
        "| run | spec | exit | jobs | wall s | job CPU s | Snakemake tree CPU s | "
        + " | ".join(f"{r} CPU s" for r in rules)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(rules),
    ]
    for i, run in enumerate(runs, 1):
        cells = " | ".join(f"{run.job_cpu_s.get(r, 0.0):.0f}" for r in rules)
        lines.append(
            f"| {i} | {run.spec} | {run.returncode} | {run.jobs} | {run.wall_s:.0f} | "
            f"{run.total_job_cpu_s:.0f} | {run.tree_cpu_s:.0f} | {cells} |"
        )
    specs = list(dict.fromkeys(r.spec for r in runs))
    if len(specs) >= 2:
        med = {s: statistics.median(r.total_job_cpu_s for r in runs if r.spec == s) for s in specs}
        first = specs[0]
        lines.append("")
        for s in specs[1:]:
            lines.append(
                f"median job CPU: {s} / {first} = **{med[s] / med[first]:.2f}x** ({med[s]:.0f} / {med[first]:.0f} s)"
            )
    base = runs[0].hashes
    lines.append("")
    for i, run in enumerate(runs[1:], 2):
        differ = sorted(k for k in base.keys() | run.hashes.keys() if base.get(k) != run.hashes.get(k))
        timed = [k for k in differ if k in TIMED]
        differ = [k for k in differ if k not in TIMED]
        verdict = "byte-identical" if not differ else f"{len(differ)} files differ: {', '.join(differ)}"
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
    args = ap.parse_args(argv)
    specs = [resolve(spec) for spec in args.runs.split(",")]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="acerl-bench-run-") as tmp:
        for i in range(args.repeats):
            for spec in specs if i % 2 == 0 else specs[::-1]:
                log = Path(tmp) / f"run{len(runs) + 1}.log"
                keep = args.keep / f"run{len(runs) + 1}" if args.keep else None
                run = run_once(spec, Path(tmp), log, args.cores, args.configfile, keep)
                runs.append(run)
                print(
                    f"{spec}: exit {run.returncode}, {run.jobs} jobs, {run.wall_s:.0f} s wall, "
                    f"{run.total_job_cpu_s:.0f} s job CPU",
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
