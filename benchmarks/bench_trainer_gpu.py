"""Benchmark the local trainer against TRL's GRPOTrainer on one GPU: steps/s and generated tokens/s.

Same everything on both sides: a random-init Qwen2-architecture model (``--size 0.5b``: 24 layers, width 1024,
16 query / 2 key-value heads, SwiGLU 5504, about 0.47B parameters over the project's character vocabulary, so
that every sampled token can be decoded and graded), the synthetic training prompts with the ``plain``
template, ``--prompts`` prompts x G=``--group`` rollouts per step, up to ``--max-new`` new tokens at
temperature 1.0, token-mean clipped surrogate (TRL ``loss_type="dapo"``) with a beta=0.001 KL term to a frozen
reference, AdamW, one optimizer step per training step, the project's grader (in-process) as reward,
``--precision`` (fp32, or bf16 autocast with fp32 master weights on both sides: TRL's ``bf16=True``).

Each of ``--runs`` repetitions builds a fresh trainer of each kind (local, then TRL), runs ``--warmup`` steps
and then ``--steps`` timed steps (CUDA synchronised); a run's figure is its median step, the reported figure
the median over runs. A random-init model rarely emits EOS, so both sides generate close to ``--max-new``
tokens per rollout: the same work.

    python benchmarks/bench_trainer_gpu.py --size 0.5b --runs 3 --steps 5 --warmup 2 --out benchmarks/results/trainer_gpu.md
    python benchmarks/bench_trainer_gpu.py --size tiny --device cpu --runs 1 --steps 1 --warmup 0   # smoke check
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer import BETA, LR, REPO, bench_trl  # noqa: E402

SIZES = {  # Qwen2Config fields
    "0.5b": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "intermediate_size": 5504,
    },
    "tiny": {  # smoke checks on a CPU
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
    },
}


def make_qwen_root(root: Path, size: str, train_size: int = 2048) -> int:
    """Synthetic training set and a random-init Qwen2 model (as model key ``tiny``) under ``root``; returns
    the parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from acerl.data.synthetic import write_splits
    from acerl.models.tiny import count_parameters
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.pipeline import paths

    sizes = {"synth_easy": 0, "synth_hard": 0, "heldout": 0, "sft": 0, "train": train_size}
    write_splits(root / "data", seed=0, sizes=sizes)
    tok = build_char_tokenizer(model_max_length=1024)
    config = Qwen2Config(
        vocab_size=len(tok),
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **SIZES[size],
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(paths.base_model_dir(root, "tiny"))
    tok.save_pretrained(paths.base_model_dir(root, "tiny"))
    return count_parameters(model)


def bench_local(root: Path, args: argparse.Namespace) -> list[dict[str, float]]:
    """Per-step wall time and generated tokens of one fresh local trainer (GRPO), warm-up steps dropped."""
    from acerl.config import Run, load_config
    from acerl.config.settings import resolve
    from acerl.grading import Grader
    from acerl.train.algorithm import train_step
    from acerl.train.run import init_state

    rows = args.prompts * args.group
    overrides = [
        "models.tiny.train.total_steps=100000",
        f"models.tiny.train.prompts_per_step={args.prompts}",
        f"models.tiny.train.group_size={args.group}",
        f"models.tiny.train.mini_batch_size={args.prompts}",
        f"models.tiny.train.micro_batch_size_per_gpu={rows}",
        "models.tiny.train.max_prompt_length=128",
        f"models.tiny.train.max_response_length={args.max_new}",
        f"models.tiny.train.lr={LR}",
        f"models.tiny.train.kl_coef={BETA}",
        "families.grpo.loss_agg_mode=token-mean",
        f"compute.precision={args.precision}",
    ]
    cfg = load_config(REPO / "config" / "config.yaml", overrides)
    run = Run("tiny", "grpo", 0)
    setup = resolve(cfg, run)
    state, data = init_state(root, run, setup, torch.device(args.device))
    out = []
    with Grader(workers=0) as grader:
        for step in range(args.warmup + args.steps):
            start = time.perf_counter()
            metrics = train_step(state, setup, data, grader)
            _sync(args.device)
            if step >= args.warmup:
                tokens = metrics["train/response_length_mean"] * rows
                out.append({"wall": time.perf_counter() - start, "tokens": tokens})
    del state
    _free(args.device)
    return out


def bench_trl_run(root: Path, args: argparse.Namespace) -> list[dict[str, float]]:
    times = bench_trl(
        root,
        args.steps,
        args.warmup,
        after_step=lambda: None,
        use_cpu=args.device == "cpu",
        bf16=args.precision == "bf16",
        prompts_per_step=args.prompts,
        group=args.group,
        max_new=args.max_new,
    )
    _free(args.device)
    return [
        {"wall": t["wall"], "tokens": t["response_length_mean"] * args.prompts * args.group} for t in times
    ]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def summarise(runs: list[list[dict[str, float]]]) -> dict[str, float | list[float]]:
    """Median step time and tokens/s of each run, and the medians over runs."""
    per_run_wall = [statistics.median(m["wall"] for m in r) for r in runs]
    per_run_tps = [statistics.median(m["tokens"] / m["wall"] for m in r) for r in runs]
    return {
        "wall": statistics.median(per_run_wall),
        "steps_per_s": 1 / statistics.median(per_run_wall),
        "tokens_per_s": statistics.median(per_run_tps),
        "runs_wall": [round(w, 4) for w in per_run_wall],
        "runs_tokens_per_s": [round(t, 1) for t in per_run_tps],
    }


def report(results: dict[str, dict], args: argparse.Namespace, n_params: int, cmd: str) -> str:
    import transformers
    import trl

    device = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    loc, ref = results["local"], results["trl"]
    lines = [
        "# Local trainer vs TRL GRPOTrainer on one device",
        "",
        f"Command: `{cmd}`",
        "",
        f"Device: {device}; torch {torch.__version__}, transformers {transformers.__version__}, TRL {trl.__version__}; "
        f"{datetime.date.today().isoformat()}.",
        "",
        f"Setup: random-init Qwen2 ({args.size}, {n_params / 1e6:.1f}M parameters), {args.prompts} prompts x "
        f"G={args.group} rollouts per step, <= {args.max_new} new tokens at T=1.0, GRPO token-mean clipped surrogate "
        f"+ {BETA} x KL to a frozen reference, AdamW lr {LR}, precision {args.precision}. {args.runs} runs x "
        f"{args.steps} timed steps after {args.warmup} warm-up steps; per run the median step, then the median over "
        "runs.",
        "",
        "| trainer | s/step | steps/s | generated tokens/s | per-run s/step |",
        "|---|---|---|---|---|",
    ]
    for name, r in (("acerl local (GRPO)", loc), (f"TRL {trl.__version__} GRPOTrainer", ref)):
        lines.append(
            f"| {name} | {r['wall']:.3f} | {r['steps_per_s']:.3f} | {r['tokens_per_s']:.0f} | {r['runs_wall']} |"
        )
    lines += [
        "",
        f"Speed-up of the local trainer over TRL: **{ref['wall'] / loc['wall']:.2f}x** (steps/s).",
        "",
    ]
    lines += ["Raw: " + json.dumps(results), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="0.5b")
    parser.add_argument("--device", default="auto", help="cuda | cpu | auto")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="rollouts per prompt G")
    parser.add_argument("--max-new", type=int, default=128, help="new tokens per rollout at most")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="markdown report to write")
    args = parser.parse_args()
    from acerl.pipeline.runtime import configure_torch, resolve_device

    args.device = resolve_device(args.device)
    if args.size == "0.5b" and args.device == "cpu":
        parser.error("--size 0.5b is for a GPU; use --size tiny for a CPU smoke check")
    configure_torch(1 if args.device == "cpu" else torch.get_num_threads())
    import logging

    logging.basicConfig(level=logging.WARNING)
    runs: dict[str, list[list[dict[str, float]]]] = {"local": [], "trl": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n_params = make_qwen_root(root, args.size)
        for _ in range(args.runs):  # alternate: drift over time hits both alike
            runs["local"].append(bench_local(root, args))
            runs["trl"].append(bench_trl_run(root, args))
    results = {k: summarise(v) for k, v in runs.items()}
    cmd = "python benchmarks/bench_trainer_gpu.py " + " ".join(
        f"--{k.replace('_', '-')} {getattr(args, k)}"
        for k in ("size", "device", "precision", "prompts", "group", "max_new", "runs", "steps", "warmup")
    )
    text = report(results, args, n_params, cmd)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
