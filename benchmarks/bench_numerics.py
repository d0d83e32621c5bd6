"""Do the CPU's kernels decide the bits? Train the tiny Llama (the default study's model) for a few AdamW steps
under several numeric settings, each in its own process, and report the sha256 of the final weights and the time.

The settings emulate CPUs on one machine: the default dispatch (AVX-512 where the CPU has it), torch's kernels
capped at AVX2 (a CPU without AVX-512), and that cap pinned for every library (torch, MKL's conditional numerical
reproducibility mode, oneDNN), with 1 and 2 threads. Equal hashes across settings mean those settings give the
same numbers; docs/results.md ("Reproducing these numbers") reads the result.

  python benchmarks/bench_numerics.py [--steps 30] [--repeats 2]     (results: benchmarks/results/numerics.md)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
SETTINGS = {
    "default, 2 threads": ({}, 2),
    "torch capped at avx2, 2 threads": ({"ATEN_CPU_CAPABILITY": "avx2"}, 2),
    "pinned avx2 (torch+MKL+oneDNN), 2 threads": (PINNED, 2),
    "pinned avx2 (torch+MKL+oneDNN), 1 thread": (PINNED, 1),
    "default, 1 thread": ({}, 1),
}


def train(steps: int, threads: int) -> dict[str, object]:
    """A few SFT-like AdamW steps of the tiny Llama on fixed random tokens; the weights' hash and the time."""
    import torch

    from acerl.config.sections import TinyModelConfig
    from acerl.models.tiny import build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer

    torch.set_num_threads(threads)
    tok = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, len(tok), (16, 96), generator=gen) for _ in range(steps)]
    start = time.perf_counter()
    for ids in batches:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        digest.update(name.encode() + t.detach().contiguous().numpy().tobytes())
    return {"sha256": digest.hexdigest()[:16], "seconds": seconds, "loss": float(loss)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(train(args.steps, args.worker)))
        return 0
    rows: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):  # interleaved, so machine load hits every setting alike
        for name, (env, threads) in SETTINGS.items():
            out = subprocess.run(
                [sys.executable, __file__, "--steps", str(args.steps), "--worker", str(threads)],
                env={**os.environ, **env, "OMP_NUM_THREADS": str(threads)},
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            rows[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"# {name}: {rows[name][-1]}", file=sys.stderr, flush=True)
    print("| setting | weights sha256 (each repeat) | seconds (median) | final loss |")
    print("|---|---|---|---|")
    for name, rs in rows.items():
        secs = sorted(r["seconds"] for r in rs)[len(rs) // 2]
        hashes = ", ".join(dict.fromkeys(str(r["sha256"]) for r in rs))
        print(f"| {name} | {hashes} | {secs:.2f} | {rs[0]['loss']:.6f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
