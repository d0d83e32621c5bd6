"""The device-mixing detector itself (tests/support/device_mixing.py): it refuses what CUDA refuses and allows what
CUDA allows, so the trainer / sampler tests run under it have neither false alarms nor blind spots."""

from __future__ import annotations

import pytest
import torch
from support.device_mixing import DEVICE, HOST, MODEL_DEVICE, DeviceMixError, DeviceMixingMode


@pytest.fixture
def weight() -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.ones(4, 3))


def test_host_tensor_combined_with_a_parameter_is_refused(weight: torch.nn.Parameter) -> None:
    with DeviceMixingMode(), pytest.raises(DeviceMixError, match="same device"):
        _ = weight * torch.arange(3)  # a GPU run: cuda weight * cpu arange


def test_mix_is_caught_through_derived_tensors(weight: torch.nn.Parameter) -> None:
    with DeviceMixingMode() as mode:
        scores = torch.tensor([1.0, 0.0, 1.0, 0.0]).double()  # host, like graded rewards
        mask = (weight.sum(dim=-1) > 0).long()  # derived from the model: device
        assert mode.place(scores) == HOST and mode.place(mask) == DEVICE
        with pytest.raises(DeviceMixError):
            torch.where(mask.bool(), scores, 0.0)


def test_what_cuda_accepts_is_allowed(weight: torch.nn.Parameter) -> None:
    with DeviceMixingMode() as mode:
        x = weight.detach() * torch.tensor(2.0)  # 0-dim host tensor: a scalar on CUDA
        rows = torch.tensor([0, 2])  # host indices into a device tensor
        picked = x[rows]
        x[0] = torch.ones(3)  # basic indexing: a copy_, fine across devices
        x.copy_(torch.zeros(4, 3))
        moved = torch.arange(3).to(weight.device)  # an explicit move to the model's device
        host = x.cpu() + torch.arange(3)  # host-side work on a copy
        assert mode.place(picked) == DEVICE and mode.place(moved) == DEVICE and mode.place(host) == HOST
        assert mode.checked > 0


def test_what_cuda_refuses_in_indexing_is_refused(weight: torch.nn.Parameter) -> None:
    with DeviceMixingMode():
        x = weight.detach()
        rows = torch.nonzero(x[:, 0] > 0).squeeze(-1)  # device indices
        with pytest.raises(DeviceMixError):
            _ = torch.arange(4)[rows]  # device indices into a host tensor
        with pytest.raises(DeviceMixError):
            x[torch.tensor([0, 1])] = torch.zeros(2, 3)  # index_put_ with host values into a device tensor


def test_device_property_reports_the_stand_in_device(weight: torch.nn.Parameter) -> None:
    """``x.device`` of a device tensor is ``cpu:0`` inside the mode, so ``torch.zeros(n, device=x.device)``
    lands on the device and ``device=host.device`` on the host, as on a GPU."""
    with DeviceMixingMode() as mode:
        assert weight.device == MODEL_DEVICE
        host = torch.arange(3)
        assert host.device == torch.device("cpu")
        assert mode.place(torch.zeros(3, device=weight.device)) == DEVICE
        assert mode.place(torch.zeros(3, device=host.device)) == HOST
        assert mode.place(torch.zeros(3, device="cpu")) == HOST
