"""The tiny Llama without transformers' modelling code: the same forward, op for op, in plain torch.

A job that samples, trains or diagnoses the embedded default's 0.34M-parameter model used to spend most of its
CPU time importing: ``AutoModelForCausalLM`` and ``AutoTokenizer`` pull in transformers' generation, masking
and kernel machinery (``torch._dynamo`` among them), several times the CPU of the sampling itself
(docs/benchmarks.md, "Where `make test` goes", "The import floor").
:class:`LeanLlamaForCausalLM` is that model's forward as plain torch modules with transformers' parameter names,
so it loads the same ``model.safetensors`` and writes a folder transformers loads back.

It computes exactly what ``LlamaForCausalLM`` computes with ``attn_implementation="sdpa"`` (transformers 5.x):
the same modules in the same order (RMSNorm in float32, rotate-half RoPE with float32 cos/sin, gated SiLU MLP,
tied LM head), the same attention masks (no mask and ``is_causal`` where transformers skips it; otherwise the
boolean causal-and-padding mask, with the keys and values repeated per head group) and the same
``scaled_dot_product_attention`` calls, with and without a KV cache. ``tests/models/test_lean.py`` checks the
logits, gradients, caches and saved files bit for bit against transformers on the configurations it accepts;
everything else (other architectures, biases, RoPE scaling, other dtypes) is loaded with transformers
(:func:`acerl.models.loading.load_model_folder`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from acerl.models.kv_cache import BufferKVLayer, KVCache, KVLayer

__all__ = [
    "LeanConfig",
    "LeanLlamaForCausalLM",
    "LeanOutput",
    "lean_config",
]

CONFIG_FILES = ("config.json", "generation_config.json")
"""The model files a lean folder carries over unchanged (transformers writes them back byte for byte)."""
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class LeanConfig:
    """The settings of a plain Llama causal LM (what :func:`lean_config` reads from ``config.json``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    pad_token_id: int | None
    use_cache: bool = True
    model_type: str = "llama"
    # what the sampler's Llama-family check reads (acerl.generate.decoding.supports_llama_family)
    sliding_window: None = None
    attention_chunk_size: None = None
    layer_types: tuple[str, ...] = field(default=())
    pretraining_tp: int = 1
    partial_rotary_factor: float = 1.0

    def get_text_config(self, decoder: bool = True) -> LeanConfig:
        return self


def lean_config(raw: Mapping[str, Any]) -> LeanConfig | str:
    """The :class:`LeanConfig` of a ``config.json``, or why the lean model does not compute that model exactly."""
    if raw.get("model_type") != "llama" or raw.get("architectures") != ["LlamaForCausalLM"]:
        return f"architecture {raw.get('architectures')} (only LlamaForCausalLM)"
    checks = {
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "attention_dropout": 0.0,
        "dtype": "float32",
    }
    for key, want in checks.items():
        if raw.get(key, want) != want and not (key == "dtype" and raw[key] is None):
            return f"{key}={raw.get(key)!r} (only {want!r})"
    rope = raw.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default" or raw.get("rope_scaling"):
        return f"RoPE type {rope.get('rope_type')!r} / rope_scaling (only the default RoPE)"
    layer_types = raw.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types) or raw.get("sliding_window"):
        return "sliding-window or hybrid attention layers"
    heads = int(raw["num_attention_heads"])
    theta = rope.get("rope_theta", raw.get("rope_theta"))
    if theta is None:
        return "no rope_theta"
    return LeanConfig(
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        max_position_embeddings=int(raw["max_position_embeddings"]),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
        pad_token_id=raw.get("pad_token_id"),
        use_cache=bool(raw.get("use_cache", True)),
        layer_types=tuple(layer_types),
    )


