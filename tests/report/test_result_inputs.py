"""A corrupt result file stops the report with a fix that is a command (``acerl.report.inputs``); the slow test
``test_corrupt_advice.py`` follows it on the CI-scale study."""

from __future__ import annotations

import pytest
from support.report_synthetic import REPO_ROOT

from acerl.config import load_config
from acerl.errors import BadInputError
from acerl.pipeline import paths
from acerl.pipeline.io import write_jsonl
from acerl.pipeline.records import passk_record, write_passk_record
from acerl.report.inputs import rebuild_advice, result_jobs
from acerl.report.study import report_study

CONFIGS = ("config/config.yaml", "config/test.yaml")


def test_a_corrupt_result_file_names_the_command_that_rebuilds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    cfg = load_config(list(CONFIGS))
    run, bench = cfg.base_runs()[0], cfg.evaluation.benchmarks[0]
    rec = passk_record(bench, run.model, run.method, None, ["q0"], cfg.evaluation.n, [1], cfg.evaluation.ks)
    path = write_passk_record(rec, paths.passk_file(tmp_path, bench, run))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(BadInputError) as e:
        report_study(cfg, tmp_path, partial=True, config_files=CONFIGS)
    job = result_jobs(cfg, tmp_path)[path]
    assert (job.stage, job.run, job.benchmark) == ("passk", run, bench)
    assert str(e.value).startswith(f"{path} is unreadable (truncated or corrupt: ")
    assert str(e.value).endswith(
        f"delete it and run `acerl passk --config config/config.yaml --config config/test.yaml --root {tmp_path} "
        f"--model {run.model} --method base --seed 0 --benchmark {bench}` then `acerl report --config "
        f"config/config.yaml --config config/test.yaml --root {tmp_path}`"
    )
    assert not paths.report_file(tmp_path).exists()  # nothing rendered from a partial read


def test_in_the_study_folder_the_fix_is_one_snakemake_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config([REPO_ROOT / f for f in CONFIGS])
    path, job = next(iter(result_jobs(cfg, ".").items()))
    assert rebuild_advice(job, CONFIGS, ".") == (
        "run `snakemake -c1 all --forcerun report --configfile config/test.yaml` (it writes the file again, then "
        "the report)"
    )
    assert "--configfile" not in rebuild_advice(job, CONFIGS[:1], tmp_path)


def test_a_run_scored_on_part_of_the_benchmark_stops_the_report(tmp_path, monkeypatch):
    """A run scored on 12 of 24 problems was reported (its Pass@8 bold, beside runs scored on all 24): the report
    names its file, the count missing and the commands that evaluate the run again."""
    monkeypatch.chdir(REPO_ROOT)
    cfg = load_config(list(CONFIGS))
    bench = cfg.evaluation.benchmarks[0]
    (base, trained), n, ks = [cfg.base_runs()[0], cfg.runs()[0]], cfg.evaluation.n, cfg.evaluation.ks
    ids = [f"q{i}" for i in range(24)]
    for run, held in ((base, ids), (trained, ids[:12])):
        seed = None if run.is_base else run.seed
        rec = passk_record(bench, run.model, run.method, seed, held, n, [1] * len(held), ks)
        write_passk_record(rec, paths.passk_file(tmp_path, bench, run))
    part = paths.passk_file(tmp_path, bench, trained)
    with pytest.raises(BadInputError) as e:
        report_study(cfg, tmp_path, partial=True, config_files=CONFIGS)
    message = str(e.value)
    assert message.startswith(f"{part}: Pass@k over 12 of {bench}'s 24 problems (12 missing, e.g. 'q12'): ")
    assert (
        f"{paths.generations_file(tmp_path, bench, trained)} and {paths.scored_file(tmp_path, bench, trained)}"
        in message
    )
    assert (
        f"`acerl sample --config config/config.yaml --config config/test.yaml --root {tmp_path} " in message
    )
    assert message.endswith(f"--benchmark {bench}` then `acerl report --config config/config.yaml --config "
                            f"config/test.yaml --root {tmp_path}`")  # fmt: skip
    assert not paths.report_file(tmp_path).exists()

    # every run on the same 12: the benchmark's data file holds all 24
    rec = passk_record(bench, base.model, base.method, None, ids[:12], n, [1] * 12, ks)
    write_passk_record(rec, paths.passk_file(tmp_path, bench, base))
    write_jsonl(paths.data_file(tmp_path, bench), [{"id": i, "problem": "1+1", "answer": "2"} for i in ids])
    with pytest.raises(BadInputError, match=r"Pass@k over 12 of .*'s 24 problems \(12 missing"):
        report_study(cfg, tmp_path, partial=True, config_files=CONFIGS)
