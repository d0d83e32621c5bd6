"""The vLLM backend in the main environment (no vLLM there): import-guarded, its engine settings per device, and
its adapter logic checked against a stand-in engine that follows vLLM's output conventions. The real engine runs
in the ``vllm`` session (.venv-vllm): tests/generate/test_vllm_cpu.py and the conformance tests."""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass, field

import pytest
import torch

import acerl.generate.vllm_backend as vb
from acerl.generate import SamplingParams, make_sampler
from acerl.generate.base import encode_prompt
from acerl.generate.hf import HFSampler
from acerl.generate.rollout import pack_rows, response_logprobs, sample_batch

no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_module_imports_without_vllm():
    assert vb.VLLMSampler.__name__ == "VLLMSampler"  # importing the module never needs vLLM


@no_vllm
def test_missing_vllm_says_install_the_gpu_extra(tmp_path):
    with pytest.raises(ImportError, match=r"pip install 'acerl\[gpu\]'"):
        vb.VLLMSampler.from_pretrained(tmp_path)
    with pytest.raises(ImportError, match="gpu"):
        make_sampler("vllm", tmp_path)


def test_engine_kwargs_cpu_settings_avoid_what_fails_on_cpu():
    cpu = vb.engine_kwargs("cpu", gpu_memory_utilization=0.75)
    assert (
        cpu["enable_chunked_prefill"] is False
    )  # seeded requests + chunked prefill: no CPU generator offset
    assert cpu["kv_cache_memory_bytes"] == int(vb.CPU_KV_CACHE_GIB * vb.GIB)  # no host-memory share check
    assert cpu["enforce_eager"] is True and cpu["logprobs_mode"] == "processed_logprobs"
    assert vb.engine_kwargs("cpu", kv_cache_gib=0.5, enforce_eager=False)["enforce_eager"] is False
    gpu = vb.engine_kwargs("cuda", tensor_parallel_size=2, gpu_memory_utilization=0.6)
    assert (
        "enable_chunked_prefill" not in gpu
        and "kv_cache_memory_bytes" not in gpu
        and "enforce_eager" not in gpu
    )
    assert (gpu["tensor_parallel_size"], gpu["gpu_memory_utilization"]) == (2, 0.6)
    assert vb.engine_kwargs("cuda", kv_cache_gib=4)["kv_cache_memory_bytes"] == 4 << 30


def test_checkpoint_dtype_reads_the_folder(tiny_model_dir, tmp_path):
    assert vb.checkpoint_dtype(tiny_model_dir) == "float32"
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    assert vb.checkpoint_dtype(tmp_path) == "bfloat16"
    (tmp_path / "config.json").write_text("{}")
    assert vb.checkpoint_dtype(tmp_path) == "auto"


def test_factory_rejects_unknown_backend_and_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="valid: hf, vllm"):
        make_sampler("tgi", tmp_path)
    with pytest.raises(FileNotFoundError, match="model folder not found"):
        make_sampler("hf", tmp_path / "absent")


# ------------------------------------------------------------------------------------------------------------
# The adapter logic (request building, output and prompt-log-prob offsets) against a stand-in engine: a tiny
# object with vLLM's LLM.generate / SamplingParams / RequestOutput shapes, computing with the HF model.
# ------------------------------------------------------------------------------------------------------------
@dataclass
class _Logprob:
    logprob: float


@dataclass
class _CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str
    logprobs: list[dict[int, _Logprob]] | None


@dataclass
class _RequestOutput:
    outputs: list[_CompletionOutput] = field(default_factory=list)
    prompt_logprobs: list[dict[int, _Logprob] | None] | None = None


class _FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(
            {"n": 1, "temperature": 1.0, "top_p": 1.0, "logprobs": None, "prompt_logprobs": None}
        )
        self.__dict__.update(kwargs)