# ------------------------------------------------------------------------------------------------- modules
class LeanRMSNorm(nn.Module):
    """``LlamaRMSNorm``: ``weight * x / sqrt(mean(x^2) + eps)``, computed in float32."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: Tensor) -> Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LeanRotaryEmbedding(nn.Module):
    """``LlamaRotaryEmbedding`` with the default RoPE: (cos, sin) of shape (B, T, head_dim) in float32."""

    inv_freq: Tensor

    def __init__(self, config: LeanConfig) -> None:
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (
            config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim)
        )
        self.attention_scaling = 1.0
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        inv_freq = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        positions = position_ids[:, None, :].float()
        device_type = x.device.type if x.device.type != "mps" else "cpu"
        with _no_autocast(device_type):  # force float32
            freqs = (inv_freq.float() @ positions.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def _no_autocast(device_type: str) -> Any:
    """Autocast switched off where it is on (transformers' ``maybe_autocast(enabled=False)``)."""
    from contextlib import nullcontext

    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return nullcontext()


def _rotate_half(x: Tensor) -> Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _repeat_kv(states: Tensor, n_rep: int) -> Tensor:
    """(B, Hkv, T, D) -> (B, Hkv * n_rep, T, D), each key/value head repeated for its query group."""
    batch, kv_heads, length, head_dim = states.shape
    if n_rep == 1:
        return states
    states = states[:, :, None, :, :].expand(batch, kv_heads, n_rep, length, head_dim)
    return states.reshape(batch, kv_heads * n_rep, length, head_dim)


class LeanAttention(nn.Module):
    """``LlamaAttention`` with the sdpa attention function."""

    def __init__(self, config: LeanConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(
        self,
        hidden_states: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Tensor | None,
        cache: KVCache | None,
    ) -> Tensor:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = (query * cos) + (_rotate_half(query) * sin)
        key = (key * cos) + (_rotate_half(key) * sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        if mask is None:  # transformers' sdpa path without a mask: grouped heads and is_causal in the kernel
            out = F.scaled_dot_product_attention(
                query, key, value, attn_mask=None, dropout_p=0.0, scale=self.scaling,
                is_causal=query.shape[2] > 1, enable_gqa=True,
            )  # fmt: skip
        else:
            out = F.scaled_dot_product_attention(
                query,
                _repeat_kv(key, self.num_key_value_groups),
                _repeat_kv(value, self.num_key_value_groups),
                attn_mask=mask, dropout_p=0.0, scale=self.scaling, is_causal=False,
            )  # fmt: skip
        out = out.transpose(1, 2).contiguous()
        projected: Tensor = self.o_proj(out.reshape(*input_shape, -1).contiguous())
        return projected


class LeanMLP(nn.Module):
    """``LlamaMLP``: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: LeanConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return out


class LeanDecoderLayer(nn.Module):
    """``LlamaDecoderLayer``: pre-norm attention and pre-norm MLP, each added to the residual."""

    def __init__(self, config: LeanConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = LeanAttention(config, layer_idx)
        self.mlp = LeanMLP(config)
        self.input_layernorm = LeanRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LeanRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, hidden_states: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: KVCache | None
    ) -> Tensor:
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), cos, sin, mask, cache)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states


class LeanLlamaModel(nn.Module):
    """``LlamaModel``: embedding, decoder layers, final norm, rotary embedding."""

    def __init__(self, config: LeanConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([LeanDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LeanRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = LeanRotaryEmbedding(config)


@dataclass
class LeanOutput:
    """What callers read from a transformers ``CausalLMOutputWithPast``."""

    logits: Tensor
    past_key_values: KVCache | None = None


def causal_mask(
    attention_mask: Tensor | None, batch: int, q_length: int, q_offset: int, device: torch.device
) -> Tensor | None:
    """The sdpa mask transformers builds for a causal forward of ``q_length`` new tokens after ``q_offset``
    cached ones: ``None`` (the kernel's ``is_causal``) when there is no padding and the query is one token or the
    whole sequence, else a (B, 1, Q, KV) boolean mask, True where a query may attend: key position <= query
    position and not padding."""
    kv_length = q_offset + q_length
    padding = None
    if attention_mask is not None:
        padding = attention_mask.to(device=device, dtype=torch.bool)
        if (extra := kv_length - padding.shape[-1]) > 0:
            padding = F.pad(padding, (0, extra))
        if padding.shape[-1] > kv_length:
            visible = padding[:, torch.arange(kv_length, device=padding.device)]
        else:
            visible = padding
    if (q_length == 1 or kv_length == q_length) and (padding is None or bool(visible.all())):
        return None
    q_idx = (torch.arange(q_length, device=device) + q_offset)[None, None, :, None]
    kv_idx = torch.arange(kv_length, device=device)[None, None, None, :]
    b_idx = torch.arange(batch, device=device)[:, None, None, None]
    mask = q_idx.new_ones((), dtype=torch.bool) & (kv_idx <= q_idx)
    if padding is not None:
        mask = mask & padding[b_idx, kv_idx]
    return mask.expand(batch, -1, q_length, kv_length)


class LeanLlamaForCausalLM(nn.Module):
    """``LlamaForCausalLM``'s forward for :class:`LeanConfig` models (see the module docstring).

    ``forward(input_ids, attention_mask, position_ids, past_key_values, use_cache, logits_to_keep)`` takes the
    arguments the pipeline passes transformers models and returns :class:`LeanOutput`. Build it with
    :meth:`from_folder`; :meth:`save_pretrained` writes a transformers folder.
    """

    def __init__(self, config: LeanConfig, files: Mapping[str, bytes] | None = None) -> None:
        super().__init__()
        self.config = config
        self.model = LeanLlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.files = dict(files or {})
        self.gradient_checkpointing = False

    @classmethod
    def from_folder(cls, folder: Path | str, device: torch.device | str = "cpu") -> LeanLlamaForCausalLM:
        """Load a transformers Llama folder (``config.json``, ``model.safetensors``); the model is in eval mode."""
        from safetensors.torch import load_file

        folder = Path(folder)
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config = lean_config(raw)
        if isinstance(config, str):
            raise ValueError(f"{folder}: the lean Llama cannot compute this model exactly: {config}")
        files = {name: (folder / name).read_bytes() for name in CONFIG_FILES if (folder / name).is_file()}
        model = cls(config, files)
        state = load_file(str(folder / WEIGHTS))
        if config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
        if missing or unexpected:
            from acerl.errors import BadInputError

            raise BadInputError(
                f"{folder / WEIGHTS}: missing weights {missing}, unexpected {unexpected}; the folder does not "
                "match its config.json: delete it and rerun the step that wrote it"
            )
        return model.to(device).eval()

    def gradient_checkpointing_enable(
        self, gradient_checkpointing_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """Recompute each decoder layer in the backward pass (``torch.utils.checkpoint``, non-reentrant unless
        ``gradient_checkpointing_kwargs`` says otherwise, as transformers)."""
        kwargs = dict(gradient_checkpointing_kwargs or {"use_reentrant": False})
        self.gradient_checkpointing = True
        self._checkpoint_kwargs = kwargs

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """An empty KV cache: growing (``capacity`` None) or preallocated for ``capacity`` positions."""
        n = self.config.num_hidden_layers
        if capacity is None:
            return KVCache([KVLayer() for _ in range(n)])
        return KVCache([BufferKVLayer(capacity) for _ in range(n)])

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
    ) -> LeanOutput:
        if use_cache is None:
            use_cache = self.config.use_cache
        checkpointing = self.gradient_checkpointing and self.training
        if checkpointing:  # as transformers: no cache while layers are recomputed (the trainer never asks)
            use_cache = False
        hidden = self.model.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = self.new_cache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = (torch.arange(hidden.shape[1], device=hidden.device) + past).unsqueeze(0)
        elif attention_mask is None and past_key_values is None:
            raise ValueError("position_ids without an attention_mask (packed sequences) are not supported")
        mask = causal_mask(attention_mask, hidden.shape[0], hidden.shape[1], past, hidden.device)
        cos, sin = self.model.rotary_emb(hidden, position_ids=position_ids)
        cache = None if checkpointing else past_key_values
        for layer in self.model.layers:
            if checkpointing:
                from torch.utils.checkpoint import checkpoint

                hidden = checkpoint(layer, hidden, cos, sin, mask, cache, **self._checkpoint_kwargs)
            else:
                hidden = layer(hidden, cos, sin, mask, cache)
        hidden = self.model.norm(hidden)
        logits = self.lm_head(hidden[:, slice(-logits_to_keep, None), :])
        return LeanOutput(logits=logits, past_key_values=past_key_values)

    def save_pretrained(self, out_dir: Path | str) -> None:
        """Write a transformers folder: ``model.safetensors`` (the tied LM head left out, as transformers does)
        and the configuration files this model was loaded with, unchanged."""
        from safetensors.torch import save_file

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(out / WEIGHTS), metadata={"format": "pt"})
        for name, data in self.files.items():
            (out / name).write_bytes(data)
