"""End to end on a tiny random model: sample -> grade -> Pass@k, resuming an interrupted sampling job,
re-grading stored generations, and diagnostics on two fake checkpoints (acerl.evaluate.pipeline,
acerl.diagnostics)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from acerl.config import Config, Run, load_config
from acerl.data.synthetic import write_splits
from acerl.diagnostics import diagnose_run
from acerl.diagnostics.run import diagnose_checkpoint, diagnostic_settings
from acerl.evaluate.pipeline import SCORED_COLUMNS, grade_run, passk_run, problem_counts, sample_run
from acerl.generate import make_sampler
from acerl.grading import Grader
from acerl.models.tiny import TinyModelConfig, build_tiny_model
from acerl.models.tokenizer import build_char_tokenizer
from acerl.passk import pass_at_k
from acerl.pipeline import paths
from acerl.pipeline.io import read_jsonl, write_jsonl
from acerl.pipeline.provenance import software_stamp
from acerl.pipeline.records import read_json, validate_diagnostics_record, validate_passk_record

REPO = Path(__file__).resolve().parents[2]
TINY = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)
BENCH = "synth_easy"
BASE = Run("tiny", "base", 0)
TRAINED = Run("tiny", "grpo", 0)
OVERRIDES = [
    "evaluation.n=4",
    "evaluation.ks=[1,2,4]",
    "evaluation.shard_size=2",
    "evaluation.batch_size=8",
    "models.tiny.train.max_response_length=8",
    "families.dapo.overlong.buffer=4",  # within the short responses (checked when the config loads)
    "models.tiny.train.total_steps=2",
    "study.diagnostics.every=2",
    "study.diagnostics.early_steps=2",
    "study.diagnostics.early_every=2",
    "study.diagnostics.rollouts_per_prompt=4",
    "study.diagnostics.num_prompts=3",
    "grading.workers=0",
    "compute.device=cpu",
]


class Interrupted(Exception):
    pass


class Recording:
    """Wraps a real sampler: records the prompts of every generate call; can fail after ``fail_after`` calls."""

    def __init__(self, inner, fail_after: int | None = None) -> None:
        self.inner, self.fail_after = inner, fail_after
        self.tokenizer = inner.tokenizer
        self.calls: list[list[str]] = []

    def generate(self, prompts, params):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise Interrupted("job killed")
        self.calls.append(list(prompts))
        return self.inner.generate(prompts, params)

    def score(self, prompts, responses, temperature=1.0):
        return self.inner.score(prompts, responses, temperature)


@pytest.fixture(scope="module")
def cfg() -> Config:
    return load_config(REPO / "config" / "config.yaml", OVERRIDES)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Work directory: synthetic data (5 benchmark problems, 3 held-out prompts), a random tiny base model,
    and two diagnostic checkpoints of a fake run: step 0 = the base model, step 2 = perturbed weights."""
    root = tmp_path_factory.mktemp("work")
    write_splits(root / "data", seed=0, sizes={BENCH: 5, "synth_hard": 0, "heldout": 3, "train": 0, "sft": 0})
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TINY, tokenizer, seed=0)
    base = paths.base_model_dir(root, "tiny")
    model.save_pretrained(base)
    tokenizer.save_pretrained(base)
    shutil.copytree(base, paths.diag_step_dir(root, TRAINED, 0))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    model.save_pretrained(paths.diag_step_dir(root, TRAINED, 2))
    tokenizer.save_pretrained(paths.diag_step_dir(root, TRAINED, 2))
    return root


def _hf(path: Path):
    return make_sampler("hf", path, device="cpu", batch_size=8)


