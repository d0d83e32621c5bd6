"""The lean Llama and tokenizer compute exactly what transformers computes, bit for bit, and write the same files.

Each comparison runs the transformers model (``AutoModelForCausalLM`` / ``AutoTokenizer`` on the same folder)
and the lean one on identical inputs and asserts ``torch.equal``: forward logits with left and right padding
and without, the teacher-forced log-probs and their gradients (with and without gradient checkpointing, rows
sharing a prompt or not), the sampler's draws, and the saved folder and checkpoint bytes.
"""

from __future__ import annotations

import filecmp
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config

from acerl.errors import BadInputError
from acerl.generate.rollout import position_ids_from_mask, response_logprobs, sample_batch
from acerl.models.lean import LeanLlamaForCausalLM, causal_mask, lean_config
from acerl.models.loading import LEAN_ENV, lean_model_reason, load_model_folder, load_tokenizer
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import CHARSET, LeanTokenizer, build_char_tokenizer, lean_tokenizer_reason

ARCHS = {
    "tiny-default": TinyModelConfig(
        hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=96
    ),
    "gqa": TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96),
    "untied": TinyModelConfig(
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=48,
        tie_word_embeddings=False,
    ),
}


def _save_random_tiny(out: Path, arch: TinyModelConfig, seed: int = 0) -> Path:
    """A tiny Llama folder with weights far from their init, so that any float difference would show."""
    tokenizer = build_char_tokenizer(model_max_length=arch.max_position_embeddings)
    model = build_tiny_model(arch, tokenizer, seed=seed)
    torch.manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0) if p.dim() > 1 else p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=sorted(ARCHS))
def folder(request, tmp_path_factory) -> Path:
    return _save_random_tiny(tmp_path_factory.mktemp(f"lean-{request.param}"), ARCHS[request.param])


def _pair(folder: Path) -> tuple[torch.nn.Module, LeanLlamaForCausalLM]:
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert hf.config._attn_implementation == "sdpa"  # what the lean model reproduces
    return hf, LeanLlamaForCausalLM.from_folder(folder)


def _batch(vocab: int = 100, b: int = 6, t: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, vocab, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    for i in range(b):
        mask[i, : 3 * i] = 0  # left padding of the prompts
    mask[2, -5:] = 0  # right padding of a short response
    return ids, mask


def test_parameters_buffers_and_order_match(folder):
    hf, lean = _pair(folder)
    names = [n for n, _ in hf.named_parameters()]
    assert names == [n for n, _ in lean.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(hf.parameters(), lean.parameters(), strict=True))
    assert list(hf.state_dict()) == list(lean.state_dict())
    assert torch.equal(hf.model.rotary_emb.inv_freq, lean.model.rotary_emb.inv_freq)
    assert (lean.lm_head.weight is lean.model.embed_tokens.weight) == hf.config.tie_word_embeddings


@pytest.mark.parametrize("padding", ["left-and-right", "none"])
@pytest.mark.parametrize("use_cache", [False, None])
def test_forward_logits_are_bitwise_equal(folder, padding, use_cache):
    hf, lean = _pair(folder)
    ids, mask = _batch()
    if padding == "none":
        mask = torch.ones_like(mask)
    kwargs = dict(
        input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=use_cache
    )
    with torch.no_grad():
        assert torch.equal(hf(**kwargs).logits, lean(**kwargs).logits)
        assert torch.equal(hf(**kwargs, logits_to_keep=7).logits, lean(**kwargs, logits_to_keep=7).logits)
        # no mask and no positions at all (transformers' defaults)
        assert torch.equal(hf(input_ids=ids).logits, lean(input_ids=ids).logits)


def test_bf16_autocast_forward_and_logprobs_are_bitwise_equal(folder):
    """``compute.precision: bf16`` runs the float32 weights under autocast: the same casts in both models."""
    hf, lean = _pair(folder)
    ids, mask = _batch()
    kwargs = dict(
        input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False
    )
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = hf(**kwargs).logits, lean(**kwargs).logits
        assert a.dtype == b.dtype == torch.bfloat16 and torch.equal(a, b)
        lp = [response_logprobs(m, ids, mask, 15, temperature=0.7)[0] for m in (hf, lean)]
    assert torch.equal(lp[0], lp[1])


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("share_prompts", [False, True])
def test_logprobs_and_gradients_are_bitwise_equal(folder, checkpointing, share_prompts):
    hf, lean = _pair(folder)
    ids, mask = _batch()
    # four rollouts per prompt, so that the shared-prompt path runs its cached continuation
    ids, mask = ids[:3].repeat_interleave(4, 0).clone(), mask[:3].repeat_interleave(4, 0).clone()
    ids[:, -15:] = torch.randint(4, 100, (12, 15), generator=torch.Generator().manual_seed(5))
    mask[5, -4:] = 0
    results = []
    for model in (hf, lean):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        model.zero_grad()
        lp, ent = response_logprobs(
            model, ids, mask, 15, temperature=0.7, with_entropy=True, share_prompts=share_prompts
        )
        (lp * torch.linspace(-1.0, 2.0, lp.numel()).view_as(lp)).sum().backward()
        results.append((lp.detach(), ent, [p.grad.clone() for p in model.parameters()]))
    (lp_a, ent_a, grads_a), (lp_b, ent_b, grads_b) = results
    assert torch.equal(lp_a, lp_b) and torch.equal(ent_a, ent_b)
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b, strict=True))


