"""Helpers for the trainer tests: a tiny untrained Llama, a small synthetic training set, a fast config and a
stand-in verifier (a uniquely named module: every test folder has its own ``conftest``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acerl.config import Config, load_config
from acerl.pipeline import paths

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Verdict:
    correct: bool


class DigitVerifier:
    """A deterministic stand-in reward for an untrained model: correct iff the response contains the gold
    answer's last character. It gives mixed groups, which the real grader never does for random text."""

    def __init__(self) -> None:
        self.calls = 0

    def grade_many(self, items: Sequence[tuple[str, str]], *, progress: bool | None = None) -> list[Verdict]:
        self.calls += 1
        return [Verdict(gold.strip()[-1:] in response) for response, gold in items]


def make_root(root: Path, train_size: int = 48, default_arch: bool = False) -> Path:
    """``root`` with ``data/train.jsonl`` and ``models/base/tiny`` (an untrained tiny Llama: a very small one,
    or with ``default_arch`` the embedded default's architecture)."""
    from acerl.data.synthetic import write_splits
    from acerl.models.tiny import TinyModelConfig, build_tiny_model
    from acerl.models.tokenizer import build_char_tokenizer

    sizes = {"synth_easy": 0, "synth_hard": 0, "heldout": 0, "sft": 0, "train": train_size}
    write_splits(paths.data_file(root, "train").parent, seed=0, sizes=sizes)
    tok = build_char_tokenizer(model_max_length=128)
    arch = (
        TinyModelConfig(max_position_embeddings=128)
        if default_arch
        else TinyModelConfig(
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            num_kv_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    )
    model = build_tiny_model(arch, tok, seed=0)
    out = paths.base_model_dir(root, "tiny")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return root


TRAIN_OVERRIDES = [
    "models.tiny.train.total_steps=3",
    "models.tiny.train.prompts_per_step=4",
    "models.tiny.train.group_size=4",
    "models.tiny.train.mini_batch_size=2",
    "models.tiny.train.micro_batch_size_per_gpu=4",
    "models.tiny.train.max_prompt_length=64",
    "models.tiny.train.max_response_length=16",
    "models.tiny.train.lr=0.001",
    "models.tiny.train.save_every=1",
    "models.tiny.train.keep_checkpoints=2",
    "families.dapo.overlong.buffer=4",
    "study.diagnostics.every=2",
    "study.diagnostics.early_steps=0",
]


def make_config(*extra: str) -> Config:
    return load_config(REPO / "config" / "config.yaml", [*TRAIN_OVERRIDES, *extra])


def read_jsonl_records(path: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]
