"""Benchmark the local trainer: steps/second against TRL's GRPOTrainer, and ACE-GRPO's overhead over GRPO.

Same everything on both sides: the embedded default's tiny Llama (``TinyModelConfig()``, random init, seed 0),
the synthetic training prompts with the ``plain`` template, 16 prompts x G=8 rollouts per step, up to 64 new
tokens at temperature 1.0, token-mean clipped surrogate (TRL ``loss_type="dapo"``) with a beta=0.001 KL term to
a frozen reference, AdamW, one optimizer step per training step, the project's grader (in-process) as
reward, CPU, one torch thread.

All trainers advance in lockstep: after each TRL step (from a TRL callback, outside TRL's timing), one step
of every local variant (GRPO and ACE-GRPO, each with `recompute` and with `rollout` old log-probs; same seed, so
identical rollouts at step 1), so load from other processes hits all of them alike. Step times are medians
over the measured steps (warm-up steps excluded).

    .venv/bin/python benchmarks/bench_trainer.py --steps 12 --warmup 2 --ace-reps 20 --out benchmarks/results/trainer.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
PROMPTS_PER_STEP, GROUP, MAX_NEW, LR, BETA = 16, 8, 64, 1e-4, 0.001
OVERRIDES = [
    "models.tiny.train.total_steps=100000",
    f"models.tiny.train.prompts_per_step={PROMPTS_PER_STEP}",
    f"models.tiny.train.group_size={GROUP}",
    f"models.tiny.train.mini_batch_size={PROMPTS_PER_STEP}",
    f"models.tiny.train.micro_batch_size_per_gpu={PROMPTS_PER_STEP * GROUP}",
    f"models.tiny.train.max_response_length={MAX_NEW}",
    f"models.tiny.train.lr={LR}",
    f"models.tiny.train.kl_coef={BETA}",
    "families.grpo.loss_agg_mode=token-mean",
]


def make_root(root: Path, train_size: int = 2048) -> int:
    """Synthetic training set and a random-init tiny base model under ``root``; returns the parameter count."""
    from acerl.data.synthetic import write_splits
    from acerl.models.tiny import TinyModelConfig, build_tiny_model, count_parameters
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.pipeline import paths

    sizes = {"synth_easy": 0, "synth_hard": 0, "heldout": 0, "sft": 0, "train": train_size}
    write_splits(root / "data", seed=0, sizes=sizes)
    tok = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tok, seed=0)
    model.save_pretrained(paths.base_model_dir(root, "tiny"))
    tok.save_pretrained(paths.base_model_dir(root, "tiny"))
    return count_parameters(model)


def load() -> float:
    return os.getloadavg()[0]


VARIANTS = {  # label -> (method, log pi_old source)
    "grpo": ("grpo", "recompute"),
    "ace_grpo": ("ace_grpo", "recompute"),
    "grpo_rollout_lp": ("grpo", "rollout"),
    "ace_grpo_rollout_lp": ("ace_grpo", "rollout"),
}


class LocalTrainers:
    """The local trainer's variants on one root; :meth:`step_all` runs one training step of each in turn."""

    def __init__(self, root: Path, warmup: int) -> None:
        from acerl.config import Run, load_config
        from acerl.config.settings import resolve
        from acerl.grading import Grader
        from acerl.train.run import init_state

        cfg = load_config(REPO / "config" / "config.yaml", OVERRIDES)
        self.setups = {k: resolve(cfg, Run("tiny", m, 0), old_logprobs=o) for k, (m, o) in VARIANTS.items()}
        self.states = {
            k: init_state(root, Run("tiny", m, 0), self.setups[k], torch.device("cpu"))
            for k, (m, _) in VARIANTS.items()
        }
        self.grader = Grader(workers=0)
        self.warmup, self.calls = warmup, 0
        self.records: dict[str, list[dict[str, float]]] = {k: [] for k in VARIANTS}

    def step_all(self) -> None:
        from acerl.train.algorithm import train_step

        for k in VARIANTS:
            state, data = self.states[k]
            start, cpu = time.perf_counter(), time.process_time()
            metrics = train_step(state, self.setups[k], data, self.grader)
            metrics["wall"] = time.perf_counter() - start
            metrics["cpu"] = time.process_time() - cpu
            metrics["load"] = load()
            if self.calls >= self.warmup:
                self.records[k].append(metrics)
        self.calls += 1


