"""Test infrastructure: a CPU rollout server for verl 0.9.1's trainer loop (stands in for the vLLM server).

Never on the GPU path. verl's rollouts are server-only: ``verl/workers/rollout/base.py`` (``_ROLLOUT_REGISTRY``)
and ``replica.py`` (``RolloutReplicaRegistry``) know ``vllm``, ``sglang`` and ``trtllm``, none of which runs on
this machine. Both registries accept new names at runtime, so this module, loaded in every verl process through
``VERL_USE_EXTERNAL_MODULES`` (like the ACE plugin), registers a rollout named ``cpu_hf``
(``actor_rollout_ref.rollout.name=cpu_hf``):

- :class:`CPUGenerationServer`: a Ray actor answering verl's token-in-token-out ``generate`` (the call
  ``verl/workers/rollout/llm_server.py`` makes on a vLLM server) with transformers sampling from the policy
  (temperature / top-p / ``max_tokens`` as vLLM reads them; :mod:`fakes.cpu_sampling`: each request from its own
  seeded stream, so a row's tokens do not depend on the batch it lands in), returning verl's ``TokenOutput``
  with the sampled tokens' log-probs; the life-cycle calls the trainer makes (``wake_up``, ``sleep``, ``abort_all_requests`` ...)
  are no-ops on a CPU;
- :class:`CPUReplica`: the ``RolloutReplica`` that starts one server per replica (hybrid mode: one replica per
  trainer rank, as vLLM with tensor parallel size 1);
- :class:`CPUServerAdapter`: the ``BaseRollout`` inside each FSDP actor worker; verl's ``naive`` checkpoint
  engine (``ActorRolloutRefWorker.update_weights``) hands it the actor's full per-tensor parameters after each
  update and it loads them into its replica's server (over Ray instead of CUDA IPC).

Each server appends one JSON line per weight load and per generation batch to ``$ACERL_CPU_ROLLOUT_LOG``
(when set) with the weights' version (``global_steps``) and a fingerprint, and writes the loaded weights to
``<log>.weights-step<N>.pt``, so a test can check which weights produced each step's rollouts.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import os
import threading
import time
from collections import defaultdict
from typing import Any

import ray
import torch
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from fakes import cpu_sampling, verl_cpu_loop, verl_cpu_platform

ROLLOUT_NAME = "cpu_hf"
LOG_ENV = verl_cpu_loop.ROLLOUT_LOG_ENV
ADV_DUMP_ENV = verl_cpu_loop.ADV_DUMP_ENV
SERVER_PREFIX = "acerl_cpu_rollout_server"


def server_name(replica_rank: int) -> str:
    return f"{SERVER_PREFIX}_{replica_rank}"


def weights_fingerprint(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the parameters' names and fp32 bytes (order-independent)."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class CPUGenerationServer:
    """One replica's generation server: a transformers causal LM sampled token by token on the CPU."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        config = omega_conf_to_dataclass(config)
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.config = config
        self.replica_rank = replica_rank
        self.model = AutoModelForCausalLM.from_pretrained(
            model_config.local_path, torch_dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        self.eos_ids = self._eos_ids(model_config)
        self.global_steps: int | None = None
        self.fingerprint = weights_fingerprint(self.model.state_dict())
        self.seed = int(getattr(config, "seed", 0))
        self.repeats: dict[tuple[int | None, str, str], int] = defaultdict(
            int
        )  # identical requests of a step
        self.lock = threading.Lock()
        self.queue: list[tuple[list[int], dict[str, Any], int, asyncio.Future]] = []
        self.serving: asyncio.Future | None = None
        self.log_path = os.environ.get(LOG_ENV)
        self._log({"event": "load", "source": "init", "fingerprint": self.fingerprint})

    @staticmethod
    def _eos_ids(model_config: Any) -> set[int]:
        ids: set[int] = set()
        gen = getattr(model_config, "generation_config", None)
        for source in (
            getattr(gen, "eos_token_id", None),
            getattr(model_config.tokenizer, "eos_token_id", None),
        ):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(i) for i in source)
        return ids

    def _log(self, record: dict[str, Any]) -> None:
        if not self.log_path:
            return
        record = {
            "replica": self.replica_rank,
            "global_steps": self.global_steps,
            "time": time.time(),
            **record,
        }
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> str:
        """Load the actor's full parameters (the ``naive`` checkpoint engine's tensors)."""
        with self.lock:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            if unexpected:
                raise KeyError(f"CPU rollout server: unexpected parameters {unexpected[:5]}")
            self.global_steps = global_steps
            self.fingerprint = weights_fingerprint(self.model.state_dict())
            self._log(
                {"event": "load", "source": "actor", "fingerprint": self.fingerprint, "missing": missing}
            )
            if self.log_path:
                torch.save(
                    {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                    f"{self.log_path}.replica{self.replica_rank}.weights-step{global_steps}.pt",
                )
            return self.fingerprint

    def _max_tokens(self, prompt_ids: list[int], params: dict[str, Any]) -> int:
        cfg = self.config
        max_tokens = params.get("max_tokens") or params.get("max_new_tokens")
        if max_tokens is None:  # as verl's vLLM server
            max_tokens = min(cfg.response_length, cfg.prompt_length + cfg.response_length - len(prompt_ids))
        return max(1, int(max_tokens))

    async def _serve(self) -> None:
        """Batches the requests that arrive together (the agent loop sends a step's rollouts concurrently)."""
        while self.queue:
            await asyncio.sleep(0.02)
            batch, self.queue = self.queue, []
            by_params: dict[tuple[float, float], list[tuple[list[int], int, int, asyncio.Future]]] = (
                defaultdict(list)
            )
            for prompt_ids, params, seed, future in batch:
                key = (float(params.get("temperature", 1.0)), float(params.get("top_p", 1.0)))
                by_params[key].append((prompt_ids, self._max_tokens(prompt_ids, params), seed, future))
            for (temperature, top_p), items in by_params.items():

                def run(items=items, temperature=temperature, top_p=top_p):
                    with self.lock:
                        outs = cpu_sampling.sample_rows(
                            self.model,
                            [i[0] for i in items],
                            [i[1] for i in items],
                            [i[2] for i in items],
                            temperature=temperature,
                            top_p=top_p,
                            eos_ids=self.eos_ids,
                        )
                        return outs, self.fingerprint, self.global_steps

                try:
                    outs, fingerprint, steps = await asyncio.to_thread(run)
                except Exception as err:  # noqa: BLE001  (handed to every waiting request)
                    for *_, future in items:
                        future.set_exception(err)
                    continue
                for (*_, future), out in zip(items, outs, strict=True):
                    future.set_result((*out, fingerprint, steps))
        self.serving = None

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **kwargs: Any
    ) -> TokenOutput:
        params = dict(sampling_params)
        prompt = hashlib.sha256(json.dumps(list(prompt_ids)).encode()).hexdigest()[:16]
        key = (
            self.global_steps,
            request_id if request_id.startswith(cpu_sampling.DETERMINISTIC_PREFIX) else "",
            prompt,
        )
        seed = cpu_sampling.request_seed(
            self.seed, self.global_steps, request_id, prompt_ids, self.repeats[key]
        )
        self.repeats[key] += 1
        future = asyncio.get_running_loop().create_future()
        self.queue.append((list(prompt_ids), params, seed, future))
        if self.serving is None:
            self.serving = asyncio.ensure_future(self._serve())
        tokens, logps, fingerprint, steps = await future
        self._log({"event": "generate", "fingerprint": fingerprint, "prompt": prompt, "tokens": len(tokens)})
        return TokenOutput(
            token_ids=tokens,
            log_probs=logps if params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": steps},
        )

    # life-cycle calls of verl's replica / checkpoint manager: nothing to free on a CPU
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict[str, Any]:
        return {}

    async def resume_generation(self) -> None:
        return None

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def wait_for_requests_to_drain(self) -> None:
        return None


