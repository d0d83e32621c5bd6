"""The benchmarks still run against today's API: each one's measured code path at a toy size (no timing is
asserted; the benchmarks themselves are run by hand and recorded in docs/benchmarks.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_ace_overhead_candidates_agree_and_time(monkeypatch: pytest.MonkeyPatch):
    """Every timed candidate runs on the benchmark's inputs, and the ACE ones give ACE's advantages: the
    sequence-level estimator's, laid out per token, equal the registry path's."""
    bench = _load("bench_ace_overhead")
    x = bench.make_inputs(batch=32, length=12, group_size=8)
    fns = bench.candidates(x, with_verl=True)
    outs = {label: fn() for label, fn in fns.items()}
    seq = outs["ace_estimator (B,)"].token_level(x.response_mask)
    assert torch.equal(seq, outs["registry ace + metrics + token_level (B,T)"])
    assert not torch.equal(seq, outs["registry grpo + token_level (B,T)"])  # ACE amplified something
    times = bench.time_interleaved(fns, repeats=2)
    assert set(times) == set(fns) and all(len(v) == 2 and min(v) >= 0 for v in times.values())


def test_trainer_benchmark_ace_comparison_runs(tmp_path: Path):
    """The trainer benchmark's controlled GRPO vs ACE-GRPO comparison (log-probs, advantages, update on one
    rollout batch) runs on a random-init tiny model."""
    bench = _load("bench_trainer")
    assert bench.make_root(tmp_path, train_size=32) > 0
    out = bench.bench_ace_overhead(tmp_path, reps=2)
    assert set(out) == {"grpo", "ace_grpo", "grpo_adv", "ace_grpo_adv"}
    assert all(len(v) == 2 and min(v) > 0 for v in out.values())


def test_test_suite_benchmark_reports_the_ratio_of_its_runs():
    """The `make test` benchmark's environment and report (its runs, 80 minutes a pair, are not run here)."""
    bench = _load("bench_test_suite")
    env = bench.ci_env("parallel")
    assert env["CI"] == "true" and env["ACERL_TEST_LANES"] == "parallel"
    runs = [bench.Run("serial", 3000.0, 2900.0, 0), bench.Run("parallel", 1800.0, 2800.0, 0)]
    text = bench.report(runs)
    assert "| 2 | parallel | 0 | 1800 | 2800 |" in text and "parallel / serial = **0.60x**" in text
    assert "median" not in bench.report(runs[:1])  # no ratio without both modes


def test_run_benchmark_sums_job_cpu_per_rule_and_compares_results(tmp_path: Path):
    """The `make run` benchmark's accounting (its runs, 10-25 minutes each, are not run here): the last row of
    each Snakemake benchmark file per rule (sampled), every result file hashed, the differing ones named."""
    bench = _load("bench_run")
    assert bench.parse_spec("HEAD") == ("HEAD", "lean")
    assert bench.parse_spec("abc123:transformers") == ("abc123", "transformers")
    assert bench.parse_spec("HEAD:system-malloc") == ("HEAD", "system-malloc")
    assert bench.VARIANTS["system-malloc"]["ACERL_MALLOC"] == "system"
    with pytest.raises(SystemExit, match="REF"):
        bench.parse_spec("HEAD:fast")
    commit, _, loader = bench.resolve("HEAD:transformers").partition(":")
    assert loader == "transformers" and len(commit) == 12 and int(commit, 16) >= 0  # fixed once for all runs
    with pytest.raises(SystemExit, match="not a commit"):
        bench.resolve("no-such-ref-xyz")
    logs = tmp_path / "benchmarks" / "logs"
    for rule, name, rows in [
        ("sample", "a/seed0.tsv", ["9.0"]),
        ("sample", "b.tsv", ["5.0", "4.5"]),
        ("grade", "g.tsv", ["1.5"]),
    ]:
        path = logs / rule / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("s\tcpu_time\n" + "".join(f"1.0\t{r}\n" for r in rows))
    per_rule, jobs = bench.sampled_cpu(tmp_path)
    assert per_rule == {"sample": 13.5, "grade": 1.5} and jobs == 3
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "m.json").write_text("{}")
    (tmp_path / "metrics" / "job.log").write_text("left out")
    hashes = bench.result_hashes(tmp_path)
    assert list(hashes) == ["metrics/m.json"]
    a = bench.Run(
        "HEAD:transformers", 900.0, 2000.0, 50.0, 0, {"sample": 600.0, "grade": 80.0}, 1500.0, 90, hashes
    )
    b = bench.Run(
        "HEAD:lean", 700.0, 1500.0, 50.0, 0, {"sample": 340.0, "grade": 80.0}, 1200.0, 90, dict(hashes)
    )
    text = bench.report([a, b])
    assert "| 2 | HEAD:lean | 0 | 90 | 700 | 1500 | 50 | 1200 | 80 | 340 | 0 |" in text
    assert "job CPU: HEAD:lean / HEAD:transformers = **0.75x** (1500 / 2000 s)" in text
    assert "job + Snakemake CPU: HEAD:lean / HEAD:transformers = **0.76x** (1550 / 2050 s)" in text
    assert "byte-identical" in text
    a.content = {"metrics/m.json": "x"}
    c = bench.Run(
        "HEAD:lean", 700.0, 1500.0, 50.0, 0, {}, 1000.0, 45, {"metrics/m.json": "0"}, {"metrics/m.json": "x"}
    )
    assert "1 files differ, 1 of them only in the software stamp" in bench.report([a, c])
    assert "in content: none" in bench.report([a, c])
    c.content = {"metrics/m.json": "y"}
    assert "1 files differ, 0 of them only in the software stamp" in bench.report([a, c])
    assert "in content: metrics/m.json" in bench.report([a, c])


