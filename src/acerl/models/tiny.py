"""The embedded default's base architecture: a tiny ``LlamaForCausalLM`` built from scratch.

No download: the model is constructed from a ``LlamaConfig`` (RoPE, RMSNorm, SwiGLU, tied embeddings) with a
seeded initialisation, so it loads with ``AutoModelForCausalLM`` and vLLM like any Llama checkpoint. Its
settings (``models.<m>.tiny``) are :class:`acerl.config.sections.TinyModelConfig`.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from acerl.config.sections import TinyModelConfig

__all__ = ["TinyModelConfig", "build_tiny_model", "count_parameters", "llama_config"]


def llama_config(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    """The ``LlamaConfig`` for ``cfg`` with the tokenizer's vocabulary size and special-token ids."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=cfg.tie_word_embeddings,
        initializer_range=cfg.initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_model(
    cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int = 0
) -> LlamaForCausalLM:
    """A freshly initialised tiny Llama (float32, train mode); same ``seed`` -> same weights."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(llama_config(cfg, tokenizer))  # type: ignore[no-untyped-call]  # unannotated
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (a tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
