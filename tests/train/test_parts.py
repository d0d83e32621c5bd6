"""Trainer building blocks: prompt stream, LR schedules, rewards, metrics log, RNG round trip, signals."""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from trainer_fixtures import Verdict

from acerl.config import OverlongShaping, TrainHyper
from acerl.optim import build_optimizer, lr_factor
from acerl.train.checkpoint import get_rng_states, set_rng_states
from acerl.train.data import PromptStream
from acerl.train.metrics import MetricsLog, Timer, read_metrics
from acerl.train.rewards import compute_rewards, task_rewards
from acerl.train.signals import PREEMPTED_EXIT_CODE, PreemptionFlag, TrainingPreempted


def test_prompt_stream_epochs_and_resume():
    s = PromptStream(size=10, seed=3)
    first = s.next(4) + s.next(4) + s.next(4)  # crosses into epoch 1
    assert sorted(first[:10]) == list(range(10))  # epoch 0 is a permutation
    assert s.state_dict() == {"epoch": 1, "position": 2}
    rest = s.next(7)
    t = PromptStream(size=10, seed=3)
    t.load_state_dict({"epoch": 1, "position": 2})
    assert t.next(7) == rest
    assert PromptStream(10, seed=4).next(10) != PromptStream(10, seed=3).next(10)
    with pytest.raises(ValueError, match="^the training set is empty$"):
        PromptStream(0, seed=0)
    assert PromptStream(1, seed=0).next(3) == [0, 0, 0]  # one row is a training set


def test_lr_schedules_match_verl_formulas():
    # verl get_constant_schedule_with_warmup / get_cosine_schedule_with_warmup(min_lr_ratio=0, num_cycles=0.5)
    assert [lr_factor("constant", s, 2, 10) for s in range(4)] == [0.0, 0.5, 1.0, 1.0]
    assert [lr_factor("constant", s, 0, 10) for s in range(2)] == [1.0, 1.0]
    cos = [lr_factor("cosine", s, 2, 10) for s in range(11)]
    assert cos[:3] == [0.0, 0.5, 1.0]
    assert cos[6] == pytest.approx(0.5) and cos[10] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(cos[2:], cos[3:], strict=False))
    assert lr_factor("cosine", 0, 0, 10) == 1.0  # no warm-up: the full LR from the first step
    assert lr_factor("cosine", 2, 1, 2) == pytest.approx(0.0, abs=1e-12)  # 0 at total_steps, one decay step
    with pytest.raises(ValueError, match="valid: constant, cosine"):
        lr_factor("linear", 0, 0, 1)