class _FakeLLM:
    """Stand-in for ``vllm.LLM`` (vLLM's output conventions, HF computations)."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.requests: list[tuple[list[int], _FakeSamplingParams]] = []

    def generate(self, requests, params, use_tqdm=True):
        per = params if isinstance(params, list) else [params] * len(requests)
        return [self._one(r["prompt_token_ids"], p) for r, p in zip(requests, per, strict=True)]

    def _one(self, ids, p):
        self.requests.append((ids, p))
        if p.prompt_logprobs is not None:  # entry j: log p(token j | tokens < j); entry 0 is None
            input_ids, mask, _ = pack_rows([ids[:1]], [ids[1:]], 0)
            lp, _ = response_logprobs(self.model, input_ids, mask, len(ids) - 1)
            return _RequestOutput(
                outputs=[_CompletionOutput(0, "", [0], "length", None)],
                prompt_logprobs=[None]
                + [{t: _Logprob(float(v))} for t, v in zip(ids[1:], lp[0].detach(), strict=True)],
            )
        outs = []
        for j in range(p.n):  # vLLM: the j-th sample has seed + j
            g = torch.Generator().manual_seed(p.seed + j)
            b = sample_batch(
                self.model,
                [ids],
                temperature=p.temperature,
                top_p=p.top_p,
                max_new_tokens=p.max_tokens,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
                generator=g,
            )
            toks = b.response(0)
            stop = bool(b.stopped[0])
            lps = None
            if p.logprobs is not None:
                lps = [{t: _Logprob(float(v))} for t, v in zip(toks, b.logprobs[0], strict=False)]
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            outs.append(_CompletionOutput(j, text, toks, "stop" if stop else "length", lps))
        return _RequestOutput(outputs=outs[::-1])  # out of order: the adapter must sort by index


@pytest.fixture
def fake_vllm(monkeypatch, tiny_model_dir):
    module = types.ModuleType("vllm")
    module.SamplingParams = _FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    hf = HFSampler.from_pretrained(tiny_model_dir)
    return vb.VLLMSampler(_FakeLLM(hf.model, hf.tokenizer), hf.tokenizer), hf


def test_adapter_maps_requests_and_outputs(fake_vllm):
    smp, hf = fake_vllm
    prompts = ["Problem: 1+2\nSolution:", "Problem: 2*3\nSolution:"]
    params = SamplingParams(n=3, temperature=1.0, top_p=1.0, max_new_tokens=30, seed=9, return_logprobs=True)
    out = smp.generate(prompts, params)
    reqs = smp.llm.requests
    assert [r[0] for r in reqs] == [encode_prompt(hf.tokenizer, p) for p in prompts]  # same tokens as HF
    assert reqs[0][1].seed != reqs[1][1].seed  # per-prompt seeds
    assert all(r[1].max_tokens == 30 and r[1].logprobs == 0 for r in reqs)
    assert [len(g) for g in out] == [3, 3]
    for group in out:
        assert len({tuple(c.token_ids) for c in group}) > 1  # seed + j: distinct samples, in index order
        for c in group:
            assert len(c.logprobs) == len(c.token_ids) and c.finish_reason in ("stop", "length")
    again = smp.generate(prompts, params)
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in out]


def test_adapter_scores_response_positions_like_hf(fake_vllm):
    smp, hf = fake_vllm
    prompts = ["Problem: 1+2\nSolution:", "Problem: 7\nSolution:"]
    responses = [
        [hf.tokenizer.convert_tokens_to_ids(ch) for ch in " 3. \\boxed{3}"] + [hf.tokenizer.eos_token_id],
        [],
    ]
    got = smp.score(prompts, responses)
    want = hf.score(prompts, responses)
    assert len(got[0]) == len(responses[0]) and got[1] == []
    torch.testing.assert_close(torch.tensor(got[0]), torch.tensor(want[0]), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="temperature 1"):
        smp.score(prompts, responses, temperature=0.7)
