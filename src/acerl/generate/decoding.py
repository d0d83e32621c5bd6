"""The token-by-token decode step of :func:`acerl.generate.rollout.sample_batch`: one interface, two implementations.

- :class:`HFDecoder` calls the transformers model's forward for every token (any causal LM);
- :class:`LlamaFamilyDecoder` runs the same transformers modules and weights of a Llama-family decoder (Llama,
  Mistral without sliding window, Qwen2, Qwen3: embedding, rotary embedding, RMSNorms, projections, MLP, LM
  head) on the new token and does the attention over the KV cache itself. It skips what a forward call builds on every
  token (4-D masks, cache bookkeeping, output capture), which on small models is most of a decode step.

Both compute the same logits up to float rounding (``tests/generate/test_decoding.py`` compares them at every
step on Llama, Qwen2 and Qwen3 configurations with grouped-query attention, biases, q/k norms, left padding and
dropped rows); the prefill is the model's own forward in both.

Protocol (``B0`` prompts, ``n`` rows each, rows prompt-major):
``prefill(input_ids, attention_mask, position_ids) -> (B0, V)`` next-token logits of the left-padded prompts;
``expand(n)`` is called once after it (row ``i * n + j`` then continues prompt ``i``); ``step(tokens, positions)
-> (B, V)`` appends one token to each row in the cache (``positions``: its position id) and returns the next
logits; ``select(keep)`` keeps only the given rows of the cache (indices into its current rows).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from acerl.models.kv_cache import BufferKVLayer

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

__all__ = [
    "Decoder",
    "HFDecoder",
    "LlamaFamilyDecoder",
    "make_decoder",
    "new_dynamic_cache",
    "supports_llama_family",
]

#: transformers model types whose decoder layer is exactly pre-norm attention (q/k/v projections, optional
#: per-head q/k RMSNorm, rotate-half RoPE) + pre-norm gated MLP, with full causal attention.
LLAMA_FAMILY = frozenset({"llama", "mistral", "qwen2", "qwen3"})


class Decoder(Protocol):
    def prefill(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor: ...

    def expand(self, n: int) -> None: ...

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor: ...

    def select(self, keep: Tensor) -> None: ...


@functools.cache
def _hf_buffer_layer() -> type:
    """:class:`acerl.models.lean.BufferKVLayer` as a transformers cache layer (for transformers models)."""
    from transformers.cache_utils import DynamicLayer

    # DynamicLayer's __init_subclass__ (its layer-type registry) is unannotated
    class _BufferLayer(BufferKVLayer, DynamicLayer):  # type: ignore[no-untyped-call]
        def __init__(self, capacity: int) -> None:
            DynamicLayer.__init__(self)
            BufferKVLayer.__init__(self, capacity)

    return _BufferLayer


def _config(model: torch.nn.Module) -> PreTrainedConfig:
    """A transformers model's ``config`` (a plain attribute; nn.Module's typing reads it as a submodule)."""
    return cast("PreTrainedConfig", model.config)


def _text_config(model: torch.nn.Module) -> Any:
    return _config(model).get_text_config(decoder=True)


def _full_attention(model: torch.nn.Module) -> bool:
    """Every layer attends to the whole sequence (no sliding window, chunked or hybrid layers)."""
    cfg = _text_config(model)
    layer_types = getattr(cfg, "layer_types", None) or []
    return not (
        getattr(cfg, "sliding_window", None)
        or getattr(cfg, "attention_chunk_size", None)
        or any(t != "full_attention" for t in layer_types)
    )


def new_dynamic_cache(model: torch.nn.Module) -> Any:
    """An empty growing KV cache for ``model``: its own (the lean Llama's ``new_cache``), else transformers'
    ``DynamicCache``."""
    new_cache = getattr(model, "new_cache", None)
    if new_cache is not None:
        return new_cache()
    from transformers import DynamicCache

    return DynamicCache(config=_config(model))


def make_cache(model: torch.nn.Module, capacity: int) -> Any:
    """Preallocated KV cache for full-attention decoders; a growing one for anything else (sliding-window or
    hybrid layers). The lean Llama makes its own (same buffers, no transformers import)."""
    new_cache = getattr(model, "new_cache", None)
    if new_cache is not None:
        return new_cache(capacity)
    if not _full_attention(model):
        return new_dynamic_cache(model)
    from transformers.cache_utils import Cache

    layer = _hf_buffer_layer()
    return Cache(layers=[layer(capacity) for _ in range(_text_config(model).num_hidden_layers)])


class HFDecoder:
    """Every token through the transformers model's own forward with a KV cache (any causal LM)."""

    def __init__(self, model: torch.nn.Module, capacity: int) -> None:
        self.model = model
        self.capacity = capacity
        self.cache = make_cache(model, capacity)

    def prefill(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        # the mask of every step is a prefix view of this one: [prompt mask | ones]
        self.width = attention_mask.shape[1]
        self.mask = torch.cat(
            [attention_mask, attention_mask.new_ones(attention_mask.shape[0], self.capacity - self.width)],
            dim=-1,
        )
        logits: Tensor = out.logits[:, -1, :]
        return logits

    def expand(self, n: int) -> None:
        if n > 1:
            self.cache.batch_repeat_interleave(n)
            self.mask = self.mask.repeat_interleave(n, dim=0)

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        self.width += 1
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask[:, : self.width],
            position_ids=positions[:, None],
            past_key_values=self.cache,
            use_cache=True,
        )
        logits: Tensor = out.logits[:, -1, :]
        return logits

    def select(self, keep: Tensor) -> None:
        self.cache.batch_select_indices(keep)
        self.mask = self.mask[keep]


def supports_llama_family(model: torch.nn.Module) -> bool:
    """Whether :class:`LlamaFamilyDecoder` computes exactly this model's forward (else use :class:`HFDecoder`)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in LLAMA_FAMILY or not _full_attention(model):
        return False
    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    if getattr(cfg, "pretraining_tp", 1) != 1 or getattr(cfg, "partial_rotary_factor", 1.0) != 1.0:
        return False
    return all(
        hasattr(layer, "self_attn") and hasattr(layer, "mlp") and hasattr(layer.self_attn, "q_proj")
        for layer in inner.layers
    )


class _Layer:
    """One decoder layer's modules, its fused q/k/v (and gate/up) projections and its KV buffer."""

    def __init__(self, layer: torch.nn.Module, kv: BufferKVLayer) -> None:
        # The layer's submodules by their transformers names: Any, as nn.Module types every attribute it
        # looks up as Tensor | Module; the attributes below say what each one is.
        modules: Any = layer
        attn, mlp = modules.self_attn, modules.mlp
        self.norm1: torch.nn.Module = modules.input_layernorm
        self.norm2: torch.nn.Module = modules.post_attention_layernorm
        self.mlp: torch.nn.Module = mlp
        self.o_proj: torch.nn.Module = attn.o_proj
        self.q_norm: torch.nn.Module | None = getattr(attn, "q_norm", None)
        self.k_norm: torch.nn.Module | None = getattr(attn, "k_norm", None)
        projs = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.sizes = [p.weight.shape[0] for p in projs]
        self.w_qkv = torch.cat([p.weight for p in projs])
        biases = [p.bias for p in projs]
        self.b_qkv = (
            None
            if all(b is None for b in biases)
            else torch.cat(
                [
                    p.bias if p.bias is not None else p.weight.new_zeros(n)
                    for p, n in zip(projs, self.sizes, strict=True)
                ]
            )
        )
        self.scaling = float(attn.scaling)
        self.kv = kv
        self.w_gate_up: Tensor | None = None
        if all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")) and all(
            getattr(p, "bias", None) is None for p in (mlp.gate_proj, mlp.up_proj)
        ):  # gated MLP: down(act(gate(x)) * up(x)), gate and up as one matmul
            self.w_gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
            self.act: torch.nn.Module = mlp.act_fn
            self.down: torch.nn.Module = mlp.down_proj

    def mlp_out(self, x: Tensor) -> Tensor:
        if self.w_gate_up is None:
            out: Tensor = self.mlp(x)
            return out
        gate, up = F.linear(x, self.w_gate_up).chunk(2, dim=-1)
        out = self.down(self.act(gate) * up)
        return out