@pytest.mark.parametrize("lean_decoder", [True, False])
def test_sampled_rollouts_are_identical(folder, lean_decoder):
    hf, lean = _pair(folder)
    ids, mask = _batch()
    prompts = [ids[i][mask[i].bool()][:20].tolist() for i in range(ids.shape[0])]
    batches = [
        sample_batch(
            model,
            prompts,
            n=4,
            temperature=0.7,
            top_p=0.95,
            max_new_tokens=30,
            eos_id=2,
            pad_id=0,
            generator=torch.Generator().manual_seed(11),
            lean=lean_decoder,
        )  # fmt: skip
        for model in (hf, lean)
    ]
    a, b = batches
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    assert torch.equal(a.stopped, b.stopped)


@pytest.mark.parametrize("offline", [False, True])
def test_saved_folder_and_checkpoint_are_byte_identical(folder, tmp_path, monkeypatch, offline):
    import huggingface_hub.constants
    from safetensors.torch import save_model

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    hf, lean = _pair(folder)
    tok, lean_tok = AutoTokenizer.from_pretrained(folder), LeanTokenizer(folder)
    with torch.no_grad():  # a trained policy: weights moved since loading
        for a, b in zip(hf.parameters(), lean.parameters(), strict=True):
            a.add_(0.5)
            b.add_(0.5)
    hf.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    lean.save_pretrained(tmp_path / "lean")
    lean_tok.save_pretrained(tmp_path / "lean")
    files = sorted(p.name for p in (tmp_path / "hf").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "lean").iterdir())
    assert "model.safetensors" in files and "tokenizer_config.json" in files
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "hf", tmp_path / "lean", files, shallow=False)
    assert (mismatch, errors) == ([], [])
    save_model(hf, str(tmp_path / "hf.ckpt"))
    save_model(lean, str(tmp_path / "lean.ckpt"))
    assert filecmp.cmp(tmp_path / "hf.ckpt", tmp_path / "lean.ckpt", shallow=False)
    # the re-saved folder is itself lean-loadable and round-trips
    again = LeanLlamaForCausalLM.from_folder(tmp_path / "lean")
    assert all(torch.equal(a, b) for a, b in zip(again.parameters(), lean.parameters(), strict=True))
    assert lean_tokenizer_reason(tmp_path / "hf") is None


