"""The embedded default's base architecture: a tiny ``LlamaForCausalLM`` built from scratch.

No download: the model is constructed from a ``LlamaConfig`` (RoPE, RMSNorm, SwiGLU, tied embeddings) with a
seeded initialisation, so it loads with ``AutoModelForCausalLM`` and vLLM like any Llama checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase


@dataclass(frozen=True)
class TinyModelConfig:
    """Architecture of the tiny Llama (defaults: 341K parameters)."""

    hidden_size: int = 128  # model width d
    num_layers: int = 2  # transformer blocks
    num_heads: int = 4  # attention heads (head dim = hidden_size / num_heads)
    num_kv_heads: int = 4  # key/value heads (= num_heads: plain multi-head attention)
    intermediate_size: int = 256  # SwiGLU hidden width
    max_position_embeddings: int = 256  # longest prompt + response in tokens (characters)
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads != 0:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}"
            )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


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
        rope_theta=cfg.rope_theta,
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
        model = LlamaForCausalLM(llama_config(cfg, tokenizer))
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (a tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