def test_run_benchmark_content_hash_leaves_out_the_software_stamp_only(tmp_path: Path):
    """Two commits' results differ in the software record each file carries; their content is compared without
    it (JSON, gzipped JSON lines, Parquet rows), and a change anywhere else still shows."""
    import gzip

    import pandas as pd

    bench = _load("bench_run")

    def write(name: str, commit: str, value: int) -> tuple[str, ...]:
        folder = tmp_path / name
        folder.mkdir()
        stamp = {"acerl": {"commit": commit}}
        (folder / "m.json").write_text(json.dumps({"pass@1": value, "software": [stamp]}))
        with gzip.open(folder / "g.jsonl.gz", "wt") as fh:
            fh.write(json.dumps({"id": "p0", "text": str(value), "software": stamp}) + "\n")
        frame = pd.DataFrame({"id": ["p0"], "correct": [value > 0]})
        frame.attrs["software"] = stamp
        frame.to_parquet(folder / "s.parquet")
        return tuple(bench.content_hash(folder / f) for f in ("m.json", "g.jsonl.gz", "s.parquet"))

    first, other_commit, other_value = write("a", "abc", 1), write("b", "def", 1), write("c", "abc", 0)
    assert first == other_commit
    assert all(x != y for x, y in zip(first, other_value, strict=True))
    (tmp_path / "bad.json").write_text("{not json")
    assert bench.content_hash(tmp_path / "bad.json") == hashlib.sha256(b"{not json").hexdigest()


def test_run_benchmark_counts_every_job_process_to_the_end(tmp_path: Path):
    """The launcher's exact accounting: a job's CPU is counted in full (its process and what it waited for), in
    the total and under its rule, and Snakemake's own CPU apart; a process the job left running (re-parented to
    the launcher, a subreaper) is counted in the total as an orphan when it ends."""
    bench = _load("bench_run")
    (tmp_path / "burn.py").write_text(
        "import time\nstart = time.process_time()\nwhile time.process_time() - start < 1.5:\n    pass\n"
    )
    (tmp_path / "Snakefile").write_text(
        "rule all:\n"
        "    input: 'done.txt'\n"
        "rule burn:\n"
        "    output: 'done.txt'\n"
        "    log: 'logs/burn/job.log'\n"
        "    benchmark: 'bench.tsv'\n"
        f"    shell: '(sleep 0.5; {sys.executable} burn.py &); sleep 0.1; {sys.executable} burn.py > {{log}} "
        "&& touch {output}'\n"
    )
    rusage = tmp_path / "rusage.json"
    proc = subprocess.run(
        [sys.executable, "-c", bench.LAUNCH, "-c1", "all"],
        cwd=tmp_path,
        env={**os.environ, "ACERL_BENCH_RUSAGE": str(rusage)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cpu = json.loads(rusage.read_text())
    assert cpu["jobs"] >= 3.0 and cpu["snakemake"] > 0
    assert 1.5 <= cpu["per_rule"]["burn"] <= cpu["jobs"] - 1.5  # the job's own rusage, found by its log path
    assert 1.5 <= cpu["orphans"] < 3.0  # the background burner, not waited for by the job
    assert (tmp_path / "done.txt").is_file()


def test_update_buckets_benchmark_arms_compute_the_same_gradient(tmp_path: Path):
    """The padding lever's arms differ in layout only: sorted length buckets give the single padded pass's
    gradient (up to rounding) with fewer padded tokens, and every row is in exactly one micro-batch."""
    trainer, bench = _load("bench_trainer"), _load("bench_update_buckets")
    trainer.make_root(tmp_path, train_size=32)
    state, setup, batch = bench.draw_batch(tmp_path)
    lengths = batch.response_lengths
    grads, tokens = {}, {}
    for k in (1, 4):
        parts = bench.chunks(lengths, k)
        assert sorted(torch.cat(parts).tolist()) == list(range(len(batch)))
        assert bench.one_update(state, batch, parts, setup.hyper.temperature) > 0
        grads[k] = [p.grad.clone() for p in state.model.parameters()]
        tokens[k] = bench.padded_tokens(batch, parts)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(grads[1], grads[4], strict=True))
    assert any(g.abs().max() > 0 for g in grads[1])
    assert tokens[4] <= tokens[1]
    sorted_parts = bench.chunks(lengths, 4)
    assert all(lengths[a].max() <= lengths[b].min() for a, b in itertools.pairwise(sorted_parts))