# ------------------------------------------------------------------------------------------------- sample
def test_sample_grade_passk_end_to_end(cfg, root):
    gen = sample_run(cfg, BASE, BENCH, root, progress=False)
    assert gen == paths.generations_file(root, BENCH, BASE)
    assert not paths.generations_shard_dir(root, BENCH, BASE).exists()
    rows = read_jsonl(gen, required=("id", "prompt", "answer", "completions", "sampling", "model_dir"))
    problems = read_jsonl(paths.data_file(root, BENCH))
    assert [r["id"] for r in rows] == [p["id"] for p in problems]
    assert [r["answer"] for r in rows] == [p["answer"] for p in problems]
    assert rows[0]["prompt"] == f"Problem: {problems[0]['problem']}\nSolution:"  # the 'plain' template
    assert rows[0]["model_dir"] == "models/base/tiny"
    for r in rows:
        assert len(r["completions"]) == 4
        assert {k: r["sampling"][k] for k in ("n", "temperature", "top_p", "max_new_tokens", "backend")} == {
            "n": 4,
            "temperature": 0.7,
            "top_p": 0.95,
            "max_new_tokens": 8,
            "backend": "hf",
        }
        for c in r["completions"]:
            assert 1 <= c["num_tokens"] <= 8 and c["finish_reason"] in ("stop", "length")
            assert c["finish_reason"] == "stop" or c["num_tokens"] == 8
    seeds = [r["sampling"]["seed"] for r in rows]
    assert seeds[0] == seeds[1] != seeds[2] != seeds[4]  # one seed per shard of 2 problems

    scored_path = grade_run(cfg, BASE, BENCH, root)
    scored = pd.read_parquet(scored_path)
    assert list(scored.columns) == list(SCORED_COLUMNS)
    assert len(scored) == 5 * 4
    assert scored["sample"].tolist() == [0, 1, 2, 3] * 5
    assert set(scored["status"]) <= {"ok", "no_answer", "timeout", "error"}
    flat = [c for r in rows for c in r["completions"]]
    assert scored["num_tokens"].tolist() == [c["num_tokens"] for c in flat]

    record = read_json(passk_run(cfg, BASE, BENCH, root))
    validate_passk_record(record)
    assert record["seed"] is None and record["method"] == "base" and record["ks"] == [1, 2, 4]
    # what made them: every generation row, the scored file and the Pass@k record carry the software stamp
    assert all(r["software"] == software_stamp() for r in rows)
    assert pd.read_parquet(scored_path).attrs["software"] == [software_stamp()]
    assert record["software"] == [software_stamp()]
    counts = scored.groupby("id", sort=False)["correct"].sum()
    assert [(p["id"], p["n"], p["c"]) for p in record["problems"]] == [
        (i, 4, int(counts[i])) for i in counts.index
    ]


def test_benchmarks_do_not_share_sampling_seeds(cfg, root, tmp_path):
    """Problem i of two benchmarks gets its own uniforms: the same problems under a second benchmark name are
    sampled with other seeds (the seed is derived from the benchmark too), not with the same ones."""
    shutil.copytree(root / "data", tmp_path / "data")
    shutil.copytree(paths.base_model_dir(root, "tiny"), paths.base_model_dir(tmp_path, "tiny"))
    shutil.copyfile(paths.data_file(tmp_path, BENCH), paths.data_file(tmp_path, "synth_hard"))
    keys = ("id", "prompt", "sampling")
    easy = read_jsonl(sample_run(cfg, BASE, BENCH, tmp_path, progress=False), required=keys)
    hard = read_jsonl(sample_run(cfg, BASE, "synth_hard", tmp_path, progress=False), required=keys)
    assert [r["prompt"] for r in easy] == [r["prompt"] for r in hard]
    seeds_easy = [r["sampling"]["seed"] for r in easy]
    seeds_hard = [r["sampling"]["seed"] for r in hard]
    assert len(set(seeds_easy) | set(seeds_hard)) == len(set(seeds_easy)) + len(set(seeds_hard)) == 6


def test_interrupted_sampling_resumes_to_the_same_file(cfg, root):
    reference = paths.generations_file(root, BENCH, BASE)
    if not reference.is_file():
        sample_run(cfg, BASE, BENCH, root, progress=False)
    expected = reference.read_bytes()
    reference.unlink()

    inner = _hf(paths.policy_dir(root, BASE))
    killed = Recording(inner, fail_after=2)  # shards 0 and 1 finish, shard 2 is killed
    with pytest.raises(Interrupted):
        sample_run(cfg, BASE, BENCH, root, sampler=killed, progress=False)
    shard_dir = paths.generations_shard_dir(root, BENCH, BASE)
    assert sorted(p.name for p in shard_dir.glob("shard_*")) == [
        "shard_00000.jsonl.gz",
        "shard_00001.jsonl.gz",
    ]
    assert not reference.exists()

    resumed = Recording(inner)
    sample_run(cfg, BASE, BENCH, root, sampler=resumed, progress=False)
    problems = read_jsonl(paths.data_file(root, BENCH))
    assert resumed.calls == [[f"Problem: {problems[4]['problem']}\nSolution:"]]  # only the last shard
    assert reference.read_bytes() == expected
    assert not shard_dir.exists()


