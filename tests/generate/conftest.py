"""Fixtures for the sampler tests: a freshly initialised tiny Llama with the char tokenizer (no download)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import build_char_tokenizer

TINY = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An HF folder (safetensors + tokenizer) of a random tiny Llama: near-uniform next-token distributions
    over ~100 characters, so EOS ends about 1% of the rollouts per step."""
    out = tmp_path_factory.mktemp("tiny_model")
    tokenizer = build_char_tokenizer()
    build_tiny_model(TINY, tokenizer, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
