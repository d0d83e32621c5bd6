"""KV caches of the lean Llama (:mod:`acerl.models.lean`) and of the sampler's decode step, in plain torch.

- :class:`KVLayer` grows by concatenation (transformers' ``DynamicLayer``): the trainer's shared-prompt forward;
- :class:`BufferKVLayer` writes into buffers preallocated for the whole generation (the sampler's cache);
- :class:`KVCache` holds one per decoder layer and offers the methods of transformers' ``Cache`` that the
  forward and the sampler call. For transformers models the sampler wraps :class:`BufferKVLayer` as a
  transformers cache layer (``acerl.generate.decoding``), so both kinds of model decode from the same buffers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["BufferKVLayer", "KVCache", "KVLayer"]


class KVLayer:
    """One layer's keys and values, grown by concatenation (transformers' ``DynamicLayer``)."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def update(self, key_states: Tensor, value_states: Tensor) -> tuple[Tensor, Tensor]:
        if self.keys is None or self.values is None:
            self.keys = key_states.new_empty(0)
            self.values = value_states.new_empty(0)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return 0 if self.keys is None or self.keys.numel() == 0 else self.keys.shape[-2]

    def batch_select_indices(self, indices: Tensor) -> None:
        if self.get_seq_length() > 0:
            assert self.keys is not None and self.values is not None
            self.keys, self.values = self.keys[indices, ...], self.values[indices, ...]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            assert self.keys is not None and self.values is not None
            self.keys = self.keys.repeat_interleave(repeats, dim=0)
            self.values = self.values.repeat_interleave(repeats, dim=0)


class BufferKVLayer:
    """One layer's keys and values in buffers sized for the whole generation: no per-step concatenation.

    :meth:`update` returns views of the filled part. The sampler's decode step writes into it through
    :meth:`update` too (``acerl.generate.decoding``); transformers models get the same buffers wrapped as a
    transformers cache layer there."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.length = 0
        self.is_initialized = False
        self.keys: Tensor | None = None
        self.values: Tensor | None = None

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        b, h, _, d = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self._k = key_states.new_empty(b, h, self.capacity, d)
        self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def update(
        self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.length + n > self.capacity:
            raise RuntimeError(f"KV buffer of {self.capacity} positions is full")
        self._k[:, :, self.length : self.length + n].copy_(key_states)
        self._v[:, :, self.length : self.length + n].copy_(value_states)
        self.length += n
        self._views()
        assert self.keys is not None and self.values is not None
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def _keep_rows(self, index: Tensor) -> None:
        """New buffers holding rows ``index`` of the filled positions only: the positions past ``length`` are
        never read before they are written, so they are not copied."""
        n = self.length
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty(index.shape[0], *old.shape[1:])
            torch.index_select(old[:, :, :n], 0, index, out=new[:, :, :n])
            setattr(self, name, new)
        self._views()

    def batch_select_indices(self, indices: Tensor) -> None:
        if self.is_initialized:
            self._keep_rows(indices.to(self._k.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            rows = torch.arange(self._k.shape[0], device=self._k.device)
            self._keep_rows(rows.repeat_interleave(repeats))


class KVCache:
    """The KV cache of a :class:`LeanLlamaForCausalLM` forward: one :class:`KVLayer` or :class:`BufferKVLayer`
    per decoder layer (the methods of transformers' ``Cache`` that the forward and the sampler call)."""

    def __init__(self, layers: list[KVLayer] | list[BufferKVLayer]) -> None:
        self.layers = layers

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int) -> tuple[Tensor, Tensor]:
        return self.layers[layer_idx].update(key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].get_seq_length()

    def batch_select_indices(self, indices: Tensor) -> None:
        for layer in self.layers:
            layer.batch_select_indices(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        for layer in self.layers:
            layer.batch_repeat_interleave(repeats)