class CPUReplica(RolloutReplica):
    """verl ``RolloutReplica`` serving from :class:`CPUGenerationServer` (one server per replica)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        server = (
            ray.remote(CPUGenerationServer)
            .options(name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        await server.wake_up.remote()  # waits for the model to load
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"cpu-rollout-{self.replica_rank}"


class CPUServerAdapter(rollout_base.BaseRollout):
    """The rollout inside an FSDP actor worker: pushes the actor's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        per_replica = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        per_replica *= self.config.pipeline_model_parallel_size
        self.replica_rank = rank // per_replica if replica_rank == -1 else replica_rank
        self.is_leader_rank = rank % per_replica == 0
        self.sleep_level = 1

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        state = {}
        if hasattr(weights, "__aiter__"):
            async for name, tensor in weights:
                state[name] = tensor.detach().to("cpu", torch.float32).clone()
        else:
            for name, tensor in weights:  # every rank iterates: FSDP gathers each full tensor collectively
                state[name] = tensor.detach().to("cpu", torch.float32).clone()
        if self.is_leader_rank:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, kwargs.get("global_steps"))


def record_advantages() -> None:
    """With ``$ACERL_CPU_ADV_DUMP`` set, every advantage computation of the trainer (verl's GRPO, which
    ``compute_advantage`` calls as ``core_algos.compute_grpo_outcome_advantage``, and every acerl estimator, ACE
    among them, which the plugin's shim sends through ``compute_registered_advantage``) saves its inputs and
    output to ``<dump>.<pid>.<n>.pt``, so a test can recompute them with :mod:`acerl.algos` on the very rollouts
    of the run."""
    prefix = os.environ.get(ADV_DUMP_ENV)
    if not prefix:
        return
    from verl.trainer.ppo import core_algos

    counter = {"n": 0}

    def wrap(fn: Any, name: str) -> Any:
        if getattr(fn, "_acerl_recorded", False):
            return fn

        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs).arguments
            saved: dict[str, Any] = {"estimator": bound.get("name", name)}
            for key, value in bound.items():
                if isinstance(value, torch.Tensor):
                    saved[key] = value.detach().cpu().clone()
                elif key == "index":
                    saved[key] = [str(v) for v in value]
                elif key in ("epsilon", "norm_adv_by_std_in_grpo"):
                    saved[key] = value
                elif key == "config" and value is not None:
                    from omegaconf import OmegaConf

                    saved[key] = OmegaConf.to_container(value, resolve=True)
            saved["advantages"] = out[0].detach().cpu().clone()
            counter["n"] += 1
            torch.save(saved, f"{prefix}.{os.getpid()}.{counter['n']}.pt")
            return out

        recorded._acerl_recorded = True  # type: ignore[attr-defined]
        return recorded

    from acerl.verl_backend import plugin

    core_algos.compute_grpo_outcome_advantage = wrap(core_algos.compute_grpo_outcome_advantage, "grpo")
    # the shim's path for every acerl estimator looks this name up in the plugin module at each call
    plugin.compute_registered_advantage = wrap(plugin.compute_registered_advantage, "registered")


def register() -> None:
    """Add ``cpu_hf`` to verl's two rollout registries (idempotent)."""
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.CPUServerAdapter"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: CPUReplica)


register()
verl_cpu_platform.install_loop_hooks()
record_advantages()