def test_tokenizer_encodes_and_decodes_like_transformers(folder):
    tok, lean = AutoTokenizer.from_pretrained(folder), LeanTokenizer(folder)
    rng = random.Random(0)
    alphabet = CHARSET + "é\t€"
    texts = ["", " ", "Problem: 3+4\nSolution:", "<s>x</s><pad><unk>"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(200)]
    for text in texts:
        for special in (True, False):
            assert (
                tok(text, add_special_tokens=special)["input_ids"]
                == lean(text, add_special_tokens=special)["input_ids"]
            )
        assert tok.encode(text) == lean.encode(text)
    for _ in range(200):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randint(0, 40))]
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == lean.decode(ids, skip_special_tokens=skip)
    for token in ["a", " ", "\n", "<s>", "</s>", "<pad>", "é", "ab"]:
        assert tok.convert_tokens_to_ids(token) == lean.convert_tokens_to_ids(token), token
    assert tok.convert_tokens_to_ids(list("a1 ")) == lean.convert_tokens_to_ids(list("a1 "))
    for attr in ("bos_token", "eos_token", "pad_token", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(tok, attr) == getattr(lean, attr), attr
    assert len(tok) == len(lean)


def test_causal_mask_marks_exactly_the_visible_keys():
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])
    m = causal_mask(mask, 2, 4, 0, torch.device("cpu"))
    assert m is not None and m.shape == (2, 1, 4, 4)
    expect0 = torch.tensor([[0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m[0, 0], expect0)
    # two new tokens after three cached ones: each sees the cache and the new tokens up to itself
    m = causal_mask(torch.ones(1, 5, dtype=torch.long), 1, 2, 3, torch.device("cpu"))
    assert m is not None and torch.equal(
        m[0, 0], torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    )
    # no padding, whole sequence or one token: the kernel's is_causal instead of a mask
    assert causal_mask(torch.ones(2, 4, dtype=torch.long), 2, 4, 0, torch.device("cpu")) is None
    assert causal_mask(None, 2, 1, 6, torch.device("cpu")) is None


def _write_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}}, "RoPE"),
        ({"dtype": "bfloat16"}, "dtype"),
        ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, "architecture"),
        ({"sliding_window": 16}, "sliding"),
    ],
)
def test_other_models_load_with_transformers(tmp_path, changes, reason):
    folder = _save_random_tiny(tmp_path, ARCHS["tiny-default"])
    _write_config(folder, **changes)
    assert reason in str(lean_model_reason(folder))


def test_loader_picks_lean_where_exact_and_transformers_otherwise(tmp_path, monkeypatch):
    folder = _save_random_tiny(tmp_path / "tiny", ARCHS["gqa"])
    model, tok = load_model_folder(folder)
    assert isinstance(model, LeanLlamaForCausalLM) and isinstance(tok, LeanTokenizer) and not model.training
    model, _ = load_model_folder(folder, dtype=torch.bfloat16)
    assert isinstance(model, LlamaForCausalLM) and model.dtype == torch.bfloat16
    monkeypatch.setenv(LEAN_ENV, "0")
    model, tok = load_model_folder(folder)
    assert isinstance(model, LlamaForCausalLM) and not isinstance(tok, LeanTokenizer) and not model.training
    monkeypatch.setenv(LEAN_ENV, "yes")
    with pytest.raises(ValueError, match=f"{LEAN_ENV}='yes'"):
        load_model_folder(folder)
    monkeypatch.delenv(LEAN_ENV)
    # weights that do not match the config: one line naming the file and the fix
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((folder / name).read_bytes())
    state = load_file(str(folder / "model.safetensors"))
    state.pop("model.norm.weight")
    save_file(state, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(BadInputError, match=r"missing weights \['model.norm.weight'\].*delete it"):
        load_model_folder(broken)
    qwen = tmp_path / "qwen"
    AutoModelForCausalLM.from_config(
        Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    ).save_pretrained(qwen)  # fmt: skip
    build_char_tokenizer().save_pretrained(qwen)
    model, _ = load_model_folder(qwen)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    # a tokenizer with a chat template is left to transformers
    tok = build_char_tokenizer()
    tok.chat_template = "{{ messages[0]['content'] }}"
    tok.save_pretrained(tmp_path / "chat")
    assert lean_tokenizer_reason(tmp_path / "chat") is not None
    assert load_tokenizer(tmp_path / "chat").chat_template is not None


def test_lean_config_reads_gqa_and_head_dim():
    raw = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2).to_dict()
    assert "architecture" in str(lean_config(raw))  # a config without its architecture is not taken on trust
    cfg = lean_config({**raw, "architectures": ["LlamaForCausalLM"]})
    assert not isinstance(cfg, str)
    assert (cfg.num_key_value_heads, cfg.head_dim, cfg.rope_theta) == (2, 16, 10000.0)


def test_sampling_and_training_jobs_do_not_import_transformers(tmp_path):
    """The point of the lean path: a job on the tiny model never imports transformers' modelling code."""
    folder = _save_random_tiny(tmp_path / "tiny", ARCHS["tiny-default"])
    code = f"""
import sys
from acerl.generate import make_sampler
from acerl.generate.base import SamplingParams
smp = make_sampler("hf", {str(folder)!r}, device="cpu", batch_size=4)
out = smp.generate(["Problem: 1+1\\nSolution:"], SamplingParams(n=2, max_new_tokens=8, seed=0))
assert len(out[0]) == 2
smp.score(["Problem: 1+1"], [out[0][0].token_ids])
import acerl.train.run, acerl.diagnostics.run
print(sorted(m for m in sys.modules if m == "transformers" or m.startswith("transformers.")))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"
