"""The update without padding (issue 30's lever): one padded forward/backward pass over a training batch against
the same rows sorted by response length and cut into ``k`` micro-batches, each cut to its own widest row.

One real rollout batch of the embedded default (the default config's tiny-model training settings: 16 prompts x
G = 8 rollouts, <= 64 new tokens) is drawn once from the base model under ``--root``; then, alternating the arms in
each repeat, the policy's teacher-forced log-probs with gradients (forward + backward of a token-sum loss: the
update's arithmetic; the loss itself is negligible) and the reference's log-probs without (the reference pass)
are timed in CPU seconds, one torch thread. ``k = 1`` is the trainer's single padded pass (rows in batch order,
each prompt's forward shared by its group's rows); ``k > 1`` sorts the rows by response length, which splits
groups and so shares fewer prompt forwards. Reported per arm: padded tokens (rows x width, summed over the
micro-batches), median CPU seconds, and the ratio to ``k = 1``.

    .venv/bin/python benchmarks/bench_update_buckets.py --root DIR [--repeats 9] [--buckets 1,2,4,8]

``--root`` is a study folder with ``models/base/tiny`` and ``data/train.jsonl`` (e.g. a finished ``make run``);
without it a random-init tiny model and synthetic training data are made in a temporary folder (its responses
mostly run to the length cap, so little is padding there).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def chunks(lengths: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Row indices: ``k == 1`` all rows in batch order; else the rows sorted by length (stable) in ``k`` parts."""
    rows = torch.arange(len(lengths))
    if k == 1:
        return [rows]
    order = torch.sort(lengths, stable=True).indices
    return list(order.tensor_split(k))


def padded_tokens(batch, parts: list[torch.Tensor]) -> int:  # noqa: ANN001 (RolloutBatch, imported lazily)
    from acerl.train.logprobs import micro_inputs

    return sum(int(micro_inputs(batch, rows)[0].numel()) for rows in parts)


def one_update(state, batch, parts: list[torch.Tensor], temperature: float) -> float:  # noqa: ANN001
    """CPU seconds of the policy pass with backward and the reference pass without, over ``parts``."""
    from acerl.generate.rollout import response_logprobs
    from acerl.train.logprobs import micro_inputs

    state.model.zero_grad(set_to_none=True)
    total = float(batch.response_mask.sum())
    start = time.process_time()
    for rows in parts:
        ids, attn, t = micro_inputs(batch, rows)
        lp, _ = response_logprobs(state.model, ids, attn, t, temperature=temperature)
        (lp * batch.response_mask[rows, :t]).sum().div(total).backward()
    with torch.no_grad():
        for rows in parts:
            ids, attn, t = micro_inputs(batch, rows)
            response_logprobs(state.ref_model, ids, attn, t, temperature=temperature)
    return time.process_time() - start


def draw_batch(root: Path):  # noqa: ANN201 (TrainState, RunSettings, RolloutBatch; imported lazily)
    """The ACE-GRPO run's step-0 state on ``root`` (the default config), its settings and one rollout batch."""
    from acerl.config import Run, load_config
    from acerl.config.settings import resolve
    from acerl.grading import Grader
    from acerl.train.metrics import Timer
    from acerl.train.rollouts import collect_rollouts
    from acerl.train.run import init_state

    cfg = load_config(REPO / "config" / "config.yaml")
    setup = resolve(cfg, Run("tiny", "ace_grpo", 0))
    state, data = init_state(root, Run("tiny", "ace_grpo", 0), setup, torch.device("cpu"))
    with Grader(workers=0) as grader:
        batch = collect_rollouts(state, setup, data, grader, Timer()).batch
    return state, setup, batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, help="study folder with models/base/tiny and data/train.jsonl")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument(
        "--buckets", default="1,2,4,8", help="comma-separated micro-batch counts (1: one padded pass)"
    )
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    ks = [int(k) for k in args.buckets.split(",")]

    from acerl.pipeline.runtime import configure_torch

    configure_torch(1)
    with tempfile.TemporaryDirectory(prefix="acerl-bench-buckets-") as tmp:
        root = args.root
        if root is None:
            from bench_trainer import make_root

            root = Path(tmp)
            make_root(root)
        state, setup, batch = draw_batch(root)
    lengths = batch.response_lengths
    parts = {k: chunks(lengths, k) for k in ks}
    times: dict[int, list[float]] = {k: [] for k in ks}
    for rep in range(args.repeats):
        for k in ks if rep % 2 == 0 else ks[::-1]:
            times[k].append(one_update(state, batch, parts[k], setup.hyper.temperature))
    real = int(lengths.sum())
    base = statistics.median(times[ks[0]])
    lines = [
        f"rows {len(batch)}, response tokens {real} (mean {lengths.float().mean():.1f}, longest "
        f"{int(lengths.max())} of the {setup.hyper.max_response_length} allowed), {args.repeats} repeats, root "
        f"{'random-init' if args.root is None else 'given'}",
        "",
        "| micro-batches | padded tokens | median CPU s | runs | vs first |",
        "|---:|---:|---:|---|---:|",
    ]
    for k in ks:
        med = statistics.median(times[k])
        runs = ", ".join(f"{t:.3f}" for t in times[k])
        lines.append(f"| {k} | {padded_tokens(batch, parts[k])} | {med:.3f} | {runs} | {med / base:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