def test_optimizer_settings_and_schedule_stepping():
    hyper = TrainHyper(lr=0.1, betas=(0.8, 0.9), weight_decay=0.05, warmup_steps=2, lr_schedule="cosine",
                       total_steps=4)  # fmt: skip
    p = torch.nn.Parameter(torch.zeros(2))
    opt, sched = build_optimizer([p], hyper)
    group = opt.param_groups[0]
    assert group["betas"] == (0.8, 0.9) and group["weight_decay"] == 0.05
    lrs = []
    for _ in range(5):
        lrs.append(group["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.0, 0.05, 0.1, 0.05, 0.0])


class _Fixed:
    def __init__(self, verdicts):
        self.verdicts = verdicts

    def grade_many(self, items, *, progress=None):
        assert len(items) == len(self.verdicts)
        return [Verdict(v) for v in self.verdicts]


def test_rewards_binary_signed_and_overlong():
    verifier = _Fixed([True, False, True, False])
    lengths = torch.tensor([4, 10, 14, 16])
    off = OverlongShaping(enable=False)
    r = compute_rewards(verifier, ["a"] * 4, ["1"] * 4, lengths, "binary", off, 16)
    assert r.scores.tolist() == [1.0, 0.0, 1.0, 0.0] and r.correct.tolist() == [True, False, True, False]
    r = compute_rewards(verifier, ["a"] * 4, ["1"] * 4, lengths, "signed", off, 16)
    assert r.scores.tolist() == [1.0, -1.0, 1.0, -1.0] and r.overlong.tolist() == [0.0] * 4
    on = OverlongShaping(enable=True, buffer=4, penalty_factor=1.0)  # penalty from 12 tokens: -(L-12)/4
    r = compute_rewards(verifier, ["a"] * 4, ["1"] * 4, lengths, "signed", on, 16)
    assert r.overlong.tolist() == [0.0, 0.0, -0.5, -1.0]
    assert r.scores.tolist() == [1.0, -1.0, 0.5, -2.0] and r.correct.tolist() == [True, False, True, False]
    half = OverlongShaping(enable=True, buffer=4, penalty_factor=0.5)  # the factor scales the penalty
    r = compute_rewards(verifier, ["a"] * 4, ["1"] * 4, lengths, "signed", half, 16)
    assert r.overlong.tolist() == [0.0, 0.0, -0.25, -0.5]
    with pytest.raises(ValueError, match=r"^4 responses but 3 gold answers$"):
        compute_rewards(verifier, ["a"] * 4, ["1"] * 3, lengths, "signed", off, 16)
    with pytest.raises(ValueError, match="valid: binary, signed"):
        task_rewards(torch.tensor([True]), "ternary")


def test_metrics_log_truncates_on_resume_and_mirrors_to_dvclive(tmp_path: Path):
    path, live = tmp_path / "metrics.jsonl", tmp_path / "dvclive"
    with MetricsLog(path, resume_step=0, live_dir=live) as log:
        for step in (1, 2, 3):
            log.log(step, {"train/a": float(step), "actor/b": math.nan, "timing/c": 0.1})
    with path.open("a") as fh:
        fh.write('{"step": 4, "train/a"')  # torn line from a kill
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert read_metrics(path)[0]["actor/b"] is None  # non-finite -> null (strict JSON)
    with MetricsLog(path, resume_step=2, live_dir=live) as log:
        log.log(3, {"train/a": 30.0})
    assert [(r["step"], r["train/a"]) for r in read_metrics(path)] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    tsv = (live / "plots" / "metrics" / "train" / "a.tsv").read_text().splitlines()
    assert tsv == ["step\ta", "1\t1.0", "2\t2.0", "3\t30.0"]
    assert json.loads((live / "metrics.json").read_text())["train"]["a"] == 30.0
    assert not (live / "plots" / "metrics" / "actor").exists()  # null values are not plotted
    assert not list(tmp_path.glob("**/dvc.yaml"))


@pytest.mark.parametrize("dvc", [False, True], ids=["git", "git+dvc"])
def test_metrics_log_inside_a_repository_writes_only_its_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dvc: bool
):
    """A training job's dvclive mirror inside a Git repository, or a Git + DVC project (where `dvc repro` runs
    it), writes its run's files and nothing else: dvclive's own repository lookup would `dvc init` a plain Git
    repository (``.dvc/``, ``.dvcignore``) and mark an experiment for DVC's tools."""
    import subprocess
    import sys

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    if dvc:  # DVC's own CLI (its in-process logger keeps the first pytest session's streams)
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    before = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if ".git" not in p.parts}
    run = tmp_path / "runs" / "r"
    with MetricsLog(run / "metrics.jsonl", resume_step=0, live_dir=run / "dvclive") as log:
        log.log(1, {"train/a": 1.0})
    after = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if ".git" not in p.parts}
    assert {a for a in after - before if a.parts[:2] != ("runs", "r")} == {Path("runs")}
    assert not [a for a in after - before if a.name in ("dvc.yaml", ".dvcignore")]
    status = subprocess.run([*git, "status", "--porcelain"], cwd=tmp_path, text=True, capture_output=True)
    assert status.stdout.split() == ["??", "runs/"]


def test_timer_counts_a_nested_name_for_itself_alone(monkeypatch: pytest.MonkeyPatch):
    """The update times the advantage estimate inside it: ``timing/update`` must not count those seconds
    again, so the step's timings add up to the time timed."""
    import acerl.train.metrics as metrics

    clock = iter(
        [0.0, 1.0, 3.0, 10.0, 10.0, 10.5]
    )  # update [0, 10] holds advantage [1, 3]; then advantage 0.5
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
    timer = Timer()
    with timer("update"), timer("advantage"):
        pass
    with timer("advantage"):
        pass
    assert timer.metrics() == {"timing/advantage": 2.5, "timing/update": 8.0}


def test_rng_states_round_trip_through_weights_only_load(tmp_path: Path):
    random.random(), np.random.rand(), torch.rand(1)
    states = get_rng_states()
    assert "sampling" not in states  # every batch reseeds the sampling generator: nothing to save
    torch.save(states, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.random(), np.random.rand(), torch.rand(5)  # move every stream on
    set_rng_states(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (random.random(), np.random.rand(), torch.rand(1))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])


def test_preemption_flag_records_signals_and_restores_handlers():
    previous = signal.getsignal(signal.SIGUSR1)
    with PreemptionFlag() as flag:
        assert not flag.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flag.requested and flag.signum == signal.SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) == previous
    err = TrainingPreempted(step=3, signum=signal.SIGTERM)
    assert isinstance(err, SystemExit) and err.code == PREEMPTED_EXIT_CODE == 75
    assert "SIGTERM" in str(err) and "step 3" in str(err)