# -------------------------------------------------------------------------------------------------- grade
def test_regrading_reuses_generations(cfg, root):
    gen = paths.generations_file(root, BENCH, BASE)
    if not gen.is_file():
        sample_run(cfg, BASE, BENCH, root, progress=False)
    scored_path = grade_run(cfg, BASE, BENCH, root)
    first = pd.read_parquet(scored_path)
    gen_bytes, gen_mtime = gen.read_bytes(), gen.stat().st_mtime_ns
    scored_path.unlink()
    second = pd.read_parquet(grade_run(cfg, BASE, BENCH, root))
    pd.testing.assert_frame_equal(first, second)
    assert gen.read_bytes() == gen_bytes and gen.stat().st_mtime_ns == gen_mtime


def test_grade_and_passk_on_known_answers(cfg, tmp_path):
    run = Run("tiny", "grpo", 1)
    rows = [
        {
            "id": "a",
            "prompt": "p",
            "answer": "17",
            "completions": [
                {"text": "19-2=17. \\boxed{17}", "finish_reason": "stop", "num_tokens": 20},
                {"text": "\\boxed{18}", "finish_reason": "stop", "num_tokens": 11},
                {"text": "I do not know", "finish_reason": "length", "num_tokens": 13},
                {"text": "Answer: 17", "finish_reason": "stop", "num_tokens": 11},
            ],
        },
        {
            "id": "b",
            "prompt": "q",
            "answer": "\\frac{1}{2}",
            "completions": [
                {"text": "\\boxed{0.5}", "finish_reason": "stop", "num_tokens": 12},
                {"text": "\\boxed{2}", "finish_reason": "stop", "num_tokens": 10},
                {"text": "\\boxed{3}", "finish_reason": "stop", "num_tokens": 10},
                {"text": "\\boxed{4}", "finish_reason": "stop", "num_tokens": 10},
            ],
        },
    ]
    write_jsonl(paths.generations_file(tmp_path, BENCH, run), rows)
    scored = pd.read_parquet(grade_run(cfg, run, BENCH, tmp_path))
    assert scored["correct"].tolist() == [True, False, False, True, True, False, False, False]
    assert scored["status"].tolist()[:4] == ["ok", "ok", "no_answer", "ok"]
    assert scored.loc[0, "extracted"] == "17" and pd.isna(scored.loc[2, "extracted"])
    assert scored["finish_reason"].tolist()[2] == "length"
    ids, n, c = problem_counts(scored["id"].tolist(), scored["correct"].tolist())
    assert ids == ["a", "b"] and n.tolist() == [4, 4] and c.tolist() == [2, 1]

    record = read_json(passk_run(cfg, run, BENCH, tmp_path))
    assert record["seed"] == 1
    for k in (1, 2, 4):
        expected = (pass_at_k(4, 2, k) + pass_at_k(4, 1, k)) / 2
        assert record["pass_at_k"][str(k)] == pytest.approx(expected)
    assert record["pass_at_k"]["1"] == pytest.approx((0.5 + 0.25) / 2)
    # pass@2: a: 1 - C(2,2)/C(4,2) = 5/6; b: 1 - C(3,2)/C(4,2) = 1/2
    assert record["pass_at_k"]["2"] == pytest.approx((5 / 6 + 1 / 2) / 2)


def test_steps_name_the_missing_input(cfg, tmp_path):
    with pytest.raises(FileNotFoundError, match="run the sample step first"):
        grade_run(cfg, BASE, BENCH, tmp_path)
    with pytest.raises(FileNotFoundError, match="run the grade step first"):
        passk_run(cfg, BASE, BENCH, tmp_path)


