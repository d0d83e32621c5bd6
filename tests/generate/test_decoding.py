"""The lean Llama-family decode step computes the transformers forward: same logits at every step, same samples."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

from acerl.generate.decoding import HFDecoder, LlamaFamilyDecoder, make_decoder, supports_llama_family
from acerl.generate.rollout import pack_rows, position_ids_from_mask, sample_batch

SMALL = dict(
    vocab_size=61, hidden_size=48, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=128
)

CONFIGS = {
    "llama-gqa": LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2, pad_token_id=0),
    "llama-rope-llama3": LlamaConfig(
        **SMALL,
        num_attention_heads=4,
        num_key_value_heads=4,
        pad_token_id=0,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),  # fmt: skip
    "qwen2-bias": Qwen2Config(**SMALL, num_attention_heads=4, num_key_value_heads=1, pad_token_id=0),
    "qwen3-qk-norm": Qwen3Config(
        **SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0
    ),
}


def _model(cfg, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    with torch.no_grad():  # larger than init weights so that float differences would show
        for p in model.parameters():
            p.mul_(8.0) if p.dim() > 1 else p.add_(torch.randn_like(p) * 0.1)
    return model


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in (5, 9, 2)]


@pytest.mark.parametrize(
    ("name", "dtype"), [(name, torch.float32) for name in sorted(CONFIGS)] + [("llama-gqa", torch.bfloat16)]
)
def test_lean_step_logits_equal_transformers_forward(name, dtype):
    model = _model(CONFIGS[name], dtype)
    tol = (
        {"atol": 2e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.0}
    )  # a few bf16 ulps of logits ~4
    assert supports_llama_family(model)
    if name == "qwen2-bias":
        assert model.model.layers[0].self_attn.q_proj.bias is not None
    if name == "qwen3-qk-norm":
        assert hasattr(model.model.layers[0].self_attn, "q_norm")
    prompts, n, steps = _prompts(model.config.vocab_size), 3, 8
    ids, mask, _ = pack_rows(prompts, [[]] * len(prompts), pad_id=0)
    ids, mask = ids[:, :-1], mask[:, :-1]
    pos = position_ids_from_mask(mask)
    g = torch.Generator().manual_seed(2)
    with torch.inference_mode():
        ref, lean = HFDecoder(model, ids.shape[1] + steps), LlamaFamilyDecoder(model, ids.shape[1] + steps)
        torch.testing.assert_close(lean.prefill(ids, mask, pos), ref.prefill(ids, mask, pos), atol=0, rtol=0)
        ref.expand(n), lean.expand(n)
        rows, next_pos = len(prompts) * n, (pos[:, -1] + 1).repeat_interleave(n)
        for t in range(steps):
            if t == 3:  # drop rows as the sampler does when they finish (a whole prompt group and one more)
                keep = torch.tensor([0, 1, 2, 4, 6, 7])
                ref.select(keep), lean.select(keep)
                next_pos, rows = next_pos[keep], len(keep)
            tokens = torch.randint(1, model.config.vocab_size, (rows,), generator=g)
            expected, got = ref.step(tokens, next_pos), lean.step(tokens, next_pos)
            assert got.shape == expected.shape == (rows, model.config.vocab_size)
            assert expected.abs().max() > 1.0  # logits large enough for a real comparison
            assert got.dtype == expected.dtype == dtype
            torch.testing.assert_close(got, expected, **tol, msg=f"{name}: step {t}")
            next_pos = next_pos + 1


def test_sampling_is_the_same_with_either_decoder():
    model = _model(CONFIGS["llama-gqa"])
    prompts = _prompts(model.config.vocab_size)
    out = []
    for lean in (False, True):
        g = torch.Generator().manual_seed(31)
        out.append(sample_batch(model, prompts, n=4, temperature=0.9, top_p=0.95, max_new_tokens=12,
                                eos_id=7, pad_id=0, generator=g, lean=lean))  # fmt: skip
    assert int(out[0].stopped.sum()) >= 3, "EOS should end enough rows that rows get dropped on the way"
    assert torch.equal(out[0].input_ids, out[1].input_ids)
    torch.testing.assert_close(out[0].logprobs, out[1].logprobs, atol=2e-5, rtol=0)


def test_other_architectures_use_the_transformers_forward():
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=61, n_embd=32, n_layer=1, n_head=2))
    windowed = AutoModelForCausalLM.from_config(
        MistralConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2, sliding_window=16)
    )
    for model in (gpt2, windowed):
        assert not supports_llama_family(model)
        assert type(make_decoder(model, 32)) is HFDecoder
        with pytest.raises(ValueError, match="not a supported Llama-family decoder"):
            LlamaFamilyDecoder(model, 32)
    llama = _model(CONFIGS["llama-gqa"])
    assert type(make_decoder(llama, 32)) is LlamaFamilyDecoder
    assert type(make_decoder(llama, 32, lean=False)) is HFDecoder
