"""Benchmark the sampler's decode step: the lean Llama-family decoder against transformers' own forward.

Both run :func:`acerl.generate.rollout.sample_batch` on the same model, prompts, seed and settings (``lean=True``
vs ``lean=False``). Their logits agree to float rounding (tests/generate/test_decoding.py), so they sample
the same tokens except where rounding moves a draw across a bin boundary; with top-p, near-tied probabilities
of a near-uniform random-init model also swap places in the sort, and the same uniform then picks the other
token (the row continues differently from there). The share of identical rows is reported; the comparison is
of the decode step alone. Two shapes:

- ``train``: the trainer's rollout in the embedded default (16 prompts x 8 rollouts, <= 64 new tokens,
  temperature 1.0, top-p 1), on a random-init tiny Llama (long responses, as in bench_trainer.py);
- ``eval``: an evaluation batch (64 prompts x 32 samples, <= 64 new tokens, temperature 0.7, top-p 0.95).

Variants alternate within each repetition (one process, one thread, denormals flushed as in every job);
reported are medians of CPU seconds per ``sample_batch`` call.

    .venv/bin/python benchmarks/bench_decode.py --repeats 9 --out benchmarks/results/decode.md
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {  # name -> (prompts, n, temperature, top_p)
    "train": (16, 8, 1.0, 1.0),
    "eval": (64, 32, 0.7, 0.95),
}
MAX_NEW = 64


def prompts(count: int) -> list[str]:
    """Rendered training prompts of the synthetic task (the pipeline's own data generator, seed 0)."""
    from acerl.data.synthetic import write_splits
    from acerl.pipeline.io import read_jsonl
    from acerl.prompts import build_prompt

    with tempfile.TemporaryDirectory() as tmp:
        sizes = {"synth_easy": 0, "synth_hard": 0, "heldout": 0, "sft": 0, "train": count}
        write_splits(Path(tmp), seed=0, sizes=sizes)
        rows = read_jsonl(Path(tmp) / "train.jsonl")
    return [build_prompt(r["problem"], "plain") for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=None, help="markdown report to write")
    args = parser.parse_args()

    from acerl.generate.base import encode_prompt, eos_pad_ids
    from acerl.generate.rollout import sample_batch
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.pipeline.runtime import configure_torch

    configure_torch(1)
    tok = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok, seed=0).eval()
    eos, pad = eos_pad_ids(tok)
    ids = [encode_prompt(tok, p) for p in prompts(max(s[0] for s in SHAPES.values()))]

    def run(shape: str, lean: bool) -> tuple[float, torch.Tensor]:
        b0, n, temperature, top_p = SHAPES[shape]
        g = torch.Generator().manual_seed(0)
        start = time.process_time()
        batch = sample_batch(model, ids[:b0], n=n, temperature=temperature, top_p=top_p,
                             max_new_tokens=MAX_NEW, eos_id=eos, pad_id=pad, generator=g, lean=lean)  # fmt: skip
        return time.process_time() - start, batch.input_ids

    rows = []
    for shape in SHAPES:
        times: dict[bool, list[float]] = {True: [], False: []}
        tokens: dict[bool, torch.Tensor] = {}
        for rep in range(args.repeats):
            for lean in (True, False) if rep % 2 == 0 else (False, True):
                seconds, tokens[lean] = run(shape, lean)
                times[lean].append(seconds)
        a, b = tokens[True], tokens[False]
        same_rows = (a == b).all(dim=-1).float().mean().item() if a.shape == b.shape else float("nan")
        lean_s, hf_s = statistics.median(times[True]), statistics.median(times[False])
        n_tokens = int((tokens[True][:, -MAX_NEW:] != pad).sum())
        rows.append((shape, SHAPES[shape], hf_s, lean_s, n_tokens, same_rows))
        print(
            f"{shape}: transformers forward {hf_s:.3f} s, lean {lean_s:.3f} s, speed-up {hf_s / lean_s:.2f}x"
        )

    lines = [
        "# Decode-step benchmark",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_decode.py --repeats {args.repeats}`",
        "",
        "`sample_batch` with `LlamaFamilyDecoder` (`lean=True`) vs the transformers forward per token "
        "(`lean=False`), same random-init tiny Llama (`TinyModelConfig()`), prompts and seed (logits equal up "
        "to float rounding; a rounding difference can move a draw across a bin boundary or swap near-tied "
        "tokens in the top-p sort, so rows may differ: column *rows identical*). CPU seconds per call, medians "
        "over the repetitions, one thread, alternating order.",
        "",
        "| shape | prompts x n | T / top-p | generated tokens | rows identical | transformers forward s | lean s "
        "| speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for shape, (b0, n, temperature, top_p), hf_s, lean_s, n_tokens, same in rows:
        lines.append(
            f"| {shape} | {b0} x {n} | {temperature} / {top_p} | {n_tokens} | {same:.1%} | {hf_s:.3f} | {lean_s:.3f} "
            f"| **{hf_s / lean_s:.2f}x** |"
        )
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
