"""The KV caches keep exactly the keys and values written, through row selection and repetition."""

from __future__ import annotations

import pytest
import torch

from acerl.models.kv_cache import BufferKVLayer, KVCache, KVLayer


def _kv(b: int, t: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, t, 4, generator=g), torch.randn(b, 2, t, 4, generator=g)


@pytest.mark.parametrize("layer_type", [KVLayer, BufferKVLayer])
def test_rows_selected_and_repeated_keep_their_keys_and_values(layer_type):
    layer = layer_type() if layer_type is KVLayer else layer_type(16)
    cache = KVCache([layer])
    assert cache.get_seq_length() == 0
    k0, v0 = _kv(3, 5, 0)
    keys, values = cache.update(k0, v0, 0)
    assert torch.equal(keys, k0) and torch.equal(values, v0) and cache.get_seq_length() == 5
    cache.batch_repeat_interleave(2)  # rows 0 0 1 1 2 2
    k1, v1 = _kv(6, 1, 1)
    keys, values = cache.update(k1, v1, 0)
    want_k = torch.cat([k0.repeat_interleave(2, dim=0), k1], dim=2)
    want_v = torch.cat([v0.repeat_interleave(2, dim=0), v1], dim=2)
    assert torch.equal(keys, want_k) and torch.equal(values, want_v)
    keep = torch.tensor([5, 0, 3])
    cache.batch_select_indices(keep)
    k2, v2 = _kv(3, 2, 2)
    keys, values = cache.update(k2, v2, 0)
    assert torch.equal(keys, torch.cat([want_k[keep], k2], dim=2))
    assert torch.equal(values, torch.cat([want_v[keep], v2], dim=2))
    assert cache.get_seq_length() == 8


def test_buffer_refuses_to_overflow():
    layer = BufferKVLayer(4)
    layer.update(*_kv(1, 3, 0))
    with pytest.raises(RuntimeError, match="KV buffer of 4 positions is full"):
        layer.update(*_kv(1, 2, 1))
