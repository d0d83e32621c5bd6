"""The local backend on a CUDA GPU (``gpu`` mark; skipped without CUDA): training + sampling + diagnostics,
resume after SIGKILL, and the CI-scale study through Snakemake with ``compute.device: cuda``.

Run on a GPU machine: ``pytest -m gpu tests/train/test_gpu.py`` (docs/gpu.md). The CPU tests catch device
mixing without a GPU (tests/train/test_device_placement.py); these check the real thing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from trainer_fixtures import DigitVerifier, make_config, read_jsonl_records

from acerl.config import Run, load_config
from acerl.config.settings import resolve
from acerl.pipeline import paths
from acerl.train import train_run
from acerl.train.checkpoint import LATEST_FILE, list_checkpoints

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

WORKER = Path(__file__).with_name("train_worker.py")
STEPS, SAVE_EVERY = 4, 2
# cuBLAS is deterministic only with a fixed workspace (torch's "Reproducibility" notes); set for every process
DETERMINISTIC_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
DEVICE = "cuda"


@pytest.mark.parametrize(
    "extra",
    [
        (),
        (
            "compute.precision=bf16",
            "compute.gradient_checkpointing=true",
            "compute.max_tokens_per_micro_batch=600",
        ),
    ],
    ids=["fp32", "bf16-checkpointing-token-budget"],
)
def test_training_sampling_and_diagnostics_on_cuda(tiny_root: Path, extra: tuple[str, ...]) -> None:
    from acerl.diagnostics.run import DiagnosticSettings, diagnose_checkpoint
    from acerl.generate import make_sampler
    from acerl.generate.base import SamplingParams

    cfg = make_config("models.tiny.train.total_steps=2", *extra)
    run = Run("tiny", "ace_dapo", 0)  # ACE, reference model, dynamic sampling, overlong shaping
    final = train_run(resolve(cfg, run), tiny_root, device="cuda", verifier=DigitVerifier(), progress=False)
    records = read_jsonl_records(paths.train_metrics_file(tiny_root, run))
    assert [r["step"] for r in records] == [1, 2]
    assert all(np.isfinite(r["train/reward_mean"]) for r in records)
    weights = load_file(str(final / "model.safetensors"))
    assert all(w.dtype == torch.float32 and torch.isfinite(w).all() for w in weights.values())

    precision = cfg.compute.precision
    smp = make_sampler("hf", final, device="cuda", batch_size=4, precision=precision)
    assert smp.device.type == "cuda"
    params = SamplingParams(n=4, temperature=1.0, top_p=0.95, max_new_tokens=12, seed=3)
    groups = smp.generate(["Problem: Compute 1+2.\nSolution:", "Problem: Solve 2x=4.\nSolution:"], params)
    assert [len(g) for g in groups] == [4, 4] and all(c.token_ids for g in groups for c in g)
    again = smp.generate(["Problem: Compute 1+2.\nSolution:", "Problem: Solve 2x=4.\nSolution:"], params)
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in groups]  # seeded

    settings = DiagnosticSettings(4, 1.0, 12, 0, 0, "plain", ("a", "b"))
    problems = [{"problem": "Compute 1+2.", "answer": "3"}, {"problem": "Solve 2x=4.", "answer": "2"}]
    base = paths.base_model_dir(tiny_root, "tiny")
    diag = diagnose_checkpoint(
        2,
        final,
        base,
        problems,
        settings,
        DigitVerifier(),
        factory=lambda path: make_sampler("hf", path, device="cuda", batch_size=4, precision=precision),
    )
    assert np.isfinite(diag.confidence).all() and np.isfinite(diag.entropy_means).all()


def _worker(root: Path, method: str, delay: float) -> subprocess.Popen:
    """``train_worker.py`` on CUDA in a new process; its output goes to ``<root>.log``."""
    env = {**os.environ, **DETERMINISTIC_ENV, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, str(WORKER), str(root), method, str(STEPS), str(SAVE_EVERY), str(delay), DEVICE]
    with open(f"{root}.log", "ab") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen, root: Path) -> None:
    assert proc.wait(timeout=900) == 0, Path(f"{root}.log").read_text()[-3000:]


def _wait_for(predicate, proc: subprocess.Popen, root: Path, timeout: float = 600.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"worker exited early: {Path(f'{root}.log').read_text()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the worker")
        time.sleep(0.05)


def _outcome(root: Path, run: Run) -> tuple[dict[str, torch.Tensor], list[dict]]:
    records = [{k: v for k, v in r.items() if not k.startswith("timing/")}
               for r in read_jsonl_records(paths.train_metrics_file(root, run))]  # fmt: skip
    return load_file(str(paths.policy_dir(root, run) / "model.safetensors")), records


def test_sigkill_then_resume_on_cuda_equals_uninterrupted(tiny_root: Path, tiny_root_template: Path,
                                                         tmp_path: Path) -> None:  # fmt: skip
    """Killed after a checkpoint and resumed (in new processes, deterministic algorithms on), the run ends
    where an unbroken run ends. Tolerance: the logged metrics equal to 1e-6 relative and the weights to 1e-6
    absolute -- bitwise is expected with deterministic algorithms, the margin covers kernels that have no
    deterministic variant (torch only warns about them here)."""
    method = "ace_dapo"
    run = Run("tiny", method, 0)
    reference = tmp_path / "reference"
    shutil.copytree(tiny_root_template, reference)
    _finish(_worker(reference, method, 0.0), reference)

    proc = _worker(tiny_root, method, 0.3)
    ckpt_dir = paths.checkpoints_dir(tiny_root, run)
    metrics = paths.train_metrics_file(tiny_root, run)
    _wait_for(lambda: (ckpt_dir / LATEST_FILE).is_file(), proc, tiny_root)
    _wait_for(
        lambda: len(metrics.read_text().splitlines()) > SAVE_EVERY, proc, tiny_root
    )  # into the next step
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not paths.policy_dir(tiny_root, run).exists() and list_checkpoints(ckpt_dir)[-1][0] == SAVE_EVERY
    _finish(_worker(tiny_root, method, 0.0), tiny_root)

    (wa, ra), (wb, rb) = _outcome(reference, run), _outcome(tiny_root, run)
    assert [r["step"] for r in rb] == list(range(1, STEPS + 1))
    assert len(ra) == len(rb)
    for a, b in zip(ra, rb, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            same = (
                a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-9) if isinstance(a[k], float) else a[k] == b[k]
            )
            assert same, (a["step"], k, a[k], b[k])
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)


@pytest.mark.slow
def test_ci_study_on_cuda(prepared_study: Path, tmp_path: Path) -> None:
    """The whole CI-scale study with ``compute.device: cuda`` (config/cuda.yaml over config/test.yaml): every
    Pass@k file, diagnostic and table. Training, sampling and diagnostics run on the GPU (the base model of
    ``prepared_study`` too, if Snakemake reruns it for the changed command line)."""
    from support.study import run_snakemake

    wd = tmp_path / "ci-cuda"
    shutil.copytree(prepared_study, wd, symlinks=True)
    files = ("config/test.yaml", "config/cuda.yaml")
    run_snakemake(wd, "-c8", "all", "--configfile", *files, log="snakemake-cuda.log")
    cfg = load_config([wd / "config/config.yaml", *(wd / f for f in files)])
    assert cfg.compute.device == "cuda"
    for bench, r in cfg.evaluations():
        record = json.loads(paths.passk_file(wd, bench, r).read_text())
        assert set(map(int, record["pass_at_k"])) == set(cfg.evaluation.ks)
    for r in cfg.diagnostic_runs():
        assert paths.diagnostics_file(wd, r).is_file()
    assert any(p.suffix == ".md" for p in paths.tables_dir(wd).iterdir())
