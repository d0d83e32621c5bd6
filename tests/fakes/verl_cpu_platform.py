"""Test infrastructure: a CPU "accelerator" for verl 0.9.1, so verl's own FSDP worker runs on this machine.

Never on the GPU path: it is loaded only by the CPU-step tests, through verl's own plugin hooks:
``VERL_USE_EXTERNAL_MODULES=...,fakes.verl_cpu_platform`` imports this module when verl is imported (it registers
:class:`PlatformCPU` with ``PlatformRegistry.register(platform="cpu")``) and ``VERL_PLATFORM=cpu`` selects it.
verl reads the device name when ``verl.workers.engine`` is imported, so both must be set before that.

What else verl's worker needs on a CPU (each found by running it; see docs/verl.md):

- ``device_name`` "cpu" and ``current_device()`` "cpu" (FSDP2's ``fully_shard`` and
  ``torch.device(get_device_id())`` accept it); a ``device_module`` with the memory / name queries verl logs;
- ``VERL_ENGINE_DEVICE=cuda``: verl registers its FSDP engine for ``cuda`` and ``npu`` only
  (``verl/workers/engine/fsdp/transformer_impl.py``, ``EngineRegistry.register(device=["cuda", "npu"])``); the
  name only selects the class, tensors stay on the CPU;
- a gloo process group created before the worker (:func:`init_gloo_process_group`): verl's own
  ``initialize_global_process_group_ray`` would ask for ``cpu:gloo,cpu:gloo``, which torch rejects;
- :func:`unpin_fsdp2_offload`: FSDP2's reference (forward-only) model gets ``CPUOffloadPolicy(pin_memory=True)``
  and pinning needs CUDA.
"""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM_NAME = "cpu"


def _cpu_device_module() -> types.ModuleType:
    """What verl calls on ``get_torch_device()`` on the worker path, answered for a CPU."""
    mod = types.ModuleType("acerl_cpu_device")
    zero = lambda *a, **k: 0  # noqa: E731
    none = lambda *a, **k: None  # noqa: E731
    mod.max_memory_allocated = zero  # type: ignore[attr-defined]
    mod.max_memory_reserved = zero  # type: ignore[attr-defined]
    mod.memory_allocated = zero  # type: ignore[attr-defined]
    mod.memory_reserved = zero  # type: ignore[attr-defined]
    mod.reset_peak_memory_stats = none  # type: ignore[attr-defined]
    mod.empty_cache = none  # type: ignore[attr-defined]
    mod.synchronize = none  # type: ignore[attr-defined]
    mod.manual_seed = torch.manual_seed  # type: ignore[attr-defined]
    mod.manual_seed_all = torch.manual_seed  # type: ignore[attr-defined]
    mod.is_available = lambda: True  # type: ignore[attr-defined]
    mod.device_count = lambda: 1  # type: ignore[attr-defined]
    mod.current_device = lambda: "cpu"  # type: ignore[attr-defined]
    mod.set_device = none  # type: ignore[attr-defined]
    mod.get_device_name = lambda *a, **k: "cpu"  # type: ignore[attr-defined]
    mod.mem_get_info = lambda *a, **k: (0, 0)  # type: ignore[attr-defined]
    mod.get_rng_state = torch.get_rng_state  # type: ignore[attr-defined]
    mod.set_rng_state = torch.set_rng_state  # type: ignore[attr-defined]
    return mod


_DEVICE_MODULE = _cpu_device_module()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform whose device is the CPU (test infrastructure)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> Any:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "ACERL_CPU_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # verl's resource pools ask Ray for one accelerator per worker; the trainer-loop test starts Ray with
        # fake GPUs (``ray_kwargs.ray_init.num_gpus``), which place the workers and nothing else.
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def init_gloo_process_group(port: int) -> None:
    """A one-rank gloo process group (what verl's worker would otherwise create as ``cpu:gloo,cpu:gloo``)."""
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(port))
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)


def unpin_fsdp2_offload() -> None:
    """FSDP2's forward-only models get ``CPUOffloadPolicy(pin_memory=True)``; pinning needs CUDA."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    def unpinned(pin_memory: bool = True) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False)

    transformer_impl.CPUOffloadPolicy = unpinned  # type: ignore[assignment]


def fix_gloo_backend_string() -> None:
    """verl's ``initialize_global_process_group_ray`` (``verl/utils/distributed.py``) builds the backend
    ``cpu:gloo,<device>:<backend>``, i.e. ``cpu:gloo,cpu:gloo`` here, which torch rejects; on this platform it
    becomes plain ``gloo``. Rebinds the name in the modules that import it (``engine_workers`` imports it later
    and gets the wrapper)."""
    import sys

    from verl.utils import distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_acerl_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None or backend == "cpu:gloo,cpu:gloo":
            backend = "gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray._acerl_cpu = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "initialize_global_process_group_ray"):
            module.initialize_global_process_group_ray = initialize_global_process_group_ray


def unpin_cpu_offload_class() -> None:
    """:func:`unpin_fsdp2_offload` for every process (Ray workers import verl's FSDP engine at any time):
    torch's ``CPUOffloadPolicy`` itself never pins (its ``__init__`` is wrapped, so every imported name of the
    class sees it)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    init = CPUOffloadPolicy.__init__
    if getattr(init, "_acerl_cpu", False):
        return

    def unpinned_init(self, pin_memory: bool = True) -> None:
        init(self, pin_memory=False)

    unpinned_init._acerl_cpu = True  # type: ignore[attr-defined]
    CPUOffloadPolicy.__init__ = unpinned_init  # type: ignore[method-assign]


def install_loop_hooks() -> None:
    """Everything the trainer loop's processes need on this platform (called at import by :mod:`fakes.verl_cpu_rollout`,
    in every process that imports verl when ``VERL_PLATFORM=cpu``)."""
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != PLATFORM_NAME:
        return
    fix_gloo_backend_string()
    unpin_cpu_offload_class()
