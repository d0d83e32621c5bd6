"""Supervised fine-tuning of the tiny base model on worked solutions (the embedded default's ``prepare_base``).

Each training example is ``build_prompt(problem, template) + " " + solution + EOS``, with the loss (token mean
of the negative log-likelihood) on the response tokens only: the leading space, the worked solution and EOS.
The ``sft`` split's solutions carry injected mistakes (:mod:`acerl.data.synthetic`), so the model learns to
make them too and starts RL as an imperfect reasoner.

:func:`prepare_tiny_base` builds the character tokenizer and the tiny Llama, trains with AdamW (linear
warm-up, cosine decay), and saves a Hugging Face folder (``model.safetensors``, ``config.json``, tokenizer
files) plus ``sft_metrics.json`` (loss curve, teacher-forced greedy accuracy on evaluation files), atomically.
``acerl sft`` runs it by hand (:func:`main`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import acerl.pipeline.io
from acerl.config.sections import SFTConfig, TinyModelConfig
from acerl.models.tiny import build_tiny_model, count_parameters
from acerl.models.tokenizer import build_char_tokenizer
from acerl.optim import adamw
from acerl.pipeline.io import read_jsonl
from acerl.prompts import build_prompt

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
METRICS_FILE = "sft_metrics.json"


# -------------------------------------------------------------------------------------------- examples
def encode_example(
    tokenizer: PreTrainedTokenizerBase, problem: str, solution: str, template: str = "plain"
) -> tuple[list[int], list[int]]:
    """Token ids of ``prompt + " " + solution + EOS`` and labels masking the prompt with ``-100``.

    The prompt is encoded as a sampler encodes it (with the tokenizer's special tokens, i.e. BOS), the
    response without special tokens, followed by EOS. Returns ``(input_ids, labels)``, both of length L.
    """
    prompt_ids = tokenizer(build_prompt(problem, template, tokenizer))["input_ids"]
    response_ids = tokenizer(" " + solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids + response_ids, [IGNORE_INDEX] * len(prompt_ids) + response_ids


def collate(examples: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch: ``input_ids``, ``attention_mask``, ``labels``, each ``(B, L_max)``."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(examples):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
        attention_mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def pack_examples(
    examples: Sequence[tuple[list[int], list[int]]], pad_id: int, capacity: int | None = None
) -> dict[str, torch.Tensor]:
    """Pack examples into rows for padding-free training: ``input_ids``, ``labels``, ``position_ids``, ``(R, W)``.

    Rows are filled first-fit by decreasing length up to ``capacity`` tokens (default: twice the longest
    example). Positions restart at 0 for every example (and for a row's trailing padding); called with
    ``attention_mask=None`` and ``use_cache=False``, transformers then builds a block-diagonal causal mask, so no
    token sees another example and the loss equals that of the padded batch from :func:`collate` (up to
    float rounding) while computing on fewer tokens (how many fewer on the default SFT data:
    docs/tiny_task.md).
    """
    longest = max(len(ids) for ids, _ in examples)
    capacity = max(capacity or 2 * longest, longest)
    rows: list[list[int]] = []
    fill: list[int] = []
    for k in sorted(range(len(examples)), key=lambda k: -len(examples[k][0])):
        n = len(examples[k][0])
        row = next((r for r in range(len(rows)) if fill[r] + n <= capacity), None)
        if row is None:
            rows.append([])
            fill.append(0)
            row = len(rows) - 1
        rows[row].append(k)
        fill[row] += n
    width = max(fill)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for r, members in enumerate(rows):
        start = 0
        for k in members:
            ids, lab = examples[k]
            input_ids[r, start : start + len(ids)] = torch.tensor(ids)
            labels[r, start : start + len(ids)] = torch.tensor(lab)
            position_ids[r, start : start + len(ids)] = torch.arange(len(ids))
            start += len(ids)
        position_ids[r, start:] = torch.arange(width - start)
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}


def response_token_stats(
    model: PreTrainedModel, batch: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """Teacher-forced per-sequence statistics over the response tokens.

    Returns ``(nll_sum, n_tokens, all_argmax)``, each ``(B,)``: summed NLL of the labelled tokens, their count,
    and whether every labelled token is the model's argmax, i.e. whether greedy decoding reproduces the
    response exactly.
    """
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["labels"][:, 1:]
    mask = targets != IGNORE_INDEX
    safe = targets.clamp(min=0)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    nll_sum = -(logp * mask).sum(-1)
    hit = (logits.argmax(-1) == safe) | ~mask
    return nll_sum, mask.sum(-1), hit.all(-1)


@torch.no_grad()
def teacher_forced_eval(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[Mapping[str, Any]],
    template: str = "plain",
    batch_size: int = 128,
) -> dict[str, float]:
    """Greedy accuracy and NLL on rows' (correct) worked solutions, by teacher forcing (no sampling).

    ``greedy_exact`` is the fraction of rows whose whole solution + EOS is the argmax at every position: the
    problems that greedy decoding solves in the canonical way (a lower bound on greedy accuracy).
    ``response_nll`` is the mean NLL per response token.
    """
    was_training = model.training
    model.eval()  # type: ignore[no-untyped-call]  # PreTrainedModel.eval is unannotated
    exact, nll, tokens = 0, 0.0, 0
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            batch = collate([encode_example(tokenizer, r["problem"], r["solution"], template) for r in chunk],
                            tokenizer.pad_token_id)  # fmt: skip
            nll_sum, n_tok, all_argmax = response_token_stats(model, _to_model_device(batch, model))
            exact += int(all_argmax.sum())
            nll += float(nll_sum.sum())
            tokens += int(n_tok.sum())
    finally:
        model.train(was_training)
    return {"greedy_exact": exact / max(len(rows), 1), "response_nll": nll / max(tokens, 1), "n": len(rows)}


def _to_model_device(batch: Mapping[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The batch (built on the host) on the model's device."""
    device = next(model.parameters()).device
    return {k: v.to(device) for k, v in batch.items()}


# -------------------------------------------------------------------------------------------- training
def shuffled_batches(n: int, batch_size: int, seed: int) -> Iterator[list[int]]:
    """Endless batches of indices into ``n`` examples: seeded per-epoch permutations, each example once per
    epoch (a batch may straddle two epochs)."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while True:
        while len(order) < batch_size:
            order += torch.randperm(n, generator=generator).tolist()
        yield order[:batch_size]
        order = order[batch_size:]


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Learning rate at optimizer step ``step`` (0-based): linear warm-up, then cosine to ``lr*min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    decay_steps = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / decay_steps, 1.0)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def train_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[Mapping[str, Any]],
    cfg: SFTConfig,
    seed: int = 0,
    progress: bool = True,
) -> list[tuple[int, float]]:
    """Fine-tune ``model`` in place on ``rows`` (``problem`` + ``solution``); returns the loss curve.

    Batches come from :func:`shuffled_batches` (seeded; every row once per epoch) and are packed by
    :func:`pack_examples`. The loss is the token mean of the response NLL over the batch (Hugging Face's causal-LM
    loss with prompt labels ``-100``). The curve holds
    ``(step, mean loss over the last log_every steps)``.
    """
    if not rows:
        raise ValueError("no SFT rows")
    examples = [encode_example(tokenizer, r["problem"], r["solution"], cfg.template) for r in rows]
    batches = shuffled_batches(len(examples), cfg.batch_size, seed)
    optimizer = adamw(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    model.train()
    curve: list[tuple[int, float]] = []
    window: list[float] = []
    bar = tqdm(range(cfg.steps), desc="sft", disable=not progress, dynamic_ncols=True)
    for step in bar:
        idx = next(batches)
        batch = _to_model_device(pack_examples([examples[i] for i in idx], tokenizer.pad_token_id), model)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = model(**batch, use_cache=False).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        window.append(loss.item())
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            mean = sum(window) / len(window)
            curve.append((step + 1, mean))
            window = []
            bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr_at(step, cfg):.2e}")
            logger.info("sft step %d/%d loss %.4f lr %.2e", step + 1, cfg.steps, mean, lr_at(step, cfg))
    model.eval()  # type: ignore[no-untyped-call]  # PreTrainedModel.eval is unannotated
    return curve


# ------------------------------------------------------------------------------------------------ save
def save_hf_folder(
    out_dir: Path | str,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    metrics: Mapping[str, Any],
) -> Path:
    """Write model (safetensors), tokenizer and ``sft_metrics.json`` to ``out_dir`` atomically (a killed job
    leaves the old folder or none, never a partial one)."""
    return acerl.pipeline.io.save_hf_folder(
        Path(out_dir), model, tokenizer, {METRICS_FILE: json.dumps(metrics, indent=2) + "\n"}
    )


def prepare_tiny_base(
    out_dir: Path | str,
    sft_data: Path | str,
    model_cfg: TinyModelConfig | None = None,
    sft_cfg: SFTConfig | None = None,
    seed: int = 0,
    threads: int = 1,
    eval_data: Mapping[str, Path | str] | None = None,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> Path:
    """Build the character tokenizer and tiny Llama, SFT it on ``sft_data``, save an HF folder at ``out_dir``.

    ``sft_data`` is a JSON Lines file with ``problem`` and ``solution`` (the synthetic ``sft`` split);
    ``eval_data`` maps names to JSON Lines files whose first ``sft_cfg.eval_rows`` rows are scored at the end
    by :func:`teacher_forced_eval`. ``threads`` is passed to ``torch.set_num_threads`` (restored afterwards);
    ``device`` is where the model trains (``cpu`` or ``cuda``; another device gives other weights).
    Same inputs, seed and thread count -> identical weights on CPU (another thread count changes the float
    summation order, hence the weights in the last bits and, through training, the samples). Returns ``out_dir``.
    """
    model_cfg = model_cfg or TinyModelConfig()
    sft_cfg = sft_cfg or SFTConfig()
    rows = read_jsonl(sft_data, required=("problem", "solution"))
    evals = {
        name: read_jsonl(path, required=("problem", "solution")) for name, path in (eval_data or {}).items()
    }
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        tokenizer = build_char_tokenizer(model_max_length=model_cfg.max_position_embeddings)
        # transformers wraps PreTrainedModel.to with functools.wraps, whose typing loses the bound self
        model = build_tiny_model(model_cfg, tokenizer, seed=seed).to(device)  # type: ignore[arg-type]
        n_params = count_parameters(model)
        logger.info("tiny model: %d parameters; SFT on %d rows from %s", n_params, len(rows), sft_data)
        curve = train_sft(model, tokenizer, rows, sft_cfg, seed=seed, progress=progress)
        train_time = time.perf_counter() - start
        scores = {
            name: teacher_forced_eval(model, tokenizer, ev[: sft_cfg.eval_rows], sft_cfg.template)
            for name, ev in evals.items()
        }
        for name, score in scores.items():
            logger.info("after SFT, %s: greedy exact %.3f, response NLL %.4f", name, score["greedy_exact"],
                        score["response_nll"])  # fmt: skip
        metrics = {
            "seed": seed,
            "threads": threads,
            "model": model_cfg.model_dump(mode="json"),
            "sft": sft_cfg.model_dump(mode="json"),
            "num_parameters": n_params,
            "num_rows": len(rows),
            "mistake_fraction": sum(r.get("mistake") is not None for r in rows) / len(rows),
            "train_seconds": round(train_time, 2),
            "loss_curve": [[s, round(v, 5)] for s, v in curve],
            "final_loss": round(curve[-1][1], 5),
            "eval": scores,
        }
        return save_hf_folder(out_dir, model, tokenizer, metrics)
    finally:
        torch.set_num_threads(previous_threads)


def _config_from_pairs(cls: type, pairs: Sequence[str]) -> Any:
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    return cls(**values)


def main(argv: Sequence[str] | None = None) -> int:
    """``acerl sft --data data/sft.jsonl --out models/base/tiny [--eval name=path ...]``."""
    parser = argparse.ArgumentParser(prog="acerl sft", description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="SFT JSON Lines (problem, solution)")
    parser.add_argument("--out", required=True, help="output HF folder")
    parser.add_argument("--eval", nargs="*", default=[], metavar="NAME=PATH", help="files scored after SFT")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", nargs="*", default=[], metavar="KEY=VALUE", help="TinyModelConfig fields")
    parser.add_argument("--sft", nargs="*", default=[], metavar="KEY=VALUE", help="SFTConfig fields")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    evals = dict(item.split("=", 1) for item in args.eval)
    prepare_tiny_base(
        args.out,
        args.data,
        _config_from_pairs(TinyModelConfig, args.model),
        _config_from_pairs(SFTConfig, args.sft),
        seed=args.seed,
        threads=args.threads,
        eval_data=evals,
    )
    return 0


if __name__ == "__main__":
    from acerl.commands import run_alias

    sys.exit(run_alias("acerl.models.sft", main))
