"""Catch CPU/GPU device mixing on a CPU-only machine: :class:`DeviceMixingMode`.

A CPU machine has one device, so ``cuda_tensor * cpu_tensor`` -- which raises ``RuntimeError: Expected all
tensors to be on the same device`` on a GPU -- silently works here. This ``TorchFunctionMode`` replays the
placement rules of a two-device run. The model is put on :data:`MODEL_DEVICE`, ``cpu:0``: the same CPU, but
a device *name* other than the host's ``cpu``, which stands for the GPU. Every tensor gets a place tag:

- ``DEVICE``: the model's parameters, tensors made on ``cpu:0`` (``torch.zeros(..., device=x.device)``,
  ``x.to(state.device)``), and everything computed from a ``DEVICE`` tensor;
- ``HOST``: tensors made without a device (``torch.arange(n)``, ``torch.tensor([...])``,
  ``torch.from_numpy``) or on plain ``cpu`` (``x.cpu()``, ``x.to("cpu")``), and everything computed from
  ``HOST`` tensors only.

Inside the mode ``x.device`` reports ``cpu:0`` for a ``DEVICE`` tensor and ``cpu`` for a ``HOST`` one, as a
GPU run would report ``cuda:0`` / ``cpu``: code that derives a device from a tensor keeps its placement.

An op is refused (:class:`DeviceMixError`, raised at the offending line) when it combines a ``DEVICE`` tensor
with a ``HOST`` tensor of one or more dimensions, except where CUDA itself accepts that mix:

- 0-dim host tensors (CUDA treats them as scalars: ``cuda_x * torch.tensor(2.0)`` works);
- host index tensors indexing a device tensor (``cuda_x[cpu_rows]``: CUDA moves the indices);
- copies across devices: ``.to``, ``.copy_``, ``.cpu``, and ``x[slice] = y`` with basic (non-tensor) indexing,
  which is a ``copy_``.

So legitimate host-side work (rewards graded on the CPU, group filtering on CPU tensors, metrics from
``.cpu()`` copies) is never flagged; only a combination that would crash on a GPU is. Tensors the mode has
never seen (made before it was entered) are untagged and never flagged.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

__all__ = ["DEVICE", "HOST", "MODEL_DEVICE", "DeviceMixError", "DeviceMixingMode"]

DEVICE = "device"
HOST = "host"
MODEL_DEVICE = torch.device("cpu", 0)  # the stand-in GPU: computes on the CPU, but is not the host "cpu"

_FACTORIES = {
    torch.arange,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.linspace,
    torch.logspace,
    torch.eye,
    torch.tensor,
    torch.as_tensor,
    torch.from_numpy,
}
_DEVICE_PROPERTY = torch._C.TensorBase.device
_MOVES = {Tensor.to, Tensor.cuda, Tensor.cpu, Tensor.copy_, Tensor.type_as}


class DeviceMixError(RuntimeError):
    """An op combined a device tensor with a host tensor: it would raise on a GPU."""


def _place_of_device(device: str | torch.device) -> str:
    """:data:`MODEL_DEVICE` (``cpu:0``) and any accelerator stand for the model's device; plain ``cpu`` is
    the host."""
    device = torch.device(device)
    return HOST if device.type == "cpu" and device.index is None else DEVICE


def _device_argument(args: tuple, kwargs: dict) -> tuple[bool, object]:
    """The target device of a ``Tensor.to(...)`` call, if it names one (a device, a string, or a tensor)."""
    if "device" in kwargs and kwargs["device"] is not None:
        return True, kwargs["device"]
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            return True, a
        if isinstance(a, Tensor):
            return True, a
    return False, None


def _is_basic_index(index: object) -> bool:
    """Whether ``x[index]`` is basic indexing (ints, slices, None, Ellipsis): a view, and for assignment a
    ``copy_`` that works across devices."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items)