def bench_ace_overhead(root: Path, reps: int) -> dict[str, list[float]]:
    """CPU seconds of everything after the rollout (log-probs, advantages, update) for GRPO and ACE-GRPO on the
    *same* rollout batch, alternating in ABBA order, plus the advantage call alone: ACE's cost without rollout
    noise.

    Rewards are seeded random 0/1 verdicts (an untrained model earns none), so half the groups are mixed.
    """
    from acerl.algos.advantages import ADVANTAGE_ESTIMATORS
    from acerl.config import Run, load_config
    from acerl.config.settings import resolve
    from acerl.grading import Grader
    from acerl.train.algorithm import update_policy
    from acerl.train.logprobs import batch_logprobs
    from acerl.train.metrics import Timer
    from acerl.train.rollouts import collect_rollouts
    from acerl.train.run import init_state

    cfg = load_config(REPO / "config" / "config.yaml", OVERRIDES)
    setups = {m: resolve(cfg, Run("tiny", m, 0)) for m in ("grpo", "ace_grpo")}
    states = {m: init_state(root, Run("tiny", m, 0), setups[m], torch.device("cpu"))[0] for m in setups}
    state, data = init_state(root, Run("tiny", "grpo", 0), setups["grpo"], torch.device("cpu"))
    with Grader(workers=0) as grader:
        ro = collect_rollouts(state, setups["grpo"], data, grader, Timer())
    batch = ro.batch
    scores = (torch.rand(len(batch), generator=torch.Generator().manual_seed(0)) < 0.5).float()
    h = setups["grpo"].hyper
    out: dict[str, list[float]] = {k: [] for k in ("grpo", "ace_grpo", "grpo_adv", "ace_grpo_adv")}
    for rep in range(reps):
        order = ("grpo", "ace_grpo") if rep % 2 == 0 else ("ace_grpo", "grpo")  # ABBA: no order bias
        for m in order:
            setup, st = setups[m], states[m]
            start = time.process_time()
            old, _ = batch_logprobs(st.model, batch, h.temperature, h.micro_batch_size_per_gpu)
            ref, _ = batch_logprobs(st.ref_model, batch, h.temperature, h.micro_batch_size_per_gpu)
            adv_start = time.process_time()
            adv = ADVANTAGE_ESTIMATORS.get(setup.estimator.name)(
                scores,
                ro.group_ids,
                old,
                ref,
                batch.response_mask,
                correct=scores > 0,  # the random verdicts (ACE amplifies incorrect rollouts)
                **setup.estimator.kwargs(),
            )
            out[f"{m}_adv"].append(time.process_time() - adv_start)
            update_policy(st, setup, batch, old, ref, adv)
            out[m].append(time.process_time() - start)
    return out


