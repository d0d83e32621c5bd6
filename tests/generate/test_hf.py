"""The HF sampling backend: determinism, EOS, temperature / top-p semantics, log-probs, Sampler conformance."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from acerl.generate.base import Completion, Sampler, SamplingParams, encode_prompt
from acerl.generate.hf import HFSampler
from acerl.generate.rollout import RolloutBatch, pack_rows, response_logprobs, sample_batch, sample_next_token
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import build_char_tokenizer

PROMPTS = ["Problem: 1+2\nSolution:", "Problem: what is 17*3?\nSolution:", "Q: 5\nA:"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer(model_max_length=128)


@pytest.fixture(scope="module")
def model(tokenizer):
    arch = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64,
                           max_position_embeddings=128)  # fmt: skip
    return _with_eos_bias(build_tiny_model(arch, tokenizer, seed=0).eval(), tokenizer)


def _with_eos_bias(m, tokenizer):
    """Make EOS likely enough that some rows stop early and some run to the budget."""
    bias = torch.zeros(len(tokenizer))
    bias[tokenizer.eos_token_id] = 3.0
    m.lm_head.register_forward_hook(lambda mod, inp, out: out + bias)
    return m


def _ids(tokenizer, prompts=PROMPTS):
    return [encode_prompt(tokenizer, p) for p in prompts]


def _sample(model, tokenizer, seed=0, **kw) -> RolloutBatch:
    args = {"n": 4, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 12}
    args.update(kw)
    g = torch.Generator().manual_seed(seed)
    return sample_batch(
        model,
        _ids(tokenizer),
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        generator=g,
        **args,
    )


def test_same_seed_same_tokens(model, tokenizer):
    a, b = _sample(model, tokenizer, seed=3), _sample(model, tokenizer, seed=3)
    assert torch.equal(a.input_ids, b.input_ids)
    assert torch.equal(a.logprobs, b.logprobs)
    c = _sample(model, tokenizer, seed=4)
    assert not torch.equal(a.response_ids, c.response_ids) or a.response_ids.shape != c.response_ids.shape


def test_layout_and_eos(model, tokenizer):
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    batch = _sample(model, tokenizer, seed=1, n=8)
    assert len(batch) == len(PROMPTS) * 8
    p = batch.prompt_length
    assert p == max(len(x) for x in _ids(tokenizer))
    lengths = batch.response_lengths.tolist()
    assert batch.stopped.any() and (~batch.stopped).any(), (
        "fixture should give both stopped and truncated rows"
    )
    for r in range(len(batch)):
        prompt = _ids(tokenizer)[r // 8]
        assert batch.prompt_ids(r) == prompt  # rows are prompt-major
        resp = batch.response(r)
        assert len(resp) == lengths[r] >= 1
        assert resp.count(eos) == (1 if batch.stopped[r] else 0)
        if batch.stopped[r]:
            assert resp[-1] == eos
        else:
            assert lengths[r] == 12
        tail = batch.response_ids[r, lengths[r] :]
        assert (tail == pad).all() and (batch.logprobs[r, lengths[r] :] == 0).all()
        assert batch.attention_mask[r, p:].sum() == lengths[r]
        assert batch.attention_mask[r, :p].sum() == len(prompt)
    assert batch.response_ids.shape[1] == max(lengths)
    assert torch.equal(batch.input_ids[:, p:], batch.response_ids)


def test_logprobs_equal_teacher_forced_recompute(model, tokenizer):
    for temperature in (1.0, 0.7):
        batch = _sample(model, tokenizer, seed=2, temperature=temperature)
        with torch.no_grad():
            lp, ent = response_logprobs(
                model, batch.input_ids, batch.attention_mask, batch.response_ids.shape[1],
                temperature=temperature, with_entropy=True,
            )  # fmt: skip
        mask = batch.response_mask.bool()
        torch.testing.assert_close(lp[mask], batch.logprobs[mask], atol=2e-5, rtol=0)
        assert (ent[mask] > 0).all() and (ent[mask] <= math.log(len(tokenizer)) + 1e-4).all()


def test_padding_does_not_change_results(model, tokenizer):
    """Greedy continuation of a prompt alone == in a batch with longer (left-padding) prompts."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = _ids(tokenizer)
    together = sample_batch(model, ids, temperature=0.0, max_new_tokens=10, eos_id=eos, pad_id=pad)
    for i, prompt in enumerate(ids):
        alone = sample_batch(model, [prompt], temperature=0.0, max_new_tokens=10, eos_id=eos, pad_id=pad)
        assert alone.response(0) == together.response(i)
        n = len(alone.response(0))
        torch.testing.assert_close(alone.logprobs[0, :n], together.logprobs[i, :n], atol=2e-5, rtol=0)


