"""Benchmark: how long ``snakemake -n all`` takes to build the paper grid's DAG (target <= 10 s).

Runs, interleaved, ``--repeats`` times each in a scratch copy of the workflow (no outputs, so every job is
planned):

- ``snakemake -n all --configfile=config/paper.yaml`` (the paper grid: 490 jobs; ``--quiet`` variant too,
  which skips printing every job's block);
- ``snakemake -n all`` on the embedded default (156 jobs);
- ``snakemake --version`` (starting Python and importing Snakemake: the floor every command pays).

Reports the median wall time of each and writes ``benchmarks/results/dryrun.md``.

    python benchmarks/bench_dryrun.py --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acerl.pipeline.io import write_text

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
WORKFLOW = ("Snakefile", "workflow", "config", "profiles")

CASES: dict[str, list[str]] = {
    "paper grid, `snakemake -n all --configfile=config/paper.yaml`": [
        "-n",
        "all",
        "--configfile=config/paper.yaml",
    ],
    "paper grid, quiet (`--quiet rules`)": [
        "-n",
        "all",
        "--configfile=config/paper.yaml",
        "--quiet",
        "rules",
    ],
    "default study, `snakemake -n all`": ["-n", "all"],
    "`snakemake --version` (floor)": ["--version"],
}


def copy_workflow(dest: Path) -> Path:
    for name in WORKFLOW:
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)
    return dest


def time_once(cwd: Path, args: list[str]) -> float:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    proc = subprocess.run([SNAKEMAKE, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "dryrun.md")
    args = parser.parse_args(argv)

    times: dict[str, list[float]] = {name: [] for name in CASES}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="acerl-dryrun-") as tmp:
        wd = copy_workflow(Path(tmp))
        time_once(wd, CASES["default study, `snakemake -n all`"])  # warm-up: byte-code caches, page cache
        for i in range(args.repeats):
            for name, case in CASES.items():
                times[name].append(time_once(wd, case))
            print(f"round {i + 1}/{args.repeats}: " + ", ".join(f"{t[-1]:.2f}" for t in times.values()))
    load_after = os.getloadavg()

    lines = [
        "# Dry-run benchmark",
        "",
        f"Command: `python benchmarks/bench_dryrun.py --repeats {args.repeats}`",
        "",
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}; 1-minute load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after. Cases interleaved; medians of {args.repeats} runs.",
        "",
        "| case | median wall s | min | max |",
        "|---|---:|---:|---:|",
    ]
    for name, values in times.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
    lines.append("")
    write_text(args.out, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
