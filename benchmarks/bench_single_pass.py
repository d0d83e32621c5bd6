"""The local trainer's single pass: what reading ``log pi_old`` from the update's own forward saves.

When the update is one forward/backward pass (one epoch, one mini-batch, one micro-batch: the embedded default),
:func:`acerl.train.algorithm.train_step` runs that forward first and takes its detached log-probs as
``log pi_old``; otherwise ``log pi_old`` is a separate no-grad teacher-forced pass. Both give bitwise the same
training (``tests/train/test_loop.py``). This script times one whole training step of the embedded default
(ACE-GRPO, the default config: rollouts, rewards, log-probs, advantages, update) from the same step-0 state,
the two arms alternating in each repeat, in CPU seconds with one torch thread; the separate arm is the same
code with :func:`single_pass_update` answering no.

    .venv/bin/python benchmarks/bench_single_pass.py --root DIR [--repeats 9]

``--root`` is a study folder with ``models/base/tiny`` and ``data/train.jsonl`` (e.g. a finished ``make run``);
without it a random-init tiny model and synthetic training data are made in a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
ARMS = ("single pass", "separate pass")


def one_step(root: Path, single: bool) -> tuple[float, dict[str, float]]:
    """CPU seconds of one ``train_step`` from the ACE-GRPO run's step-0 state, and its metrics."""
    import acerl.train.algorithm as algorithm
    from acerl.config import Run, load_config
    from acerl.config.settings import resolve
    from acerl.grading import Grader
    from acerl.train.run import init_state

    cfg = load_config(REPO / "config" / "config.yaml")
    run = Run("tiny", "ace_grpo", 0)
    settings = resolve(cfg, run)
    state, data = init_state(root, run, settings, torch.device("cpu"))
    original = algorithm.single_pass_update
    if not single:
        algorithm.single_pass_update = lambda settings, rows: False  # type: ignore[assignment]
    try:
        with Grader(workers=0) as grader:
            start = time.process_time()
            metrics = algorithm.train_step(state, settings, data, grader)
            return time.process_time() - start, metrics
    finally:
        algorithm.single_pass_update = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, help="study folder with models/base/tiny and data/train.jsonl")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()

    from acerl.pipeline.runtime import configure_torch

    configure_torch(1)
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    losses: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="acerl-bench-single-") as tmp:
        root = args.root
        if root is None:
            from bench_trainer import make_root

            root = Path(tmp)
            make_root(root)
        for rep in range(args.repeats):
            for arm in ARMS if rep % 2 == 0 else ARMS[::-1]:
                seconds, metrics = one_step(root, arm == ARMS[0])
                times[arm].append(seconds)
                losses[arm] = metrics["actor/pg_loss"]
    if losses[ARMS[0]] != losses[ARMS[1]]:
        raise SystemExit(f"the arms trained differently: pg_loss {losses}")
    single, separate = (statistics.median(times[arm]) for arm in ARMS)
    lines = [
        f"one ACE-GRPO step of the embedded default, {args.repeats} repeats, CPU s (one torch thread), root "
        f"{'random-init' if args.root is None else 'given'}; pg_loss identical in both arms",
        "",
        "| arm | median CPU s per step | runs |",
        "|---|---:|---|",
    ]
    for arm in ARMS:
        runs = ", ".join(f"{t:.3f}" for t in times[arm])
        lines.append(f"| {arm} | {statistics.median(times[arm]):.3f} | {runs} |")
    lines += [
        "",
        f"single / separate: **{single / separate:.2f}x** ({1 - single / separate:.0%} of a step saved)",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