def test_greedy_matches_transformers_generate(model, tokenizer):
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompt = _ids(tokenizer)[1]
    ours = sample_batch(model, [prompt], temperature=0.0, max_new_tokens=10, eos_id=eos, pad_id=pad).response(
        0
    )
    ref = model.generate(
        torch.tensor([prompt]), do_sample=False, max_new_tokens=10, eos_token_id=eos, pad_token_id=pad
    )[0, len(prompt) :].tolist()
    if eos in ref:
        ref = ref[: ref.index(eos) + 1]
    assert ours == ref


def test_tiny_top_p_is_greedy(model, tokenizer):
    greedy = _sample(model, tokenizer, temperature=0.0, n=1)
    nucleus = _sample(model, tokenizer, temperature=1.0, top_p=1e-6, n=1, seed=5)
    assert torch.equal(greedy.response_ids, nucleus.response_ids)
    # log-probs are reported before truncation: under the T=1 distribution, not 0
    torch.testing.assert_close(greedy.logprobs, nucleus.logprobs)
    assert (nucleus.logprobs[nucleus.response_mask.bool()] < 0).all()


def test_sampled_tokens_lie_in_the_nucleus():
    torch.manual_seed(0)
    logits = torch.randn(64, 30) * 2
    g = torch.Generator().manual_seed(0)
    for temperature, top_p in ((1.0, 0.5), (0.5, 0.9), (2.0, 0.3)):
        probs = torch.softmax(logits / temperature, dim=-1)
        for _ in range(20):
            tokens, lp = sample_next_token(logits, temperature, top_p, g)
            torch.testing.assert_close(lp, probs.gather(-1, tokens[:, None]).squeeze(-1).log())
            p_tok = probs.gather(-1, tokens[:, None])
            mass_before = (probs * (probs > p_tok)).sum(dim=-1)
            assert (mass_before < top_p).all()


def test_temperature_sharpens_the_empirical_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(4000, 1)
    g = torch.Generator().manual_seed(0)
    for temperature in (0.5, 1.0, 2.0):
        tokens, _ = sample_next_token(logits, temperature, 1.0, g)
        freq = torch.bincount(tokens, minlength=4).double() / len(tokens)
        expected = torch.softmax(logits[0].double() / temperature, dim=-1)
        torch.testing.assert_close(freq, expected, atol=0.03, rtol=0)


def test_pack_rows_and_cat_roundtrip(model, tokenizer):
    pad = tokenizer.pad_token_id
    a, b = _sample(model, tokenizer, seed=1), _sample(model, tokenizer, seed=2, max_new_tokens=5)
    merged = RolloutBatch.cat([a, b], pad, rows=[[0, 5], [3]])
    assert len(merged) == 3
    for i, (src, r) in enumerate([(a, 0), (a, 5), (b, 3)]):
        assert merged.prompt_ids(i) == src.prompt_ids(r)
        assert merged.response(i) == src.response(r)
        n = len(src.response(r))
        assert torch.equal(merged.logprobs[i, :n], src.logprobs[r, :n])
        assert bool(merged.stopped[i]) == bool(src.stopped[r])
    ids, attn, rmask = pack_rows([[5, 6, 7], [8]], [[9], []], pad)
    assert ids.tolist() == [[5, 6, 7, 9], [pad, pad, 8, pad]]
    assert attn.tolist() == [[1, 1, 1, 1], [0, 0, 1, 0]] and rmask.tolist() == [[1], [0]]


