"""Benchmark: acerl's Grader against verl's math-verify reward on MATH-500 responses (throughput + verdicts).

Builds 4 responses per MATH-500 problem (2,000 in all) from the reference solutions: the solution itself
(correct), the solution followed by a revision that boxes a perturbed answer (one digit changed: wrong), the
same with another problem's answer (mostly wrong), and the solution rewritten in DAPO's ``Answer: $X$``
style (correct).
Times, interleaved, median of ``--repeats`` runs:

- ``Grader(timeout_s=10, workers=2).grade_many`` (math-verify's own timeouts 5 s, as in verl), a fresh
  grader per run (cold verdict and gold caches), workers started before the clock starts;
- ``verl.utils.reward_score.math_verify.compute_score`` called once per response, in a loop (its own pool
  of 4 spawn processes, warmed up first), and the same from 8 threads, as verl's reward loop calls it.

Verdicts are compared wherever verl did not time out, and ``benchmarks/results/grading.md`` is written.

    python benchmarks/bench_grading.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shlex
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from acerl.grading import Grader, Verdict
from acerl.grading.fastpath import simple_number
from acerl.report.io import atomic_write_text

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "math500.jsonl"
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "grading.md"
VERL_TIMEOUT = -1.0  # timeout_score passed to verl, to tell its timeouts from wrong answers
REVISION = (
    "\n\nWait, I made an arithmetic slip in the last step above. Redoing that step carefully gives a "
    "different value.\nTherefore the final answer is $\\boxed{{{}}}$."
)


@dataclass(frozen=True)
class Case:
    """One response to grade: ``kind`` is how it was built from MATH-500 row ``problem_id``."""

    problem_id: str
    kind: str
    response: str
    gold: str


def perturbed(answer: str) -> str:
    """A wrong answer of the same shape: value + 1 for simple numbers, else ``answer + 1``."""
    value = simple_number(answer)
    if value is None:
        return f"{answer}+1"
    value += 1
    return (
        str(value.numerator)
        if value.denominator == 1
        else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    )


def dapo_style(solution: str, answer: str) -> str:
    """The solution without its boxes, ending in DAPO's answer line."""
    return solution.replace("\\boxed{", "{") + f"\n\nAnswer: ${answer}$"


def build_cases(rows: list[dict]) -> list[Case]:
    """4 responses per problem (see the module docstring), in problem order."""
    cases = []
    for i, row in enumerate(rows):
        other = rows[(i + 7) % len(rows)]["answer"]
        solution, answer = row["solution"], row["answer"]
        cases += [
            Case(row["id"], "solution", solution, answer),
            Case(row["id"], "perturbed", solution + REVISION.format(perturbed(answer)), answer),
            Case(row["id"], "other_answer", solution + REVISION.format(other), answer),
            Case(row["id"], "answer_line", dapo_style(solution, answer), answer),
        ]
    return cases


def time_ours(cases: list[Case], workers: int) -> tuple[float, list[Verdict], dict[str, int]]:
    """Seconds for one ``grade_many`` on a fresh grader (workers started beforehand), verdicts, stats."""
    with Grader(timeout_s=10, workers=workers) as grader:
        grader.grade("\\boxed{x+1}", "1+x")  # start the workers; not timed
        start = time.perf_counter()
        verdicts = grader.grade_many([(c.response, c.gold) for c in cases])
        seconds = time.perf_counter() - start
        stats = dict(vars(grader.stats))
    return seconds, verdicts, stats


def time_verl(cases: list[Case], threads: int) -> tuple[float, list[float]]:
    """Seconds for verl's math_verify.compute_score on every case (a loop, or ``threads`` threads), scores."""
    from verl.utils.reward_score.math_verify import compute_score

    def one(case: Case) -> float:
        return compute_score(case.response, case.gold, timeout_score=VERL_TIMEOUT)

    start = time.perf_counter()
    if threads <= 1:
        scores = [one(c) for c in cases]
    else:
        with ThreadPoolExecutor(max_workers=threads) as executor:
            scores = list(executor.map(one, cases))
    return time.perf_counter() - start, scores


def warm_up_verl() -> None:
    """Start verl's module-level process pool (4 spawn workers that import verl)."""
    from verl.utils.reward_score.math_verify import compute_score

    compute_score("\\boxed{1}", "1")


def disagreements(cases: list[Case], ours: list[Verdict], verl: list[float]) -> list[dict]:
    """Cases where verl gave a verdict (no timeout) and it differs from ours."""
    out = []
    for case, verdict, score in zip(cases, ours, verl, strict=True):
        if score != VERL_TIMEOUT and verdict.correct != (score == 1.0):
            out.append(
                {
                    "id": case.problem_id,
                    "kind": case.kind,
                    "gold": case.gold,
                    "extracted": verdict.extracted,
                    "status": verdict.status,
                    "ours": verdict.correct,
                    "verl": score,
                }
            )
    return out


