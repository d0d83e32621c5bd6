"""verl 0.9.1's own trainer loop on CPU: the CI-scale study's four methods trained through ``acerl train`` ->
the launcher -> ``python -m verl.trainer.main_ppo`` (V1 ``PPOTrainerSync.fit``, Ray, TransferQueue, the replay
buffer, the reward loop, FSDP2 over two ranks, checkpoints, the file logger, the ACE plugin), with the CPU
stand-ins of :mod:`fakes.verl_cpu_loop` (a transformers rollout server behind verl's server interface, fake Ray GPUs).

One ``acerl train`` per method (3 steps each), so each run starts its own Ray (about 2-3 minutes each on two
cores). The module trains only the runs its selected tests read (``study``): ``make test`` splits it over two lanes,
the GRPO family's runs (the killed and resumed GRPO, its uninterrupted ACE-GRPO twin) in ``verl`` and the DAPO
family's (``verl_dapo`` mark: dynamic sampling) in ``verl_dapo``. docs/verl.md ("What has executed on CPU") lists
what runs and what still needs a GPU cluster.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.verl, pytest.mark.slow, pytest.mark.verl_loop]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
METHODS = ("grpo", "dapo", "ace_grpo", "ace_dapo")  # training order: the killed run first
DAPO_FAMILY = ("dapo", "ace_dapo")  # make test's verl_dapo lane (the `verl_dapo` mark)
STEPS = 3
ACE_KEYS = ("ace/negative_frac", "ace/confidence_mean_neg", "ace/multiplier_mean_neg", "ace/multiplier_max")

if importlib.util.find_spec("verl") is None or importlib.util.find_spec("transfer_queue") is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("verl 0.9.1 and TransferQueue must be installed in CI (pip install -e .[verl])")
    pytest.skip("verl / TransferQueue not installed (pip install -e .[verl])", allow_module_level=True)

from fakes import verl_cpu_loop  # noqa: E402
from support.watchdog import run_watched, watch  # noqa: E402


def methods(*names: str) -> list:
    """The ``method`` parameters of a test over the runs ``names``; the DAPO family's carry ``verl_dapo``."""
    return [pytest.param(m, marks=pytest.mark.verl_dapo) if m in DAPO_FAMILY else m for m in names]


def reads_runs(*names: str):
    """Mark a test that reads the runs ``names`` without a ``method`` parameter (``study`` trains them); a test
    of the DAPO family's runs carries ``verl_dapo``. One family per test, so each lane trains its own runs."""
    family = {m in DAPO_FAMILY for m in names}
    if len(family) != 1:
        raise ValueError(f"a test reads the runs of one family, not {names}")

    def mark(test):
        test = pytest.mark.verl_runs(*names)(test)
        return pytest.mark.verl_dapo(test) if family == {True} else test

    return mark


def selected_methods(items: list[pytest.Item]) -> list[str]:
    """The runs the selected tests of this module read (their ``method`` parameter or ``verl_runs`` mark), in
    training order."""
    here = Path(__file__).resolve()
    needed: set[str] = set()
    for item in items:
        if Path(item.path).resolve() != here:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "method" in callspec.params:
            needed.add(callspec.params["method"])
        for mark in item.iter_markers("verl_runs"):
            needed.update(mark.args)
    return [m for m in METHODS if m in needed]


def _acerl(args: list[str], env: dict[str, str], log: Path, run: Path, rollout_log: Path) -> int:
    """``acerl train`` under the progress watchdog (:mod:`support.watchdog`): stopped only when neither its log,
    its run folder nor the rollout server's log changed for the stall limit; the error names the step."""
    return run_watched(
        [sys.executable, "-m", "acerl.cli", *args],
        cwd=REPO,
        env=env,
        log=log,
        watched=[run, rollout_log],
        where=lambda: _where(run, rollout_log),
    )


def _where(run: Path, rollout_log: Path) -> str:
    """Where a verl run stood: the last step verl logged and the weights' version of the last generation."""
    metrics = run / "verl_logs" / "metrics.jsonl"
    steps = [0]
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                steps.append(int(json.loads(line).get("step", 0)))
    version = None
    if rollout_log.is_file():
        for line in rollout_log.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                rec = json.loads(line)
                if rec.get("event") == "generate":
                    version = rec.get("global_steps")
    return f"verl had logged step {max(steps)}; last rollouts from the weights of step {version}"


def _tail(log: Path, n: int = 6000) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-n:]