# ----------------------------------------------------------------------------------------------- text level
@pytest.fixture(scope="module")
def sampler(model, tokenizer):
    return HFSampler(model, tokenizer, batch_size=2)


def test_sampler_protocol(sampler, tokenizer):
    assert isinstance(sampler, Sampler)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=7, return_logprobs=True)
    out = sampler.generate(PROMPTS, params)
    assert len(out) == len(PROMPTS) and all(len(group) == 3 for group in out)
    for group in out:
        for c in group:
            assert isinstance(c, Completion)
            stop = c.finish_reason == "stop"
            assert stop == (c.token_ids[-1] == tokenizer.eos_token_id)
            assert stop or len(c.token_ids) == 12
            body = c.token_ids[:-1] if stop else c.token_ids
            assert c.text == tokenizer.decode(body, skip_special_tokens=True)
            assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
    assert [[c.token_ids for c in g] for g in sampler.generate(PROMPTS, params)] == [
        [c.token_ids for c in g] for g in out
    ]
    no_lp = sampler.generate(PROMPTS[:1], SamplingParams(n=1, max_new_tokens=4))
    assert no_lp[0][0].logprobs is None


def test_score_matches_sampling_logprobs(sampler):
    params = SamplingParams(n=2, temperature=0.8, max_new_tokens=12, seed=1, return_logprobs=True)
    out = sampler.generate(PROMPTS, params)
    prompts = [p for p in PROMPTS for _ in range(2)]
    comps = [c for g in out for c in g]
    scored = sampler.score(prompts, [c.token_ids for c in comps], temperature=0.8)
    for s, c in zip(scored, comps, strict=True):
        assert len(s) == len(c.token_ids)
        torch.testing.assert_close(torch.tensor(s), torch.tensor(c.logprobs), atol=2e-5, rtol=0)
    ent = sampler.mean_token_entropy(prompts, [c.token_ids for c in comps], temperature=0.8)
    assert len(ent) == len(comps) and all(0 < e < math.log(len(sampler.tokenizer)) for e in ent)
    assert math.isnan(sampler.mean_token_entropy(PROMPTS[:1], [[]])[0])
    both = sampler.score_with_entropy(prompts, [c.token_ids for c in comps], temperature=0.8)
    assert both == (scored, ent)  # one pass, the same values


def test_from_pretrained(tmp_path: Path, tokenizer):
    arch = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=64)
    build_tiny_model(arch, tokenizer, seed=1).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    s = HFSampler.from_pretrained(tmp_path, batch_size=4)
    out = s.generate(PROMPTS[:2], SamplingParams(n=2, max_new_tokens=5, seed=0))
    assert len(out) == 2 and all(len(c.token_ids) <= 5 for g in out for c in g)
    with pytest.raises(FileNotFoundError, match="config.json"):
        HFSampler.from_pretrained(tmp_path / "missing")


def test_rollouts_can_enter_autograd(model, tokenizer):
    """sample_batch runs under inference_mode, but its outputs must be usable in a loss with gradients."""
    batch = _sample(model, tokenizer, seed=0, n=2)
    assert not batch.input_ids.is_inference() and not batch.logprobs.is_inference()
    lp, _ = response_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_ids.shape[1])
    loss = ((lp - batch.logprobs) * batch.response_mask).sum()
    loss.backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad(set_to_none=True)


