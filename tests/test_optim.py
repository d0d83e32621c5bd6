"""acerl.optim's AdamW and StepSchedule against torch.optim.AdamW and LambdaLR: the same weights, moments and
learning rates bit for bit, the same state_dict formats (checkpoints move between them both ways), and no
torch._dynamo import (the reason they exist)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR

from acerl.optim import AdamW, StepSchedule, lr_factor

STEPS = 12


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Embedding(11, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 16), torch.nn.Linear(16, 11)
    )


def _factor(step: int) -> float:
    return lr_factor("cosine", step, 3, STEPS)


def _train(model, optimizer, scheduler, steps: range) -> list[float]:
    """Real gradients of a real loss; the last layer's bias gets none on odd steps (a param skipped by step())."""
    lrs = []
    for step in steps:
        gen = torch.Generator().manual_seed(100 + step)
        x = torch.randint(0, 11, (4, 6), generator=gen)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), x.roll(1, dims=1).reshape(-1))
        loss.backward()
        if step % 2:
            model[3].bias.grad = None
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


def _torch_pair(model, wd):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
    return opt, LambdaLR(opt, _factor)


def _ours_pair(model, wd):
    opt = AdamW(model.parameters(), lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
    return opt, StepSchedule(opt, _factor)


def _assert_same_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for key in a["state"]:
        sa, sb = a["state"][key], b["state"][key]
        assert sa.keys() == sb.keys()
        for name in sa:
            assert sa[name].dtype == sb[name].dtype, (key, name)
            assert torch.equal(sa[name], sb[name]), (key, name)


def _assert_same_weights(m1: torch.nn.Module, m2: torch.nn.Module) -> None:
    for (name, p1), p2 in zip(m1.named_parameters(), m2.parameters(), strict=True):
        assert torch.equal(p1, p2), name


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_matches_torch_bit_for_bit(wd):
    theirs, ours = _model(), _model()
    opt_t, sched_t = _torch_pair(theirs, wd)
    opt_o, sched_o = _ours_pair(ours, wd)
    assert opt_o.param_groups[0]["lr"] == opt_t.param_groups[0]["lr"] == 0.0  # warm-up starts at 0
    lrs_t = _train(theirs, opt_t, sched_t, range(STEPS))
    lrs_o = _train(ours, opt_o, sched_o, range(STEPS))
    assert lrs_o == lrs_t and len(set(lrs_t)) > 5  # the schedule moved, identically
    _assert_same_weights(theirs, ours)
    assert not torch.equal(theirs[2].weight, _model()[2].weight)  # and the weights did move
    _assert_same_state(opt_t.state_dict(), opt_o.state_dict())
    assert sched_o.state_dict() == sched_t.state_dict()
    assert sched_o.get_last_lr() == sched_t.get_last_lr()


@pytest.mark.parametrize("direction", ["torch->ours", "ours->torch"])
def test_checkpoints_move_between_torch_and_ours(direction, tmp_path):
    """Save after 5 steps with one implementation, resume with the other: the same 12-step result as torch alone
    (a checkpoint written before this class existed resumes; one written now loads into torch)."""
    reference = _model()
    opt_r, sched_r = _torch_pair(reference, 0.1)
    _train(reference, opt_r, sched_r, range(STEPS))

    first = _model()
    opt_a, sched_a = (_torch_pair if direction == "torch->ours" else _ours_pair)(first, 0.1)
    _train(first, opt_a, sched_a, range(5))
    torch.save({"opt": opt_a.state_dict(), "sched": sched_a.state_dict()}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)

    second = copy.deepcopy(first)
    opt_b, sched_b = (_ours_pair if direction == "torch->ours" else _torch_pair)(second, 0.1)
    opt_b.load_state_dict(saved["opt"])
    sched_b.load_state_dict(saved["sched"])
    _train(second, opt_b, sched_b, range(5, STEPS))
    _assert_same_weights(reference, second)
    _assert_same_state(opt_r.state_dict(), opt_b.state_dict())


def test_load_state_dict_copies_the_tensors():
    model = _model()
    opt, sched = _ours_pair(model, 0.0)
    _train(model, opt, sched, range(2))
    saved = opt.state_dict()
    before = copy.deepcopy(saved)
    other = copy.deepcopy(model)
    opt2 = AdamW(other.parameters(), lr=3e-2)
    opt2.load_state_dict(saved)
    _train(other, opt2, StepSchedule(opt2, _factor), range(2, 4))
    _assert_same_state(saved, before)  # the source's moments and step counts are untouched


def test_load_state_dict_refuses_what_it_cannot_resume():
    model = _model()
    opt, sched = _ours_pair(model, 0.0)
    _train(model, opt, sched, range(1))
    saved = opt.state_dict()
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"state": {}})
    smaller = AdamW(list(model.parameters())[:-1])
    with pytest.raises(ValueError, match="parameter group 0 .* 7 parameters, this optimizer's 6"):
        smaller.load_state_dict(saved)
    amsgrad = {**saved, "param_groups": [{**saved["param_groups"][0], "amsgrad": True}]}
    with pytest.raises(ValueError, match="amsgrad=True"):
        opt.load_state_dict(amsgrad)
    with pytest.raises(ValueError, match="lacks _last_lr"):
        sched.load_state_dict({"base_lrs": [1.0], "last_epoch": 3})
    foreach = {**saved, "param_groups": [{**saved["param_groups"][0], "foreach": True}]}
    opt.load_state_dict(foreach)  # a kernel choice (a GPU run's state), not another update: accepted


def test_bad_hyperparameters_are_refused():
    params = list(_model().parameters())
    with pytest.raises(ValueError, match="betas"):
        AdamW(params, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="learning rate"):
        AdamW(params, lr=-1.0)
    with pytest.raises(ValueError, match="empty"):
        AdamW([])


def test_zero_grad_without_none_zeroes():
    model = _model()
    opt = AdamW(model.parameters())
    model(torch.tensor([[1, 2]])).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_an_optimizer_step_imports_no_dynamo():
    """The reason for the class: torch.optim's base class imports torch._dynamo (seconds of CPU per job)."""
    code = (
        "import sys, torch\n"
        "from acerl.optim import build_optimizer\n"
        "from acerl.config import TrainHyper\n"
        "m = torch.nn.Linear(2, 2)\n"
        "opt, sched = build_optimizer(m.parameters(), TrainHyper())\n"
        "m(torch.ones(1, 2)).sum().backward(); opt.step(); opt.zero_grad(); sched.step()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