def test_ctrl_c_asks_for_a_checkpoint_and_a_second_one_stops_at_once(caplog: pytest.LogCaptureFixture):
    """The first SIGINT is recorded like SIGTERM (the trainer then exits 130, an interrupt); a second one raises
    ``KeyboardInterrupt`` at once, for a user who will not wait for the step to finish."""
    with caplog.at_level("WARNING", logger="acerl.train.signals"), PreemptionFlag() as flag:
        os.kill(os.getpid(), signal.SIGINT)
        assert flag.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    lines = [r.getMessage() for r in caplog.records if r.name == "acerl.train.signals"]
    assert lines == ["received SIGINT: will checkpoint and stop after this step (Ctrl-C again stops at once)"]
    err = TrainingPreempted(step=2, signum=signal.SIGINT)
    assert err.code == 130 and str(err) == (
        "training preempted by SIGINT after step 2 (checkpoint written; exit code 130)"
    )


def test_ema_reference_update_on_known_tensors():
    """``ref <- decay * ref + (1 - decay) * policy`` with a decay other than 0.5 (where a swap would not show)."""
    from acerl.train.algorithm import ema_update

    ref, policy = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([[1.0, -2.0]]))
        ref.bias.fill_(4.0)
        policy.weight.copy_(torch.tensor([[3.0, 2.0]]))
        policy.bias.fill_(-6.0)
    ema_update(ref, policy, decay=0.9)
    torch.testing.assert_close(ref.weight.detach(), torch.tensor([[1.2, -1.6]]))  # 0.9 * ref + 0.1 * policy
    torch.testing.assert_close(ref.bias.detach(), torch.tensor([3.0]))
    assert policy.weight.tolist() == [[3.0, 2.0]] and policy.bias.tolist() == [-6.0]  # untouched
    ema_update(ref, policy, decay=1.0)  # decay 1: a fixed reference
    torch.testing.assert_close(ref.bias.detach(), torch.tensor([3.0]))
    # parameter lists of different lengths are an error, not a silent stop at the shorter one
    with pytest.raises(ValueError, match="argument 2 is longer than argument 1"):
        ema_update(torch.nn.Linear(2, 1, bias=False), policy, decay=0.9)


def test_task_rewards_are_float32_under_a_float64_default_dtype():
    """The rewards enter the advantage estimators as float32 whatever torch's default dtype is."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert task_rewards(torch.tensor([True, False]), "signed").dtype == torch.float32
    finally:
        torch.set_default_dtype(default)


def test_preemption_flag_warns_once_naming_the_signal(caplog: pytest.LogCaptureFixture):
    """The first preemption signal is logged once, by name (a job log says why the run stopped); a second
    signal updates the flag without another line."""
    with caplog.at_level("WARNING", logger="acerl.train.signals"), PreemptionFlag() as flag:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.signum == signal.SIGTERM
    lines = [r.getMessage() for r in caplog.records if r.name == "acerl.train.signals"]
    assert lines == ["received SIGUSR1: will checkpoint and stop after this step"]


def test_metrics_log_without_dvclive_writes_only_its_jsonl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    with MetricsLog(tmp_path / "m.jsonl", resume_step=0) as log:
        log.log(1, {"x": 0.5})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]
    assert read_metrics(tmp_path / "m.jsonl") == [{"step": 1, "x": 0.5}]


def test_training_prompts_use_the_set_s_tokenizer_and_may_fill_max_prompt_length(monkeypatch):
    """A prompt of exactly ``max_prompt_length`` tokens trains; one token more is refused with the row's id and
    the key to change; the template gets the set's tokenizer (chat templates need it)."""
    import acerl.train.data as data_module
    from acerl.generate.base import encode_prompt
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.prompts import build_prompt
    from acerl.train.data import TrainingSet

    tokenizer = build_char_tokenizer()
    seen: list[object] = []
    monkeypatch.setattr(
        data_module, "build_prompt", lambda p, t, tok: seen.append(tok) or build_prompt(p, t, tok)
    )
    row = {"id": "r7", "problem": "1+2", "answer": "3"}
    n = len(encode_prompt(tokenizer, build_prompt("1+2", "plain", tokenizer)))
    fits = TrainingSet([row], tokenizer, "plain", n, Path("train.parquet"))
    assert len(fits.prompt_ids(0)) == n and seen == [tokenizer]
    short = TrainingSet([row], tokenizer, "plain", n - 1, Path("train.parquet"))
    message = (
        f"train.parquet: row 'r7' has a {n}-token prompt, longer than max_prompt_length={n - 1} "
        "(models.<model>.train.max_prompt_length)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        short.prompt_ids(0)
