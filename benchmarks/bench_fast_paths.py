"""Benchmark ``compute.fast_paths``: the fast paths against the plain torch/transformers path they optimise.

Three figures, each the plain path's CPU seconds over the fast path's (medians over the repetitions, one torch
thread, denormals flushed as in every job, the two paths alternating):

- ``job start``: a fresh process that loads the tiny model folder (``load_model_folder``) and builds the trainer's
  optimizer (``build_optimizer``), as every sampling and training job does first (``ACERL_LEAN_MODEL=0`` for the
  plain path; CPU time of the child process, imports included);
- ``training step``: teacher-forced log-probs, a policy-gradient loss, backward, clip and one AdamW step, on a
  fixed batch of the trainer's shape in the embedded default (16 prompts x 8 rollouts, 64 response tokens);
- ``sampled token``: ``sample_batch`` at the training rollouts' settings (16 prompts x 8, <= 64 new tokens,
  temperature 1, top-p 1), CPU seconds per sampled token.

The model is the embedded default's tiny Llama (``TinyModelConfig()``) at random init, saved as a model folder.
Both paths give the same weights and tokens here (tests/models/test_fast_paths.py).

    .venv/bin/python benchmarks/bench_fast_paths.py --repeats 7 --out benchmarks/results/fast_paths.md
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

PROMPTS, N, MAX_NEW = 16, 8, 64
START = """
import sys
from acerl.config import TrainHyper
from acerl.models.loading import load_model_folder
from acerl.optim import build_optimizer
model, tokenizer = load_model_folder(sys.argv[1])
build_optimizer(model.parameters(), TrainHyper())
"""


def job_start_cpu(folder: Path, fast: bool) -> float:
    """CPU seconds (user + system) of a fresh process that loads ``folder`` and builds an optimizer."""
    env = {**os.environ, "ACERL_LEAN_MODEL": "1" if fast else "0", "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", START, str(folder)], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_seconds(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="markdown report to write")
    args = parser.parse_args()

    from acerl.config import TrainHyper
    from acerl.generate.rollout import response_logprobs, sample_batch
    from acerl.models.loading import load_model_folder
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.optim import build_optimizer
    from acerl.pipeline import runtime

    runtime.configure_torch(1)
    folder = Path(tempfile.mkdtemp(prefix="bench-fast-paths-"))
    arch = TinyModelConfig()
    tokenizer = build_char_tokenizer(model_max_length=arch.max_position_embeddings)
    build_tiny_model(arch, tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    jobs = {}
    for fast in (False, True):
        runtime.set_fast_paths(fast)
        model, tok = load_model_folder(folder)
        optimizer, scheduler = build_optimizer(model.parameters(), TrainHyper(lr=1e-4))
        jobs[fast] = (model, tok, optimizer)
    runtime.set_fast_paths(True)
    prompt_ids = [
        tok(f"{i * 7 % 50}+{i * 13 % 50}=", add_special_tokens=True)["input_ids"] for i in range(PROMPTS)
    ]
    g = torch.Generator().manual_seed(0)
    width = max(len(p) for p in prompt_ids) + MAX_NEW
    input_ids = torch.randint(4, len(tokenizer), (PROMPTS * N, width), generator=g)
    mask = torch.ones_like(input_ids)
    rewards = torch.randn(PROMPTS * N, 1, generator=g)

    def train_step(fast: bool) -> None:
        model, _, optimizer = jobs[fast]
        model.train()
        logp, _ = response_logprobs(model, input_ids, mask, MAX_NEW, share_prompts=False)
        loss = -(rewards * logp).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    tokens = {}

    def sample(fast: bool) -> None:
        model, tok, _ = jobs[fast]
        model.eval()
        runtime.set_fast_paths(fast)
        batch = sample_batch(model, prompt_ids, n=N, temperature=1.0, top_p=1.0, max_new_tokens=MAX_NEW,
                             eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                             generator=torch.Generator().manual_seed(1))  # fmt: skip
        tokens[fast] = int(batch.response_mask.sum())
        runtime.set_fast_paths(True)

    times: dict[str, dict[bool, list[float]]] = {k: {False: [], True: []} for k in ("start", "step", "token")}
    for rep in range(args.repeats):
        order = (False, True) if rep % 2 == 0 else (True, False)
        for fast in order:
            times["start"][fast].append(job_start_cpu(folder, fast))
            times["step"][fast].append(cpu_seconds(lambda fast=fast: train_step(fast)))
            seconds = cpu_seconds(lambda fast=fast: sample(fast))
            times["token"][fast].append(seconds / tokens[fast])
    if tokens[False] != tokens[True]:
        raise SystemExit(f"the paths sampled different token counts ({tokens[False]} vs {tokens[True]})")

    rows = []
    labels = {
        "start": "job start (CPU s)",
        "step": "training step (CPU s)",
        "token": "sampled token (CPU ms)",
    }
    for key, label in labels.items():
        scale = 1000.0 if key == "token" else 1.0
        plain, fast = (statistics.median(times[key][f]) * scale for f in (False, True))
        rows.append(f"| {label} | {plain:.4g} | {fast:.4g} | {plain / fast:.2f}x |")
    load = os.getloadavg()
    lines = [
        "# Fast paths vs the plain path (`compute.fast_paths`)",
        "",
        f"`{' '.join(['python', *sys.argv])}`; torch {torch.__version__}; {args.repeats} repetitions, medians; "
        f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} on {os.cpu_count()} CPUs. "
        f"Tiny Llama (`TinyModelConfig()`), random init; a step is 16 x 8 rows x {MAX_NEW} response tokens; "
        f"sampling drew {tokens[True]} tokens per call. Ratio: plain / fast (above 1: the fast path is faster).",
        "",
        "| figure | plain | fast | ratio |",
        "|---|---:|---:|---:|",
        *rows,
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