def test_shared_prompt_forward_equals_full_forward(model, tokenizer):
    """Groups of rollouts share one prompt pass: same log-probs, entropies and gradients as the plain pass."""
    batch = _sample(model, tokenizer, seed=3, n=4)
    args = (batch.input_ids, batch.attention_mask, batch.response_ids.shape[1])
    mask = batch.response_mask.bool()
    results = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp, ent = response_logprobs(model, *args, with_entropy=True, share_prompts=share, temperature=0.9)
        (lp * mask).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results[share] = (lp[mask].detach(), ent[mask], grads)
    model.zero_grad(set_to_none=True)
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results[False], results[True]
    torch.testing.assert_close(lp_a, lp_b, atol=2e-5, rtol=0)
    torch.testing.assert_close(ent_a, ent_b, atol=2e-5, rtol=0)
    for a, b in zip(g_a, g_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def test_top_p_samples_the_renormalised_nucleus():
    """Empirical frequencies of top-p sampling: the nucleus renormalised, nothing outside it."""
    logits = torch.tensor([[2.0, 1.5, 0.0, -1.0, -3.0]]).log_softmax(-1).repeat(20000, 1)
    probs = logits[0].exp().double()
    g = torch.Generator().manual_seed(0)
    for top_p in (0.5, 0.8, 0.95):
        tokens, _ = sample_next_token(logits, 1.0, top_p, g)
        mass_before = probs.cumsum(-1) - probs  # tokens are already sorted by probability
        nucleus = torch.where(mass_before < top_p, probs, 0.0)
        freq = torch.bincount(tokens, minlength=5).double() / len(tokens)
        torch.testing.assert_close(freq, nucleus / nucleus.sum(), atol=0.012, rtol=0)
        assert (freq[nucleus == 0] == 0).all()


def test_zero_weight_tokens_are_never_drawn():
    logits = torch.full((5000, 7), float("-inf"))
    logits[:, 2], logits[:, 5] = 0.0, 1.0
    tokens, lp = sample_next_token(logits, 1.0, 1.0, torch.Generator().manual_seed(1))
    assert set(tokens.unique().tolist()) == {2, 5}
    assert torch.isfinite(lp).all()


def test_a_rows_tokens_do_not_depend_on_when_other_rows_stop(model, tokenizer):
    """Common random numbers: token t of row r uses uniform (r, t) of one block drawn up front, so dropping
    finished rows from the KV cache (or not) changes nothing, and every batch consumes the same draws."""
    compacting = _sample(model, tokenizer, seed=5, compact_below=1, max_new_tokens=16)
    never = _sample(model, tokenizer, seed=5, compact_below=10**9, max_new_tokens=16)
    assert torch.equal(compacting.response_ids, never.response_ids)
    lengths = compacting.response_mask.sum(-1)
    assert int(lengths.min()) < int(lengths.max())  # rows did stop at different steps
    g = torch.Generator().manual_seed(5)
    rows = len(PROMPTS) * 4
    sample_batch(model, _ids(tokenizer), n=4, max_new_tokens=16, eos_id=tokenizer.eos_token_id,
                 pad_id=tokenizer.pad_token_id, generator=g)  # fmt: skip
    expected = torch.Generator().manual_seed(5)
    torch.rand(rows, 16, dtype=torch.float64, generator=expected)
    # rows x max_new_tokens draws, whatever the lengths
    assert torch.equal(g.get_state(), expected.get_state())


def test_same_seed_couples_two_nearby_policies(model, tokenizer):
    """Two slightly different policies sampled with the same seed give mostly the same responses (the
    coupling that makes a paired method comparison less noisy); unrelated seeds almost never agree."""
    other = _with_eos_bias(type(model)(model.config).eval(), tokenizer)
    other.load_state_dict(model.state_dict())
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.002 * torch.randn(p.shape, generator=noise))

    def responses(m, seed):
        b = _sample(m, tokenizer, seed=seed, n=32, max_new_tokens=8)
        return [tuple(b.response(r)) for r in range(len(b))]

    a, same, indep = responses(model, 7), responses(other, 7), responses(other, 8)
    agree = sum(x == y for x, y in zip(a, same, strict=True)) / len(a)
    agree_indep = sum(x == y for x, y in zip(a, indep, strict=True)) / len(a)
    assert agree > 0.6 and agree > agree_indep + 0.4, (agree, agree_indep)