KILLED = "grpo"  # the run killed with SIGKILL after its step-2 checkpoint and resumed
KILL_AFTER = 2
# verl's training dataloader in worker processes (the product's path, verl's default 8) for the killed run and its
# uninterrupted twin; the DAPO family's runs load in the trainer's process. Two workers, so that the saved state
# holds whose turn is next. The twin needs them too: torchdata's loader shuffles differently with workers than
# without (docs/verl.md, "Steps"), so the twin comparison holds only between loaders of one kind
DATALOADER_WORKERS = 2
WITH_WORKERS = (KILLED, "ace_grpo")


def _train_and_kill_after_checkpoint(
    args: list[str], env: dict[str, str], log: Path, ckpts: Path, rollout_log: Path
) -> int:
    """Start ``acerl train``; once verl has recorded its step-``KILL_AFTER`` checkpoint
    (``latest_checkpointed_iteration.txt``) and logged the step, SIGKILL the whole job: the launcher, main_ppo, every Ray worker and
    Ray's own daemons (found by this job's ``RAY_TMPDIR`` in their command lines). Returns the step verl had
    checkpointed when the kill landed."""
    cmd = [sys.executable, "-m", "acerl.cli", *args]
    tracker = ckpts / "latest_checkpointed_iteration.txt"
    metrics = ckpts.parent / "verl_logs" / "metrics.jsonl"
    with log.open("a", encoding="utf-8") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        run = ckpts.parent
        rc = watch(
            proc,
            log,
            watched=[run, rollout_log],
            where=lambda: _where(run, rollout_log),
            until=lambda: (
                tracker.is_file()
                and tracker.read_text().strip() == str(KILL_AFTER)
                and _logged(metrics, KILL_AFTER)
            ),
            poll_s=0.1,
        )
        assert rc is None, f"training ended before the step-{KILL_AFTER} checkpoint:\n{_tail(log)}"
        step = int(tracker.read_text().strip())
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher's session: main_ppo, Ray's daemons and workers
        for pid in _pids_with_in_cmdline(env["RAY_TMPDIR"] + "/"):  # anything of this job's Ray outside it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)
        out.write(f"\n### killed with SIGKILL at checkpoint step {step}\n")
    time.sleep(2)
    return step


def _logged(metrics: Path, step: int) -> bool:
    """verl's file logger has written ``step`` (it writes after the step's checkpoint; a kill in between
    loses that step's record, see docs/verl.md)."""
    if not metrics.is_file():
        return False
    for line in metrics.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            if json.loads(line).get("step") == step:
                return True
    return False


def _pids_with_in_cmdline(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(entry.name))
    return pids