def bench_trl(
    root: Path,
    steps: int,
    warmup: int,
    after_step: Callable[[], None],
    *,
    use_cpu: bool = True,
    bf16: bool = False,
    prompts_per_step: int = PROMPTS_PER_STEP,
    group: int = GROUP,
    max_new: int = MAX_NEW,
) -> list[dict[str, float]]:
    """Per-step wall and CPU time of TRL's GRPOTrainer on the same model, prompts and settings; ``after_step``
    runs after each TRL step (outside its timing), so the local steps are interleaved with TRL's. ``use_cpu``
    False: TRL's (accelerate's) device, the GPU; ``bf16``: its bf16 mixed precision (fp32 master weights)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from acerl.grading import Grader
    from acerl.pipeline import paths
    from acerl.pipeline.io import read_jsonl
    from acerl.prompts import build_prompt

    rows = read_jsonl(paths.data_file(root, "train"))
    dataset = Dataset.from_list(
        [{"prompt": build_prompt(r["problem"], "plain"), "answer": r["answer"]} for r in rows]
    )
    base = paths.base_model_dir(root, "tiny")
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    grader = Grader(workers=0)

    def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [float(v.correct) for v in grader.grade_many(list(zip(completions, answer, strict=True)))]

    times: list[dict[str, float]] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.start, self.cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            if torch.cuda.is_available() and not use_cpu:
                torch.cuda.synchronize()
            wall, cpu = time.perf_counter() - self.start, time.process_time() - self.cpu
            times.append({"wall": wall, "cpu": cpu, "load": load()})

    class Interleave(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            after_step()

    with tempfile.TemporaryDirectory() as out_dir:
        args = GRPOConfig(
            output_dir=out_dir,
            use_cpu=use_cpu,
            bf16=bf16,
            per_device_train_batch_size=prompts_per_step * group,
            gradient_accumulation_steps=1,
            num_generations=group,
            max_completion_length=max_new,
            temperature=1.0,
            top_p=1.0,
            beta=BETA,
            epsilon=0.2,
            loss_type="dapo",
            num_iterations=1,
            learning_rate=LR,
            weight_decay=0.0,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            max_steps=warmup + steps,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            seed=0,
            dataloader_num_workers=0,
            disable_dropout=True,
        )
        trainer = GRPOTrainer(
            model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tok,
            callbacks=[StepTimer(), Interleave()],
        )  # fmt: skip
        trainer.train()
        lengths = [
            h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h
        ]
    grader.close()
    for t, n in zip(times, lengths, strict=False):
        t["response_length_mean"] = n
    return times[warmup:]


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(
    local: dict[str, list[dict[str, float]]],
    trl: list[dict[str, float]],
    cmd: str,
    args: argparse.Namespace,
    n_params: int,
    ace: dict[str, list[float]],
) -> str:
    g, a = local["grpo"], local["ace_grpo"]
    gr, ar = local["grpo_rollout_lp"], local["ace_grpo_rollout_lp"]
    rows = (
        ("acerl local, GRPO", g),
        ("acerl local, ACE-GRPO", a),
        ("acerl local, GRPO, rollout log-probs as old", gr),
        ("acerl local, ACE-GRPO, rollout log-probs as old", ar),
        ("TRL 1.16 GRPOTrainer", trl),
    )
    med = {name: {k: median([m[k] for m in ms]) for k in ("wall", "cpu")} for name, ms in rows}
    lengths = {
        name: median(
            [m.get("train/response_length_mean", m.get("response_length_mean", float("nan"))) for m in ms]
        )
        for name, ms in rows
    }
    trl_med = med["TRL 1.16 GRPOTrainer"]
    speedup = {k: trl_med[k] / med["acerl local, GRPO"][k] for k in ("wall", "cpu")}
    speedup_r = {
        k: trl_med[k] / med["acerl local, GRPO, rollout log-probs as old"][k] for k in ("wall", "cpu")
    }

    def paired(x_runs: list[dict[str, float]], y_runs: list[dict[str, float]], key: str) -> float:
        return median([(y[key] - x[key]) / x[key] for x, y in zip(x_runs, y_runs, strict=True)])

    overhead = {k: paired(g, a, k) for k in ("wall", "cpu")}
    overhead_r = {k: paired(gr, ar, k) for k in ("wall", "cpu")}
    ace_paired = median([(y - x) / x for x, y in zip(ace["grpo"], ace["ace_grpo"], strict=True)])
    ace_of_step = (
        median([y - x for x, y in zip(ace["grpo"], ace["ace_grpo"], strict=True)])
        / med["acerl local, GRPO"]["cpu"]
    )
    parts = ("rollout", "reward", "logprobs", "advantage", "update")
    loads = [m["load"] for _, ms in rows for m in ms]
    lines = [
        "# Local trainer benchmark",
        "",
        f"Command: `{cmd}`",
        "",
        f"Setup: the embedded default's tiny Llama ({n_params / 1e6:.2f}M parameters, random init), "
        f"{PROMPTS_PER_STEP} prompts x G={GROUP} rollouts per step, <= {MAX_NEW} new tokens at T=1.0, token-mean "
        f"clipped surrogate + {BETA} x low_var_kl to a frozen reference, AdamW lr {LR}, one optimizer step per "
        "training step, the project's grader in-process as reward, CPU, one torch thread. "
        f"{args.steps} measured steps per trainer after {args.warmup} warm-up steps; medians.",
        "",
        f"1-minute load average {min(loads):.1f}-{max(loads):.1f} during the runs (this process alone is 1): "
        "with other jobs on the machine wall-clock times are inflated and noisy, and CPU time of the process "
        "(`process_time`, one thread) is the fairer measure of work. All trainers advance in lockstep (after "
        "each TRL step, one step of every local variant), so load changes hit them alike.",
        "",
        "| trainer | median wall s/step | median CPU s/step | steps/s (wall) | mean response length |",
        "|---|---|---|---|---|",
    ]
    for name, _ in rows:
        lines.append(
            f"| {name} | {med[name]['wall']:.3f} | {med[name]['cpu']:.3f} | {1 / med[name]['wall']:.3f} "
            f"| {lengths[name]:.1f} |"
        )
    lines += [
        "",
        f"Speed-up of the local trainer over TRL (GRPO): **{speedup['cpu']:.2f}x** in CPU time "
        f"({speedup['wall']:.2f}x wall) with the default `old_logprobs=recompute` (verl's values; here the update "
        "is one forward pass, so they come from that pass, no extra forward); "
        f"**{speedup_r['cpu']:.2f}x** CPU ({speedup_r['wall']:.2f}x wall) with the sampler's log-probs as old "
        "log-probs (`old_logprobs=rollout`; TRL does the same when on-policy).",
        "",
        f"ACE overhead, controlled ({len(ace['grpo'])} repetitions in ABBA order on one identical rollout batch, "
        "CPU seconds of log-probs + advantages + update):",
        f"- GRPO {median(ace['grpo']):.4f} s, ACE-GRPO {median(ace['ace_grpo']):.4f} s: median paired difference "
        f"{100 * ace_paired:+.2f}% of that part, {100 * ace_of_step:+.3f}% of a full GRPO step;",
        f"- the advantage call alone: GRPO {1e3 * median(ace['grpo_adv']):.2f} ms, ACE {1e3 * median(ace['ace_grpo_adv']):.2f} ms "
        f"(+{1e3 * (median(ace['ace_grpo_adv']) - median(ace['grpo_adv'])):.2f} ms = "
        f"{100 * (median(ace['ace_grpo_adv']) - median(ace['grpo_adv'])) / med['acerl local, GRPO']['cpu']:.3f}% of "
        "a full GRPO step).",
        "",
        "ACE-GRPO vs GRPO in the training runs above (same seed, paired steps; rollouts diverge after step 1, so "
        "these differences are mostly sampling noise):",
        f"- default: {100 * overhead['cpu']:+.2f}% CPU, {100 * overhead['wall']:+.2f}% wall;",
        f"- `old_logprobs=rollout`: {100 * overhead_r['cpu']:+.2f}% CPU, {100 * overhead_r['wall']:+.2f}% wall.",
        "",
        "Wall-time split of a local GRPO step (medians, seconds):",
        "",
        "| " + " | ".join(parts) + " |",
        "|" + "---|" * len(parts),
        "| " + " | ".join(f"{median([m[f'timing/{p}'] for m in g]):.3f}" for p in parts) + " |",
        "",
        "Raw per-step CPU seconds: "
        + json.dumps(
            {
                "grpo": [round(m["cpu"], 3) for m in g],
                "ace_grpo": [round(m["cpu"], 3) for m in a],
                "trl": [round(m["cpu"], 3) for m in trl],
            }
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps", type=int, default=12, help="measured steps per trainer (and per local block x2)"
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--ace-reps", type=int, default=20, help="repetitions of the controlled ACE comparison"
    )
    parser.add_argument("--out", type=Path, default=None, help="markdown report to write")
    args = parser.parse_args()
    from acerl.pipeline.runtime import configure_torch

    configure_torch(1)  # as every pipeline job: one thread, denormals flushed (for TRL too: same process)
    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n_params = make_root(root)
        local_trainers = LocalTrainers(root, args.warmup)
        trl = bench_trl(root, args.steps, args.warmup, after_step=local_trainers.step_all)
        local_trainers.grader.close()
        local = local_trainers.records
        ace = bench_ace_overhead(root, args.ace_reps)
    cmd = ".venv/bin/python benchmarks/bench_trainer.py " + " ".join(
        f"--{k} {v}" for k, v in (("steps", args.steps), ("warmup", args.warmup), ("ace-reps", args.ace_reps))
    )
    text = report(local, trl, cmd, args, n_params, ace)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
