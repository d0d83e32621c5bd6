"""Benchmark: acerl's Grader against verl's math-verify reward on MATH-500 responses (throughput + verdicts).

Builds 4 responses per MATH-500 problem (2,000 in all) from the reference solutions: the solution itself
(correct), the solution followed by a revision that boxes a perturbed answer (one digit changed: wrong), the
same with another problem's answer (mostly wrong), and the solution rewritten in DAPO's ``Answer: $X$``
style (correct).
Times, interleaved, a cold round then the median of ``--repeats`` warm rounds (protocol in the report):

- ``Grader(timeout_s=10, workers=2).grade_many`` (math-verify's own timeouts 5 s, as in verl);
- ``verl.utils.reward_score.math_verify.compute_score`` called once per response, in a loop (its own pool
  of 4 spawn processes), and the same from 8 threads, as verl's reward loop calls a reward function.

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from acerl.grading import Grader, Verdict
from acerl.grading.fastpath import simple_number
from acerl.pipeline.io import write_text

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
    """A wrong answer of the same shape: value + 1 for simple numbers; else the first digit + 1 (mod 10),
    or ``+1`` appended when there is no digit."""
    value = simple_number(answer)
    if value is not None:
        value += 1
        if value.denominator == 1:
            return str(value.numerator)
        return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    digit = re.search(r"[0-9]", answer)
    if digit is None:
        return f"{answer}+1"
    return answer[: digit.start()] + str((int(digit.group()) + 1) % 10) + answer[digit.end() :]


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


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds, and CPU seconds of this process plus the grading worker processes."""

    wall: float
    cpu: float


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by this process and the processes ``pids`` (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def timed(fn: Callable[[], object], pids: list[int]) -> tuple[Timing, object]:
    """Run ``fn`` and measure it; ``pids`` are the worker processes whose CPU time counts too."""
    cpu, start = cpu_seconds(pids), time.perf_counter()
    result = fn()
    wall = time.perf_counter() - start
    return Timing(wall, cpu_seconds(pids) - cpu), result


def time_ours(grader: Grader, cases: list[Case]) -> tuple[Timing, list[Verdict]]:
    """One ``grade_many`` over every case, with the grader's verdict cache emptied first."""
    grader.clear_cache()
    items = [(c.response, c.gold) for c in cases]
    return timed(lambda: grader.grade_many(items), grader.worker_pids())  # type: ignore[return-value]


def time_verl(cases: list[Case], threads: int) -> tuple[Timing, list[float]]:
    """verl's math_verify.compute_score on every case (a loop, or ``threads`` threads) and its scores."""
    from verl.utils.reward_score import math_verify as verl_math_verify

    def one(case: Case) -> float:
        return verl_math_verify.compute_score(case.response, case.gold, timeout_score=VERL_TIMEOUT)

    def loop() -> list[float]:
        return [one(c) for c in cases]

    def threaded() -> list[float]:
        with ThreadPoolExecutor(max_workers=threads) as executor:
            return list(executor.map(one, cases))

    pids = list(verl_math_verify._get_pool()._processes)  # its spawn workers (a private attribute)
    return timed(loop if threads <= 1 else threaded, pids)  # type: ignore[return-value]


def warm_up_verl(threads: int) -> None:
    """Start verl's module-level process pool with all its 4 spawn workers (not timed).

    ``ProcessPoolExecutor`` starts workers on demand; calling from several threads at once starts all of
    them, as verl's threaded reward loop does, so every timed round uses the same processes.
    """
    from verl.utils.reward_score.math_verify import compute_score

    with ThreadPoolExecutor(max_workers=threads) as executor:
        list(executor.map(lambda i: compute_score(f"\\boxed{{{i}}}", str(i)), range(4 * threads)))


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
    """Round 0: both graders cold (fresh worker processes); rounds 1..repeats: warm, interleaved.

    Returns the timings per grader (``*_cold`` for round 0), the last round's verdicts and scores, the
    grader's decision counts over all rounds, and the load averages after each round.
    """
    times: dict[str, list[Timing]] = {
        k: [] for k in ("ours_cold", "verl_loop_cold", "ours", "verl_loop", "verl_threads")
    }
    loads: list[tuple[float, float, float]] = [os.getloadavg()]
    result: dict = {}
    with Grader(timeout_s=10, workers=workers) as grader:
        grader.grade("\\boxed{x+1}", "1+x")  # starts the workers (not timed)
        warm_up_verl(threads)
        for r in range(repeats + 1):
            suffix = "_cold" if r == 0 else ""
            timing, verdicts = time_ours(grader, cases)
            times["ours" + suffix].append(timing)
            logger.info("round %d: ours %s", r, timing)
            timing, verl_scores = time_verl(cases, threads=1)
            times["verl_loop" + suffix].append(timing)
            logger.info("round %d: verl loop %s", r, timing)
            if r > 0:
                timing, verl_thread_scores = time_verl(cases, threads=threads)
                times["verl_threads"].append(timing)
                logger.info("round %d: verl %d threads %s", r, threads, timing)
                result = {"verdicts": verdicts, "verl": verl_scores, "verl_threads": verl_thread_scores}
            loads.append(os.getloadavg())
        result["stats"] = dict(vars(grader.stats))
    return {"times": times, "loads": loads, **result}


def to_markdown(cases: list[Case], res: dict, args: argparse.Namespace, command: str) -> str:
    """The results page."""
    n = len(cases)
    walls = {k: [t.wall for t in v] for k, v in res["times"].items()}
    med = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(t.cpu for t in v) for k, v in res["times"].items()}
    ours, verl = res["verdicts"], res["verl"]
    diff = disagreements(cases, ours, verl)
    verl_timeouts = sum(s == VERL_TIMEOUT for s in verl)
    thread_mismatch = sum(a != b for a, b in zip(verl, res["verl_threads"], strict=True))
    by_kind = Counter((c.kind, v.correct) for c, v in zip(cases, ours, strict=True))
    statuses = Counter(v.status for v in ours)
    load_text = ", ".join("/".join(f"{x:.1f}" for x in load) for load in res["loads"])
    ours_label = f"acerl `Grader(timeout_s=10, workers={args.workers}).grade_many`"
    verl_label = "verl `math_verify.compute_score`"
    rows = [
        ("ours_cold", f"{ours_label}, cold (round 0)", "verl_loop_cold"),
        ("verl_loop_cold", f"{verl_label}, one call per response, cold (round 0)", "verl_loop_cold"),
        ("ours", f"{ours_label}, warm", "verl_loop"),
        ("verl_loop", f"{verl_label}, one call per response, warm", "verl_loop"),
        ("verl_threads", f"{verl_label} from {args.threads} threads, warm", "verl_loop"),
    ]
    lines = [
        "# Grader throughput and verdicts vs verl's math-verify reward",
        "",
        f"{n} responses built from the {n // 4} MATH-500 reference solutions, 4 each: the solution "
        "(correct); the solution plus a revision boxing a perturbed answer (one digit changed); the same "
        "with another problem's answer; the solution in DAPO's `Answer: $X$` style (correct). See "
        "`benchmarks/bench_grading.py`.",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"math-verify {version('math-verify')}, verl {version('verl')}. Shared machine: other jobs were "
        f"running all along; 1/5/15-min load averages at the start and after each round: {load_text}.",
        "",
        "Command:",
        "",
        "```",
        command,
        "```",
        "",
        "Protocol: our grader (2 workers) and verl's process pool (all 4 of its spawn workers) are "
        "started before any timing. Round 0 times both on fresh worker processes (cold: math-verify's "
        "parser and sympy caches empty); rounds 1.." + str(args.repeats) + " repeat the same responses "
        "with warm worker processes, as in a training run, and add verl called from a thread pool (as "
        "verl's reward loop calls a reward function). Our verdict cache is emptied before every round, so "
        "no response is answered from it; our workers keep their parsed golds (each gold is parsed once "
        "per worker, as it is during training, where one gold serves every sample of its prompt).",
        "",
        "| grader | median s | min s | max s | responses/s | speed-up vs verl loop | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label, base in rows:
        values = walls[key]
        lines.append(
            f"| {label} | {med[key]:.1f} | {min(values):.1f} | {max(values):.1f} | {n / med[key]:.0f} "
            f"| {med[base] / med[key]:.1f}x | {cpu[key]:.1f} |"
        )
    stats = res["stats"]
    lines += [
        "",
        "CPU s (median): CPU time of the benchmark process and of the grading worker processes during the "
        "run; unlike wall time it does not depend much on the other jobs on the machine. Speed-ups compare "
        "wall times of the same round type (cold with cold, warm with warm).",
        "",
        f"How our items were decided over all {args.repeats + 1} rounds: {stats['fast_path']} exact fast path "
        f"(identical string or simple number), {stats['math_verify']} math-verify in the workers, "
        f"{stats['no_answer']} no answer, {stats['timeouts']} timeouts; last round's statuses {dict(statuses)}.",
        "",
        "Our verdicts by response kind (correct / incorrect): "
        + ", ".join(
            f"{kind} {by_kind[(kind, True)]} / {by_kind[(kind, False)]}"
            for kind in ("solution", "perturbed", "other_answer", "answer_line")
        )
        + ".",
        "",
        f"verl timed out on {verl_timeouts} responses in the last round (its 30 s future timeout; math-verify's "
        f"own 5 s timeouts inside its workers score 0 and cannot be told apart); its loop and threaded runs "
        f"differ on {thread_mismatch} verdicts. Our verdicts (last round) differ from verl's on {len(diff)} "
        f"of the {n - verl_timeouts} responses verl graded:",
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
    write_text(args.output, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
