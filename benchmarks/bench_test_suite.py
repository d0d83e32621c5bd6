"""How long `make test` (all of `.ci/run`: setup, both environments, lint, the main suite, the vLLM session) takes on a
clean clone with the main suite in parallel lanes (scripts/run_tests.sh's default) against its peer, the same suite
in one pytest session (`ACERL_TEST_LANES=serial`). Each run is a fresh `git clone` of HEAD with `CI=true` (nothing
may skip); the modes alternate, and the report gives each run's wall and CPU time (user + system of every process
the run waited for; jobs a SLURM daemon ran are not counted) and the median ratio parallel / serial.

  python benchmarks/bench_test_suite.py [--repeats 1] [--modes serial,parallel] [--out FILE.md]

A pair takes about 80 minutes on 2 cores. Run it on an otherwise idle machine: the lanes fill idle cores, so other
load shrinks their gain. The real datasets and the paper are read from beside this checkout (`../shared`), as
the tests read them (``ACERL_SHARED_DATA``, ``ACERL_PAPER_TEX``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("serial", "parallel")


@dataclass(frozen=True)
class Run:
    mode: str
    wall_s: float
    cpu_s: float
    returncode: int


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ci_env(mode: str) -> dict[str, str]:
    """``.ci/run``'s environment: ``CI=true``, the lane mode, and the inputs beside this checkout."""
    shared = REPO.parent / "shared"
    return {
        **os.environ,
        "CI": "true",
        "ACERL_TEST_LANES": mode,
        "ACERL_SHARED_DATA": os.environ.get("ACERL_SHARED_DATA", str(shared / "data")),
        "ACERL_PAPER_TEX": os.environ.get("ACERL_PAPER_TEX", str(shared / "paper" / "ace_paper.tex")),
    }


def run_once(mode: str, scratch: Path, log: Path) -> Run:
    """``.ci/run`` in a fresh clone of HEAD with ``ACERL_TEST_LANES=mode``; its output goes to ``log``."""
    clone = scratch / f"clone-{mode}"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    cpu0, start = children_cpu_s(), time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(
            [str(clone / ".ci" / "run")], cwd=clone, env=ci_env(mode), stdout=out, stderr=out
        )
    run = Run(mode, time.perf_counter() - start, children_cpu_s() - cpu0, proc.returncode)
    shutil.rmtree(clone, ignore_errors=True)
    return run


def report(runs: list[Run]) -> str:
    lines = [
        "| run | mode | exit code | wall s | CPU s |",
        "|---|---|---|---|---|",
        *(
            f"| {i} | {r.mode} | {r.returncode} | {r.wall_s:.0f} | {r.cpu_s:.0f} |"
            for i, r in enumerate(runs, 1)
        ),
    ]
    walls = {m: [r.wall_s for r in runs if r.mode == m] for m in MODES}
    if all(walls.values()):
        med = {m: statistics.median(v) for m, v in walls.items()}
        lines += [
            "",
            f"median wall: serial {med['serial']:.0f} s, parallel {med['parallel']:.0f} s; "
            f"parallel / serial = **{med['parallel'] / med['serial']:.2f}x**",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=1, help="pairs of runs (default 1)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, in the first pair's order")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: each of {', '.join(MODES)}, got {args.modes!r}")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="acerl-bench-tests-") as tmp:
        scratch = Path(tmp)
        for i in range(args.repeats):
            for mode in modes if i % 2 == 0 else modes[::-1]:
                log = scratch / f"run{i + 1}-{mode}.log"
                run = run_once(mode, scratch, log)
                runs.append(run)
                print(
                    f"{mode}: exit {run.returncode}, {run.wall_s:.0f} s wall, {run.cpu_s:.0f} s CPU",
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