class Study:
    """The work directory of the CPU verl study and the records each run left."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config_args = [
            "--config",
            str(REPO / "config" / "test.yaml"),
            "--config",
            str(root / "verl_cpu.yaml"),
        ]
        self.wall: dict[str, float] = {}
        self.timing: dict[str, dict[str, float]] = {}
        self.killed_at = -1

    def run_dir(self, method: str) -> Path:
        return self.root / "runs" / "tiny" / method / "seed0"

    def metrics(self, method: str) -> dict[int, dict]:
        lines = (self.run_dir(method) / "metrics.jsonl").read_text().splitlines()
        return {rec["step"]: rec for rec in map(json.loads, lines)}

    def rollout_log(self, method: str) -> list[dict]:
        return [json.loads(line) for line in (self.root / f"rollout_{method}.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def study(request, tmp_path_factory, prepared_study: Path) -> Study:
    """The runs the session's selected tests read (all four methods in one session; the GRPO or the DAPO family
    in each of ``make test``'s verl lanes), trained on the CI-scale study's data and SFT'd base model:
    ``prepared_study``, which ``make test``'s lanes build once and share (the verl overlay changes neither: same
    data and base settings)."""
    import shutil

    root = tmp_path_factory.mktemp("verl_cpu_loop")
    verl_cpu_loop.write_overlay(root)
    s = Study(root)
    env = {**os.environ, **verl_cpu_loop.cpu_env(root), "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    shutil.copytree(prepared_study / "data", root / "data")
    shutil.copytree(prepared_study / "models" / "base", root / "models" / "base")
    s.wall["prepare"] = time.monotonic() - t0
    for method in selected_methods(request.session.items):
        t0 = time.monotonic()
        workers = DATALOADER_WORKERS if method in WITH_WORKERS else 0
        menv = {
            **env,
            **verl_cpu_loop.cpu_env(root, dataloader_workers=workers, name=f"_{method}"),
            verl_cpu_loop.ROLLOUT_LOG_ENV: str(root / f"rollout_{method}.jsonl"),
            verl_cpu_loop.ADV_DUMP_ENV: str(root / f"adv_{method}"),
        }
        args = [
            "train",
            *s.config_args,
            "--root",
            str(root),
            "--model",
            "tiny",
            "--method",
            method,
            "--seed",
            "0",
        ]
        log = root / f"train_{method}.log"
        rollout_log = Path(menv[verl_cpu_loop.ROLLOUT_LOG_ENV])
        if method == KILLED:
            s.killed_at = _train_and_kill_after_checkpoint(
                args, menv, log, s.run_dir(method) / "checkpoints", rollout_log
            )
        rc = _acerl(args, menv, log, s.run_dir(method), rollout_log)
        assert rc == 0, _tail(log)
        s.wall[method] = time.monotonic() - t0
        s.timing[method] = _time_split(s, method, t0)
    print("verl CPU loop wall time (s):", {k: round(v) for k, v in s.wall.items()})
    record = os.environ.get(TIMING_ENV)
    if record:  # each verl lane adds its runs to the file
        old = json.loads(Path(record).read_text()) if Path(record).is_file() else {"wall": {}, "runs": {}}
        merged = {"wall": {**old["wall"], **s.wall}, "runs": {**old["runs"], **s.timing}}
        Path(record).write_text(json.dumps(merged, indent=1) + "\n")
    return s


TIMING_ENV = "ACERL_VERL_LOOP_TIMING"  # a file that receives where each run's wall time went (docs/verl.md)


def _time_split(study: Study, method: str, t0: float) -> dict[str, float]:
    """Where a run's wall time went: verl's own per-step timers summed over the run (``timing_s/*``: generation,
    log-prob passes, update, checkpoint), the export after the last step (verl's model merger), and the rest
    (launcher, Ray start, worker start, shutdown; for the killed run both attempts)."""
    end = time.monotonic()
    run = study.run_dir(method)
    steps = study.metrics(method)
    out: dict[str, float] = defaultdict(float)
    for rec in steps.values():
        for key, value in rec.items():
            if key.startswith("timing_s/") and isinstance(value, (int, float)):
                out[key] += float(value)
    # the export: from verl's last metrics record to the final policy's files
    export = (run / "final" / "config.json").stat().st_mtime - (
        run / "verl_logs" / "metrics.jsonl"
    ).stat().st_mtime
    out["export"] = max(export, 0.0)
    out["wall"] = end - t0
    out["startup_and_shutdown"] = out["wall"] - out.get("timing_s/step", 0.0) - out["export"]
    for version, prompts in _prompts_by_version(study.rollout_log(method)).items():
        out[f"prompts_generated/step{version + 1}"] = len(prompts)
    return dict(out)


@pytest.mark.parametrize("method", methods(*METHODS))
def test_method_trains_three_steps_through_main_ppo(study: Study, method: str) -> None:
    metrics = study.metrics(method)
    assert sorted(metrics) == list(range(1, STEPS + 1))
    for step, rec in metrics.items():
        assert rec["training/global_step"] == step
        for key in (
            "actor/pg_loss",
            "actor/entropy",
            "actor/grad_norm",
            "critic/score/mean",
            "response_length/mean",
        ):
            assert key in rec, (method, step, key)
    run = study.run_dir(method)
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert (run / "final" / "config.json").is_file()
    # two FSDP ranks: each checkpoint holds two model shards, written by FSDP2 (the launcher's strategy; FSDP1
    # writes the same file names, so verl's own record of the version decides)
    actor = run / "checkpoints" / f"global_step_{STEPS}" / "actor"
    shards = sorted(p.name for p in actor.glob("model_world_size_*"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert json.loads((actor / "fsdp_config.json").read_text())["FSDP_version"] == 2
    # keep_checkpoints (2) below the steps: the older checkpoints were deleted, across the resume too
    from acerl.verl_backend.checkpoints import checkpoint_steps

    assert checkpoint_steps(run / "checkpoints") == [STEPS - 1, STEPS], method


def _by_version(records: list[dict]) -> tuple[dict[int, dict], dict[int, set[str]]]:
    loads = {r["global_steps"]: r for r in records if r["event"] == "load" and r["source"] == "actor"}
    gens: dict[int, set[str]] = defaultdict(set)
    for r in records:
        if r["event"] == "generate":
            gens[r["global_steps"]].add(r["fingerprint"])
    return loads, gens


@pytest.mark.parametrize("method", methods(*METHODS))
def test_step2_rollouts_come_from_the_step1_update(study: Study, method: str) -> None:
    """verl's ``naive`` checkpoint engine syncs the actor into the rollout server after every update: the
    rollouts of step ``k + 1`` carry the fingerprint of the weights loaded after step ``k``, and those weights
    are the actor's step-``k`` checkpoint (merged by verl's model merger), not the base model."""
    from safetensors.torch import load_file

    records = study.rollout_log(method)
    loads, gens = _by_version(records)
    assert sorted(loads) == list(range(0, STEPS + 1))  # the initial sync + one per step
    for version in range(STEPS):  # rollouts of step version+1 were generated with weights version
        assert gens[version] == {loads[version]["fingerprint"]}, (method, version)
    log = Path(os.fspath(study.root / f"rollout_{method}.jsonl"))
    kept = STEPS - 1  # the oldest checkpoint rotation keeps
    synced = torch.load(f"{log}.replica0.weights-step{kept}.pt", weights_only=True)
    ckpt = load_file(_merge(study, method, kept) / "model.safetensors")
    base = load_file(study.root / "models" / "base" / "tiny" / "model.safetensors")
    for (
        name,
        value,
    ) in ckpt.items():  # verl's merger writes bf16: the exact rounding of the synced fp32 weights
        assert torch.equal(synced[name].to(value.dtype), value), name
    # the synced weights change exactly at the steps whose update had a gradient
    metrics = study.metrics(method)
    for step in range(1, STEPS + 1):
        updated = metrics[step]["actor/grad_norm"] > 0
        assert (loads[step]["fingerprint"] != loads[step - 1]["fingerprint"]) == updated, (method, step)
    assert any(metrics[s]["actor/grad_norm"] > 0 for s in metrics), f"{method}: no step had a gradient"
    moved = [n for n in ckpt if not torch.equal(ckpt[n].float(), base[n].float())]
    assert bool(moved) == any(metrics[s]["actor/grad_norm"] > 0 for s in range(1, kept + 1))


def _merge(study: Study, method: str, step: int) -> Path:
    """verl's model merger on ``global_step_<step>`` (the diagnostic runs have it exported already)."""
    diag = study.run_dir(method) / "diag" / f"step_{step:06d}"
    if (diag / "config.json").is_file():
        return diag
    from acerl.verl_backend.checkpoints import export_checkpoint

    target = study.root / "merged" / method / f"step_{step}"
    if not (target / "config.json").is_file():
        actor = study.run_dir(method) / "checkpoints" / f"global_step_{step}" / "actor"
        export_checkpoint(actor, target)
    return target


def _advantage_calls(study: Study, method: str) -> list[dict]:
    """The run's advantage computations in the order verl made them (one per step without a resume)."""

    def order(f: Path) -> tuple[int, int]:
        pid, n = f.name.split(".")[-3:-1]
        return int(pid), int(n)

    files = sorted(study.root.glob(f"adv_{method}.*.pt"), key=order)
    return [torch.load(f, weights_only=True) for f in files]


def _ace_output(call: dict):
    from acerl.algos.advantages import ace_estimator, as_group_ids

    params = call["config"]["ace"]
    return ace_estimator(
        call["token_level_rewards"].sum(-1),
        as_group_ids(call["index"]),
        call["old_log_probs"],
        call["ref_log_prob"],
        call["response_mask"],
        alpha=params["alpha"],
        modulation=params["modulation"],
        length_normalize=params["length_normalize"],
        eps=params["eps"],
        amplify=params["amplify"],
        correct=call["correct"],
    )


@pytest.mark.parametrize("method", methods("ace_grpo", "ace_dapo"))
def test_ace_statistics_reach_verls_metrics_log(study: Study, method: str) -> None:
    """``ace/*`` in every step of verl's metrics log equal ACE's summaries of that step's own rollouts (the
    statistics of the negatives are null in a step with no negative-advantage rollout). At step 1 the policy
    is the reference: every confidence is 0, every multiplier ``1 + alpha * softplus(0) = 1 + ln 2``."""
    from acerl.algos.advantages import ace_metrics

    metrics = study.metrics(method)
    calls = _advantage_calls(study, method)
    assert len(calls) == STEPS, method
    for step, call in zip(sorted(metrics), calls, strict=True):
        rec = metrics[step]
        out = _ace_output(call)
        expected = ace_metrics(
            out.confidence, out.multiplier, out.negative, out.amplified, call["response_mask"]
        )
        for key in ACE_KEYS:
            value = expected[key]
            if math.isnan(value):
                assert rec[key] is None, (method, step, key)
            else:
                assert rec[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (method, step, key)
    assert any(rec["ace/negative_frac"] > 0 for rec in metrics.values()), method
    first = metrics[1]
    if first["ace/negative_frac"] > 0:
        assert first["ace/confidence_mean_neg"] == pytest.approx(0.0, abs=1e-6)
        assert first["ace/multiplier_max"] == pytest.approx(1 + math.log(2), abs=1e-5)


@reads_runs("ace_dapo")
def test_the_canary_reads_every_check_from_a_real_run(study: Study) -> None:
    """``acerl canary check`` on the ACE-DAPO run of verl's real loop (the canary's method): every metric it
    reads is in the run's log under the name it looks for (memory reads 0 on CPU), the run trained its steps,
    and ``c_i`` is non-zero after step 1 (the reference is not the policy)."""
    from acerl.verl_backend.canary import check_run

    checks = check_run(
        "tiny/ace_dapo/seed0", study.metrics("ace_dapo"), ace=True, grid_steps=STEPS, runtime_min=60
    )
    assert {c.name for c in checks} >= {"steps", "peak GPU memory", "ace/* every step", "c_i after step 1"}
    missing = [(c.name, c.value) for c in checks if "missing" in c.value]
    assert not missing, missing
    by_name = {c.name: c for c in checks}
    assert by_name["steps"].ok and by_name["ace/* every step"].ok, checks
    assert by_name["c_i after step 1"].ok, by_name["c_i after step 1"]


@pytest.mark.parametrize("method", methods("ace_grpo", "ace_dapo"))
def test_reference_is_the_base_model_not_the_policy(study: Study, method: str) -> None:
    """The reference log-probs verl hands ACE are the frozen base model's: equal to the policy's at step 1,
    apart from them once an update has moved the policy (a reference that followed the policy would make every
    ``c_i`` 0 and ACE a constant ``x(1 + ln 2)``); and ``ace/confidence_mean_neg`` is then non-zero."""
    metrics = study.metrics(method)
    calls = _advantage_calls(study, method)
    steps = sorted(metrics)
    mask = [call["response_mask"].bool() for call in calls]
    gaps = [
        (c["old_log_probs"] - c["ref_log_prob"]).abs()[m].max().item()
        for c, m in zip(calls, mask, strict=True)
    ]
    assert gaps[0] < 1e-5, (method, gaps)
    # an update moved the policy: a step with non-zero advantages (a step whose groups are all alike has only
    # round-off gradients, ~1e-10, and leaves the policy where it was to within ~1e-7)
    moved = [i for i in range(1, len(steps)) if metrics[steps[i - 1]]["actor/grad_norm"] > 1e-3]
    assert moved, f"{method}: no update moved the policy before the last step"
    for i in moved:  # the policy moved since step 1; the reference did not
        assert gaps[i] > 1e-4, (method, steps[i], gaps)
    confidences = [metrics[steps[i]]["ace/confidence_mean_neg"] for i in moved]
    logged = [c for c in confidences if c is not None]  # None: no amplified rollout in that step
    assert all(abs(c) > 1e-6 for c in logged), (method, confidences)
    if method == "ace_dapo":  # dynamic sampling trains mixed groups only: every step amplifies some rollouts
        assert logged, (method, confidences)


@pytest.mark.parametrize("method", methods("grpo", "dapo"))
def test_baselines_log_no_ace_statistics(study: Study, method: str) -> None:
    for rec in study.metrics(method).values():
        assert not [k for k in rec if k.startswith("ace/")]


def _prompts_by_version(records: list[dict]) -> dict[int, list[str]]:
    """Prompt fingerprints of each step's rollouts (key: the weights' version, step - 1). A killed run's
    versions from ``KILL_AFTER`` on come from the resumed attempt only (the killed one may have started them)."""
    inits = [i for i, r in enumerate(records) if r["event"] == "load" and r["source"] == "init"]
    out: dict[int, list[str]] = defaultdict(list)
    for i, r in enumerate(records):
        if r["event"] != "generate":
            continue
        resumed = len(inits) > 1 and i > inits[1]
        if len(inits) > 1 and resumed != (r["global_steps"] >= KILL_AFTER):
            continue
        out[r["global_steps"]].append(r["prompt"])
    return {k: sorted(v) for k, v in out.items()}


@reads_runs(KILLED)
def test_kill_after_step2_checkpoint_resumes_at_step3(study: Study) -> None:
    """SIGKILL after verl recorded the step-2 checkpoint; the rerun of ``acerl train`` resumes
    (``resume_mode=auto``): verl loads ``global_step_2`` (weights into the rollout server unchanged), logs only
    step 3, and the merged metrics hold each step once."""
    assert study.killed_at == KILL_AFTER
    run = study.run_dir(KILLED)
    logs = run / "verl_logs"
    attempts = sorted(logs.glob("metrics.attempt-*.jsonl"))
    assert len(attempts) == 1
    first = {json.loads(line)["step"] for line in attempts[0].read_text().splitlines() if line.strip()}
    assert first == {1, 2}
    second = [json.loads(line)["step"] for line in (logs / "metrics.jsonl").read_text().splitlines()]
    assert second == [3]
    assert sorted(study.metrics(KILLED)) == [1, 2, 3]
    records = study.rollout_log(KILLED)
    inits = [i for i, r in enumerate(records) if r["event"] == "load" and r["source"] == "init"]
    assert len(inits) == 2  # one rollout server per attempt
    before, after = records[: inits[1]], records[inits[1] :]
    first_loads = {
        r["global_steps"]: r["fingerprint"] for r in before if r["event"] == "load" and r["source"] == "actor"
    }
    resumed = [r for r in after if r["event"] == "load" and r["source"] == "actor"]
    assert resumed[0]["global_steps"] == KILL_AFTER
    if KILL_AFTER in first_loads:  # the killed attempt had synced its step-2 weights before the kill
        assert resumed[0]["fingerprint"] == first_loads[KILL_AFTER]
    # the weights the resumed attempt served are verl's step-2 checkpoint
    from safetensors.torch import load_file

    served = torch.load(
        f"{study.root / f'rollout_{KILLED}.jsonl'}.replica0.weights-step{KILL_AFTER}.pt", weights_only=True
    )
    ckpt = load_file(_merge(study, KILLED, KILL_AFTER) / "model.safetensors")
    for name, value in ckpt.items():
        assert torch.equal(served[name].to(value.dtype), value), name
    assert {r["global_steps"] for r in after if r["event"] == "generate"} == {KILL_AFTER}


def _optimizer_state(method: str, study: Study, step: int) -> tuple[set[float], dict]:
    """Adam's step counts over rank 0's parameters and the LR scheduler's state, from verl's checkpoint."""
    actor = study.run_dir(method) / "checkpoints" / f"global_step_{step}" / "actor"
    optim = torch.load(actor / "optim_world_size_2_rank_0.pt", weights_only=False, map_location="cpu")
    extra = torch.load(actor / "extra_state_world_size_2_rank_0.pt", weights_only=False, map_location="cpu")
    counts = {float(state["step"]) for state in optim["state"].values()}
    return counts, extra["lr_scheduler"]


@reads_runs(KILLED, "ace_grpo")
def test_resume_restores_optimizer_and_scheduler(study: Study) -> None:
    """The resumed attempt continued step 2's AdamW moments and LR schedule: at step 3 every parameter's Adam
    step count is 3 and the scheduler's state is the uninterrupted ACE-GRPO run's (same optimizer settings),
    not a fresh optimizer's count of 1."""
    counts, scheduler = _optimizer_state(KILLED, study, STEPS)
    twin_counts, twin_scheduler = _optimizer_state("ace_grpo", study, STEPS)
    assert counts == twin_counts == {float(STEPS)}, (counts, twin_counts)
    assert scheduler == twin_scheduler


@reads_runs(KILLED, "ace_grpo")
def test_resumed_run_keeps_the_data_order(study: Study) -> None:
    """verl restores its dataloader from ``data.pt``, here with worker processes (``DATALOADER_WORKERS``, whose
    per-worker state the checkpoint holds): the killed-and-resumed GRPO run generated for the same prompts at
    every step as the uninterrupted ACE-GRPO run (same seed, same batch size, same workers, no dynamic
    sampling); across the kill no prompt was repeated or skipped, and whatever the killed attempt had started of
    step 3 the resumed attempt generated again for the same prompts."""
    killed = _prompts_by_version(study.rollout_log(KILLED))
    straight = _prompts_by_version(study.rollout_log("ace_grpo"))
    assert sorted(killed) == sorted(straight) == list(range(STEPS))
    for version in range(STEPS):
        assert killed[version] == straight[version], version
    assert killed[0] != killed[1] != killed[2]
    # each step: PROMPTS_PER_STEP prompts x GROUP_SIZE rollouts, no prompt in two steps (one epoch)
    group, per_step = verl_cpu_loop.GROUP_SIZE, verl_cpu_loop.PROMPTS_PER_STEP
    for version, prompts in killed.items():
        counts = {p: prompts.count(p) for p in prompts}
        assert len(counts) == per_step and set(counts.values()) == {group}, (version, counts)
    assert len({p for prompts in killed.values() for p in prompts}) == STEPS * per_step
    # the killed attempt's own rollouts of step 3 (if it had started them): the resumed attempt's prompts
    records = study.rollout_log(KILLED)
    inits = [i for i, r in enumerate(records) if r["event"] == "load" and r["source"] == "init"]
    started = {
        r["prompt"]
        for r in records[: inits[1]]
        if r["event"] == "generate" and r["global_steps"] == KILL_AFTER
    }
    assert started <= set(killed[KILL_AFTER]), (started, killed[KILL_AFTER])
    # the loader really ran in workers, before the kill and after the resume: verl's checkpoints hold the
    # multiprocess loader's state, one snapshot per worker
    for method in WITH_WORKERS:
        argv = json.loads((study.run_dir(method) / "verl_command.json").read_text())["argv"]
        assert f"data.dataloader_num_workers={DATALOADER_WORKERS}" in argv, method
    for step in (KILL_AFTER, STEPS):
        data = study.run_dir(KILLED) / "checkpoints" / f"global_step_{step}" / "data.pt"
        state = torch.load(data, weights_only=False)
        assert len(state["_snapshot"]["_worker_snapshots"]) == DATALOADER_WORKERS, (step, state)


@pytest.mark.parametrize("method", methods(*METHODS))
def test_final_export_loads_in_transformers_and_the_sampler(study: Study, method: str) -> None:
    """``final/`` (verl's model merger on ``global_step_3``) loads in transformers with the tokenizer, equals
    the weights the rollout server got after step 3, and the pipeline's sampler generates from it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acerl.config import load_config

    final = study.run_dir(method) / "final"
    from safetensors.torch import load_file

    model = AutoModelForCausalLM.from_pretrained(final)
    AutoTokenizer.from_pretrained(final)
    log = study.root / f"rollout_{method}.jsonl"
    synced = torch.load(f"{log}.replica0.weights-step{STEPS}.pt", weights_only=True)
    exported = load_file(final / "model.safetensors")
    for name, value in exported.items():  # bf16: the exact rounding of the weights synced after step 3
        assert torch.equal(synced[name].to(value.dtype), value), name
    assert model.config.vocab_size == exported["model.embed_tokens.weight"].shape[0]
    if method != KILLED:
        return
    # the pipeline's sampling stage (HF sampler, the model's template) on the resumed run's export
    from acerl.config import Run
    from acerl.evaluate.pipeline import sample_run
    from acerl.pipeline import paths
    from acerl.pipeline.io import read_jsonl

    cfg = load_config(
        [REPO / "config" / "config.yaml", REPO / "config" / "test.yaml", study.root / "verl_cpu.yaml"]
    )
    run = Run("tiny", method, 0)
    out = sample_run(cfg, run, "synth_easy", study.root, progress=False)
    assert out == paths.generations_file(study.root, "synth_easy", run)
    rows = read_jsonl(out, required=("id", "completions"))
    problems = list(read_jsonl(paths.data_file(study.root, "synth_easy")))
    assert len(rows) == len(problems) and all(len(r["completions"]) == cfg.evaluation.n for r in rows)
    # ... and the grading and Pass@k stages on those samples
    from acerl.evaluate.pipeline import grade_run, passk_run

    grade_run(cfg, run, "synth_easy", study.root)
    record = json.loads(passk_run(cfg, run, "synth_easy", study.root).read_text())
    assert record["method"] == method and sorted(map(int, record["pass_at_k"])) == list(cfg.evaluation.ks)
    # ... and the report's tables from it (`acerl report --partial`: the grid's other runs were not sampled)
    log = study.root / "report.log"
    cmd = [
        sys.executable,
        "-m",
        "acerl.cli",
        "report",
        "--partial",
        *study.config_args,
        "--root",
        str(study.root),
    ]
    rc = run_watched(cmd, cwd=REPO, env=dict(os.environ), log=log, watched=[paths.results_dir(study.root)])
    assert rc == 0, _tail(log)
    tables = sorted(paths.tables_dir(study.root).glob("*.md"))
    display = cfg.methods[method].display
    assert any(f"| {display} " in t.read_text() or f"| {display}|" in t.read_text() for t in tables), tables


@pytest.mark.parametrize("method", methods(*METHODS))
def test_advantages_equal_acerl_algos_on_the_runs_rollouts(study: Study, method: str) -> None:
    """Every advantage computation of the run (verl's GRPO for the baselines; for ACE, the plugin's registered
    path with the verdicts it read from TransferQueue) equals :mod:`acerl.algos` on the same rollouts."""
    from acerl.algos.advantages import ace_estimator, as_group_ids, grpo_advantages

    calls = [torch.load(f, weights_only=True) for f in sorted(study.root.glob(f"adv_{method}.*.pt"))]
    assert len(calls) >= STEPS, method
    ace = method.startswith("ace")
    for call in calls:
        assert call["estimator"] == ("ace" if ace else "grpo")
        rewards = call["token_level_rewards"].sum(-1)
        mask = call["response_mask"]
        groups = as_group_ids(call["index"])
        if ace:
            params = call["config"]["ace"]
            correct = call["correct"]
            assert correct is not None and correct.dtype == torch.bool
            expected = ace_estimator(
                rewards,
                groups,
                call["old_log_probs"],
                call["ref_log_prob"],
                mask,
                alpha=params["alpha"],
                modulation=params["modulation"],
                length_normalize=params["length_normalize"],
                eps=params["eps"],
                amplify=params["amplify"],
                correct=correct,
            ).advantages
            if (
                method == "ace_dapo"
            ):  # verl's advantages: DAPO's overlong penalty never amplifies a correct one
                grpo = grpo_advantages(rewards, groups, eps=params["eps"])
                trained = (call["advantages"] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
                amplified = (trained - grpo).abs() > 1e-5
                assert not (amplified & correct).any()
        else:
            eps, norm = call.get("epsilon", 1e-6), call.get("norm_adv_by_std_in_grpo", True)
            expected = grpo_advantages(rewards, groups, eps=eps, norm_by_std=norm)
        torch.testing.assert_close(call["advantages"], expected.unsqueeze(-1) * mask, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", methods("dapo", "ace_dapo"))
def test_dynamic_sampling_through_verls_replay_buffer(study: Study, method: str) -> None:
    """DAPO's dynamic sampling ran in verl's own ``ReplayBuffer`` (V1, ``filter_groups.metric=acc``, the
    plugin's cap on): the replay buffer evicted groups whose rollouts all agreed, refilled, and every trained
    batch holds ``train_batch_size`` groups, each with correct and incorrect rollouts."""
    from acerl.algos.advantages import as_group_ids

    metrics = study.metrics(method)
    evicted = [metrics[s].get("training/filter_groups/evicted_samples", 0) for s in sorted(metrics)]
    assert sum(evicted) > 0, evicted
    calls = [torch.load(f, weights_only=True) for f in sorted(study.root.glob(f"adv_{method}.*.pt"))]
    assert len(calls) == STEPS
    for call in calls:
        rewards = call["token_level_rewards"].sum(-1)
        # the grader's verdict: the plugin's `correct` (ACE), else the sign of DAPO's +1/-1 reward, which the
        # overlong penalty (at most 1) never flips
        correct = call["correct"] if "correct" in call else rewards > -0.5
        groups = as_group_ids(call["index"])
        prompts, size = verl_cpu_loop.PROMPTS_PER_STEP, verl_cpu_loop.GROUP_SIZE
        assert groups.unique().numel() == prompts and rewards.numel() == prompts * size
        for g in groups.unique():
            verdicts = correct[groups == g]
            assert verdicts.any() and not verdicts.all(), (method, int(g))


CAP_LINE = re.compile(
    r"acerl: dynamic sampling cap at step \S+: (\d+) prompts \(max_num_gen_batches (\d+) x (\d+)\)"
)
CUT_LINE = re.compile(r"refill of (\d+) prompts cut to (\d+) \((\d+) of (\d+) dispatched\)")


@pytest.mark.parametrize("method", methods("dapo", "ace_dapo"))
def test_dynamic_sampling_cap_bounds_every_step(study: Study, method: str) -> None:
    """The plugin's dynamic-sampling cap runs inside verl's loop (verl 0.9.1's V1 trainer ignores
    ``max_num_gen_batches``): every step starts with the DAPO recipe's budget, no step generated for more prompts
    than that budget, and every refill the cap cut stayed within it (whether a refill is cut depends on how many
    groups the tiny policy solves; tests/verl_backend/test_verl_dynamic_sampling.py forces cuts)."""
    log = (study.root / f"train_{method}.log").read_text(encoding="utf-8", errors="replace")
    caps = CAP_LINE.findall(log)
    assert len(caps) >= STEPS, f"{method}: the cap announced {len(caps)} steps"
    budgets = {(int(b), int(n) * int(g)) for b, n, g in caps}
    assert len(budgets) == 1 and all(b == n for b, n in budgets), budgets
    ((budget, _),) = budgets
    group = verl_cpu_loop.GROUP_SIZE
    for version, rollouts in _prompts_by_version(study.rollout_log(method)).items():
        assert len(rollouts) % group == 0 and len(rollouts) // group <= budget, (
            method,
            version,
            len(rollouts),
        )
    for requested, taken, dispatched, cap in CUT_LINE.findall(log):
        assert int(taken) < int(requested) and int(dispatched) + int(taken) <= int(cap) == budget
