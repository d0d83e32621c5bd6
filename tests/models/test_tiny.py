"""Tiny Llama construction: seeded, tied embeddings, the tokenizer's ids in the config."""

from __future__ import annotations

import pytest
import torch

from acerl.models.tiny import TinyModelConfig, build_tiny_model, count_parameters, llama_config
from acerl.models.tokenizer import build_char_tokenizer

SMALL = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_same_seed_same_weights_and_global_rng_untouched(tokenizer):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = build_tiny_model(SMALL, tokenizer, seed=0)
    assert torch.equal(torch.rand(3), expected_next)
    b = build_tiny_model(SMALL, tokenizer, seed=0)
    c = build_tiny_model(SMALL, tokenizer, seed=1)
    assert all(
        torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_config_and_size(tokenizer):
    cfg = llama_config(TinyModelConfig(), tokenizer)
    assert (cfg.vocab_size, cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (100, 0, 1, 2)
    model = build_tiny_model(TinyModelConfig(), tokenizer)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert 50_000 < count_parameters(model) < 1_000_000
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id


def test_invalid_shapes_raise():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        TinyModelConfig(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="divisible by num_kv_heads"):
        TinyModelConfig(num_heads=4, num_kv_heads=3)