# -------------------------------------------------------------------------------------------- diagnostics
def test_base_checkpoint_has_zero_confidence(cfg, root):
    problems = read_jsonl(paths.data_file(root, "heldout"))[:3]
    settings = diagnostic_settings(cfg, TRAINED, [p["id"] for p in problems])
    base = paths.base_model_dir(root, "tiny")
    with Grader(timeout_s=5, workers=0) as grader:
        step0 = diagnose_checkpoint(
            0, paths.diag_step_dir(root, TRAINED, 0), base, problems, settings, grader, _hf
        )
        step2 = diagnose_checkpoint(
            2, paths.diag_step_dir(root, TRAINED, 2), base, problems, settings, grader, _hf
        )
        again = diagnose_checkpoint(
            7, paths.diag_step_dir(root, TRAINED, 0), base, problems, settings, grader, _hf
        )
    assert step0.confidence.shape == (12,) and step0.lengths.shape == (12,)
    assert (step0.confidence == 0.0).all()  # same weights as the reference: c_i is exactly 0
    rec0 = step0.record()
    assert rec0["n_total"] == 12 and rec0["overconf_magnitude"] is None
    assert rec0["oef"] == (0.0 if rec0["n_incorrect"] else None)
    # the seed does not depend on the step: equal weights give equal rollouts (common random numbers)
    assert again.record() == {**step0.record(), "step": 7}
    assert (step2.confidence != 0.0).all()  # perturbed weights: every rollout's confidence moved
    assert 3.0 < rec0["entropy"] < 4.7  # random init: near-uniform over ~100 characters (log 100 = 4.6)


def test_magnitude_uses_def1_sum_or_the_length_normalised_score(cfg, root):
    """study.diagnostics.length_normalize: c_i of Def. 1 (the sum) or c_i / T_i; same rollouts, same OEF."""
    problems = read_jsonl(paths.data_file(root, "heldout"))[:2]
    settings = diagnostic_settings(cfg, TRAINED, [p["id"] for p in problems])
    base = paths.base_model_dir(root, "tiny")
    with Grader(timeout_s=5, workers=0) as grader:
        out = {
            norm: diagnose_checkpoint(
                2, paths.diag_step_dir(root, TRAINED, 2), base, problems,
                dataclasses.replace(settings, length_normalize=norm), grader, _hf,
            )
            for norm in (False, True)
        }  # fmt: skip
    np.testing.assert_allclose(out[True].confidence * out[True].lengths, out[False].confidence, rtol=1e-5)
    assert out[True].record()["oef"] == out[False].record()["oef"]
    assert (out[True].lengths > 1).any()  # the two scales differ


def test_diagnose_run_writes_the_schema_and_resumes(cfg, root):
    out = paths.diagnostics_file(root, TRAINED)
    loads: list[str] = []

    def failing(path: Path):
        if path.name == "step_000002":
            raise Interrupted("job killed")
        return _hf(path)

    with pytest.raises(Interrupted):
        diagnose_run(cfg, TRAINED, root, progress=False, factory=failing)
    partial = paths.diagnostics_partial_file(root, TRAINED)
    assert not out.exists() and list(json.loads(partial.read_text())["records"]) == ["0"]

    def recording(path: Path):
        loads.append(path.name)
        return _hf(path)

    resumed = read_json(diagnose_run(cfg, TRAINED, root, progress=False, factory=recording))
    assert "step_000000" not in loads and "step_000002" in loads  # the finished checkpoint was reused
    assert not partial.exists()

    out.unlink()
    fresh = read_json(diagnose_run(cfg, TRAINED, root, progress=False))
    assert fresh == resumed
    validate_diagnostics_record(fresh)
    assert (fresh["model"], fresh["method"], fresh["seed"]) == ("tiny", "grpo", 0)
    assert [r["step"] for r in fresh["records"]] == [0, 2]
    assert [e["step"] for e in fresh["entropy_early"]] == [0, 2]
    assert [e["entropy"] for e in fresh["entropy_early"]] == [r["entropy"] for r in fresh["records"]]
    step0 = fresh["records"][0]
    assert step0["overconf_magnitude"] is None and step0["oef"] in (0.0, None)
    assert all(r["n_total"] == 12 for r in fresh["records"])


def test_diagnose_rejects_the_base_run(cfg, root):
    with pytest.raises(ValueError, match="not the base model"):
        diagnose_run(cfg, BASE, root, progress=False)