class DeviceMixingMode(TorchFunctionMode):
    """Tag tensors ``DEVICE`` / ``HOST`` and raise :class:`DeviceMixError` on a mix CUDA would refuse.

    Usage::

        with DeviceMixingMode():
            train_step(...)

    ``checked`` counts the ops inspected (a test can assert the mode actually saw the work).
    """

    def __init__(self) -> None:
        super().__init__()
        self.places: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.checked = 0

    def place(self, t: Tensor) -> str | None:
        if isinstance(t, torch.nn.Parameter):
            return DEVICE
        return self.places.get(t)

    # ----------------------------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        if inputs:
            self.checked += 1
            self._check(func, args, inputs)
        out = func(*args, **kwargs)
        if getattr(func, "__self__", None) is _DEVICE_PROPERTY:
            return MODEL_DEVICE if self.place(args[0]) == DEVICE and out.type == "cpu" else out
        place = self._output_place(func, args, kwargs, inputs)
        if place is not None and not self._in_place(func, args):
            for t in tree_leaves(out):
                if isinstance(t, Tensor):
                    self.places[t] = place
        return out

    @staticmethod
    def _in_place(func, args: tuple) -> bool:  # noqa: ANN001
        name = getattr(func, "__name__", "")
        return bool(args) and isinstance(args[0], Tensor) and name.endswith("_") and not name.endswith("__")

    def _output_place(self, func, args: tuple, kwargs: dict, inputs: list[Tensor]) -> str | None:  # noqa: ANN001
        if func in _FACTORIES:
            device = kwargs.get("device")
            if device is not None:
                return _place_of_device(device)
            if func in (torch.as_tensor, torch.tensor) and args and isinstance(args[0], Tensor):
                return self.place(args[0])
            return HOST
        if func is Tensor.cpu:
            return HOST
        if func in (Tensor.to, Tensor.cuda):
            named, device = _device_argument(args, kwargs) if func is Tensor.to else (True, "cuda")
            if named:
                return self.place(device) if isinstance(device, Tensor) else _place_of_device(device)
            return self.place(args[0])
        if "device" in kwargs and kwargs["device"] is not None:  # new_zeros(..., device=d), *_like(device=d)
            return _place_of_device(kwargs["device"])
        places = {self.place(t) for t in inputs}
        if DEVICE in places:
            return DEVICE
        return HOST if HOST in places else None

    def _check(self, func, args: tuple, inputs: list[Tensor]) -> None:  # noqa: ANN001
        if func in _MOVES:
            return
        if func in (Tensor.__getitem__, Tensor.__setitem__):
            self._check_indexing(func, args)
            return
        on_device = [t for t in inputs if self.place(t) == DEVICE]
        on_host = [t for t in inputs if self.place(t) == HOST and t.dim() > 0]
        if on_device and on_host:
            self._fail(func, on_device[0], on_host[0])

    def _check_indexing(self, func, args: tuple) -> None:  # noqa: ANN001
        target, index = args[0], args[1]
        target_place = self.place(target)
        index_tensors = [t for t in tree_leaves(index) if isinstance(t, Tensor) and t.dim() > 0]
        if target_place == HOST:  # device indices into a host tensor: refused on a GPU
            for t in index_tensors:
                if self.place(t) == DEVICE:
                    self._fail(func, t, target)
        if func is Tensor.__setitem__ and len(args) > 2 and isinstance(args[2], Tensor):
            value = args[2]
            value_place = self.place(value)
            mixed = {target_place, value_place} == {DEVICE, HOST}
            if mixed and value.dim() > 0 and not _is_basic_index(index):  # index_put_ needs one device
                device_t, host_t = (target, value) if target_place == DEVICE else (value, target)
                self._fail(func, device_t, host_t)

    @staticmethod
    def _fail(func, device_t: Tensor, host_t: Tensor) -> None:  # noqa: ANN001
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
        raise DeviceMixError(
            f"{name} mixes a model-device tensor {tuple(device_t.shape)} {device_t.dtype} with a host tensor "
            f"{tuple(host_t.shape)} {host_t.dtype} made without a device: on a GPU this raises 'Expected all "
            "tensors to be on the same device'. Create the host tensor with device= or move it with .to()"
        )