def run(cases: list[Case], repeats: int, workers: int, threads: int) -> dict:
    """Interleaved timed runs of the three graders; returns raw timings, last verdicts, loads."""
    warm_up_verl()
    times: dict[str, list[float]] = {"ours": [], "verl_loop": [], "verl_threads": []}
    loads: list[tuple[float, float, float]] = [os.getloadavg()]
    result: dict = {}
    for r in range(repeats):
        seconds, verdicts, stats = time_ours(cases, workers)
        times["ours"].append(seconds)
        logger.info("run %d: ours %.1f s", r, seconds)
        seconds, verl_scores = time_verl(cases, threads=1)
        times["verl_loop"].append(seconds)
        logger.info("run %d: verl loop %.1f s", r, seconds)
        seconds, verl_thread_scores = time_verl(cases, threads=threads)
        times["verl_threads"].append(seconds)
        logger.info("run %d: verl %d threads %.1f s", r, threads, seconds)
        loads.append(os.getloadavg())
        result = {
            "verdicts": verdicts,
            "stats": stats,
            "verl": verl_scores,
            "verl_threads": verl_thread_scores,
        }
    return {"times": times, "loads": loads, **result}


def to_markdown(cases: list[Case], res: dict, args: argparse.Namespace, command: str) -> str:
    """The results page."""
    n = len(cases)
    times = res["times"]
    med = {k: statistics.median(v) for k, v in times.items()}
    ours, verl = res["verdicts"], res["verl"]
    diff = disagreements(cases, ours, verl)
    verl_timeouts = sum(s == VERL_TIMEOUT for s in verl)
    thread_mismatch = sum(a != b for a, b in zip(verl, res["verl_threads"], strict=True))
    by_kind = Counter((c.kind, v.correct) for c, v in zip(cases, ours, strict=True))
    statuses = Counter(v.status for v in ours)
    load_text = ", ".join("/".join(f"{x:.1f}" for x in load) for load in res["loads"])
    label = {
        "ours": f"acerl `Grader(workers={args.workers}).grade_many`",
        "verl_loop": "verl `math_verify.compute_score`, one call per response (loop)",
        "verl_threads": f"verl `math_verify.compute_score` from {args.threads} threads",
    }
    lines = [
        "# Grader throughput and verdicts vs verl's math-verify reward",
        "",
        f"{n} responses built from the {n // 4} MATH-500 reference solutions (4 each: the solution; the "
        "solution plus a revision boxing a perturbed answer; the same with another problem's answer; the "
        "solution in DAPO's `Answer: $X$` style). See `benchmarks/bench_grading.py`.",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"math-verify {version('math-verify')}, verl {version('verl')}. Shared machine: other jobs were "
        f"running; 1/5/15-min load averages before and after each round: {load_text}.",
        "",
        "Command:",
        "",
        "```",
        command,
        "```",
        "",
        f"Median of {args.repeats} interleaved runs (warm pools, cold caches: a fresh `Grader` per run):",
        "",
        "| grader | median s | min s | max s | responses/s | speed-up vs verl loop |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, values in times.items():
        lines.append(
            f"| {label[key]} | {med[key]:.1f} | {min(values):.1f} | {max(values):.1f} | {n / med[key]:.0f} "
            f"| {med['verl_loop'] / med[key]:.1f}x |"
        )
    stats = res["stats"]
    lines += [
        "",
        f"Where our items were decided (last run): {stats['fast_path']} exact fast path, "
        f"{stats['math_verify']} math-verify, {stats['cache_hits']} cache hits, {stats['no_answer']} no answer; "
        f"statuses {dict(statuses)}.",
        "",
        "Our verdicts by response kind (correct / incorrect): "
        + ", ".join(
            f"{kind} {by_kind[(kind, True)]} / {by_kind[(kind, False)]}"
            for kind in ("solution", "perturbed", "other_answer", "answer_line")
        )
        + ".",
        "",
        f"verl timed out on {verl_timeouts} responses (its 30 s future timeout); its loop and threaded runs "
        f"differ on {thread_mismatch}. Verdicts differ on {len(diff)} of the {n - verl_timeouts} responses "
        "verl graded:",
        "",
    ]
    if diff:
        lines += [
            "| problem | kind | gold | our extracted | our status | ours | verl |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in diff:
            lines.append(
                f"| {d['id']} | {d['kind']} | `{d['gold']}` | `{d['extracted']}` | {d['status']} | {d['ours']} "
                f"| {d['verl']:g} |"
            )
    else:
        lines.append("(none)")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: build the responses, time both graders, write the markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="MATH-500 JSONL (id, solution, answer)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each grader")
    parser.add_argument("--workers", type=int, default=2, help="our grader's worker processes")
    parser.add_argument("--threads", type=int, default=8, help="threads for the threaded verl run")
    parser.add_argument("--limit", type=int, default=None, help="use the first N problems only (quick runs)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    command = shlex.join(["python", "benchmarks/bench_grading.py", *(sys.argv[1:] if argv is None else argv)])
    rows = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[: args.limit]
    cases = build_cases(rows)
    res = run(cases, args.repeats, args.workers, args.threads)
    text = to_markdown(cases, res, args, command)
    atomic_write_text(args.output, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