def _rms_norm(module: torch.nn.Module, x: Tensor) -> Tensor:
    """A transformers ``*RMSNorm`` module as one fused op (``weight * x / sqrt(mean(x^2) + eps)``, computed in
    float32 and cast back, as the module does); other norm modules are called as they are."""
    eps = getattr(module, "variance_epsilon", None)
    if type(module).__name__.endswith("RMSNorm") and eps is not None and x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), cast(Tensor, module.weight), eps)
    out: Tensor = module(x)
    return out


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE (the Llama family's ``apply_rotary_pos_emb``) of (B, heads, D) by (B, 1, D) cos / sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaFamilyDecoder(HFDecoder):
    """Decode steps of a Llama-family transformers model without its per-call machinery.

    The prefill is the model's own forward into the same preallocated cache as :class:`HFDecoder`; each decode
    step then runs the model's modules and weights (embedding, rotary embedding, projections, LM head; RMSNorms
    as ``F.rms_norm`` with the module's weight and epsilon; q/k/v and the MLP's gate/up projections each as one
    matmul over the concatenated weights) on the new tokens and computes the attention over the cache itself
    (two batched products and a float32 softmax, with an additive mask for the prompts' left padding). No
    per-step mask tensors, cache objects or output wrappers are built, which is most of a decode step's cost
    on small models. The concatenated weights are taken when the decoder is built (one per ``sample_batch``
    call), so a model trained between calls is always decoded with its current weights.
    """

    def __init__(self, model: torch.nn.Module, capacity: int) -> None:
        if not supports_llama_family(model):
            raise ValueError(f"{type(model).__name__} is not a supported Llama-family decoder")
        super().__init__(model, capacity)
        # the decoder stack (embed_tokens, layers, norm, rotary_emb: supports_llama_family checked them), read
        # through Any as in _Layer
        modules: Any = model
        self.inner = modules.model
        cfg = _text_config(model)
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.group = self.heads // self.kv_heads
        self.layers = [
            _Layer(layer, kv)
            for layer, kv in zip(self.inner.layers[: cfg.num_hidden_layers], self.cache.layers, strict=True)
        ]

    def prefill(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor:
        logits = super().prefill(input_ids, attention_mask, position_ids)
        # additive attention bias over the whole buffer: -inf on the prompts' left padding, (B, 1, 1, capacity)
        bias = torch.zeros(self.mask.shape, dtype=torch.float32, device=logits.device)
        self.bias = bias.masked_fill(self.mask == 0, float("-inf"))[:, None, None, :]
        return logits

    def expand(self, n: int) -> None:
        super().expand(n)
        if n > 1:
            self.bias = self.bias.repeat_interleave(n, dim=0)

    def select(self, keep: Tensor) -> None:
        super().select(keep)
        self.bias = self.bias[keep]

    def _attention(self, layer: _Layer, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q (B, H, D), k / v (B, Hkv, D) of the new token -> (B, H * D) attention output over the cache."""
        b, width = q.shape[0], self.width
        keys, values = layer.kv.update(k[:, :, None], v[:, :, None])  # (B, Hkv, width, D)
        q = q.view(b, self.kv_heads, self.group, self.head_dim) * layer.scaling
        # softmax in float32 whatever the model's dtype, as transformers' attention functions do
        scores = (q @ keys.transpose(-1, -2)).float() + self.bias[..., :width]
        probs = torch.softmax(scores, dim=-1).to(values.dtype)
        return (probs @ values).reshape(b, self.heads * self.head_dim)

    def step(self, tokens: Tensor, positions: Tensor) -> Tensor:
        self.width += 1
        h = self.inner.embed_tokens(tokens[:, None])  # (B, 1, hidden)
        cos, sin = self.inner.rotary_emb(h, position_ids=positions[:, None])  # (B, 1, D)
        b, d, hq, hk = tokens.shape[0], self.head_dim, self.heads, self.kv_heads
        for layer in self.layers:
            qkv = F.linear(_rms_norm(layer.norm1, h), layer.w_qkv, layer.b_qkv).view(b, hq + 2 * hk, d)
            v = qkv[:, hq + hk :]
            if layer.q_norm is not None:
                assert layer.k_norm is not None  # per-head q/k norms come together (Qwen3)
                q = _rotate(layer.q_norm(qkv[:, :hq]), cos, sin)
                k = _rotate(layer.k_norm(qkv[:, hq : hq + hk]), cos, sin)
            else:  # q and k rotated together
                qk = _rotate(qkv[:, : hq + hk], cos, sin)
                q, k = qk[:, :hq], qk[:, hq:]
            h = h + layer.o_proj(self._attention(layer, q, k, v))[:, None, :]
            h = h + layer.mlp_out(_rms_norm(layer.norm2, h))
        lm_head = cast(torch.nn.Module, self.model.lm_head)
        logits: Tensor = lm_head(_rms_norm(self.inner.norm, h))[:, -1, :]
        return logits


def make_decoder(model: torch.nn.Module, capacity: int, *, lean: bool = True) -> Decoder:
    """:class:`LlamaFamilyDecoder` where supported (and ``lean``), else :class:`HFDecoder`."""
    if lean and supports_llama_family(model):
        return LlamaFamilyDecoder(model, capacity)
    return HFDecoder(model, capacity)
