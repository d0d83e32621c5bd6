"""dvc.yaml is generated from the config: current, the same DAG as Snakemake, params = the keys that decide a
job, and DVC parses it."""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest
import yaml
from dvc_helpers import (
    REPO,
    TEST_CONFIG,
    dvc_status,
    init_repo,
    out_paths,
    sh,
    snakemake_dry_run,
    snakemake_jobs,
)
from support.study import copy_workflow

from acerl.config import Run, load_config, merged_dict, validate
from acerl.config.settings import run_spec
from acerl.dvc import (
    DEFAULT_CONFIG_FILES,
    build_stages,
    check_dvc_yaml,
    params_by_file,
    render_dvc_yaml,
    snakemake_touch_argv,
    stage_name,
    write_dvc_yaml,
)
from acerl.pipeline import paths
from acerl.pipeline.stages import Job, stage_command, study_jobs
from acerl.pipeline.stages import param_keys as job_param_keys


def param_keys(cfg, stage, run=None, model=None, benchmark=None):
    return job_param_keys(cfg, Job(stage, model or (run.model if run else None), run, benchmark))


def _cfg(files=DEFAULT_CONFIG_FILES):
    return load_config([REPO / f for f in files])


def test_committed_dvc_yaml_is_current():
    diff = check_dvc_yaml(DEFAULT_CONFIG_FILES, REPO / "dvc.yaml")
    assert diff is None, f"dvc.yaml is stale: run `acerl dvc write`\n{diff}"


def test_write_and_check_round_trip(tmp_path):
    (tmp_path / "config").mkdir()
    for f in TEST_CONFIG:
        shutil.copy(REPO / f, tmp_path / f)
    out = write_dvc_yaml(TEST_CONFIG, tmp_path / "dvc.yaml")
    assert check_dvc_yaml(TEST_CONFIG, out) is None
    assert "--config config/config.yaml --config config/test.yaml" in out.read_text().splitlines()[0]
    with (tmp_path / "config" / "test.yaml").open("a") as fh:
        fh.write("grading: {timeout_s: 7}\n")  # a key test.yaml did not set: the params change
    diff = check_dvc_yaml(TEST_CONFIG, out)
    assert diff is not None and "grading.timeout_s" in diff


def test_stage_names_are_valid_for_dvc():
    assert stage_name("train_policy", "tiny", "ace_grpo-alpha0.5", "seed0") == (
        "train_policy-tiny-ace_grpo-alpha0_5-seed0"
    )
    for stage in build_stages(_cfg(), DEFAULT_CONFIG_FILES):
        assert all(c.isalnum() or c in "_-" for c in stage.name), stage.name


def test_one_stage_per_job_with_commands_from_stages_and_paths_from_paths():
    cfg = _cfg()
    files = list(DEFAULT_CONFIG_FILES)
    stages = {s.name: s for s in build_stages(cfg, files)}
    runs = cfg.runs()
    # sample, grade, passk for base + 20 main runs on both benchmarks, the 3 sweep / ablation-only runs on one
    # (alphas 0.5 and 2 at seed 0, ACE-ReLU seed 0; alpha 0 and 1.0 are the main grid's GRPO / ACE-GRPO runs)
    assert len(cfg.evaluations()) == 21 * 2 + 3
    assert len(stages) == 2 + len(runs) + 3 * len(cfg.evaluations()) + len(cfg.diagnostic_runs()) + 1
    assert "sample-synth_easy-tiny-ace_grpo_relu-seed0" in stages
    assert "sample-synth_hard-tiny-ace_grpo_relu-seed0" not in stages
    run = Run("tiny", "ace_grpo-alpha0.5", 0)
    train = stages["train_policy-tiny-ace_grpo-alpha0_5-seed0"]
    assert train.cmd == stage_command("train_policy", files, ".", run=run)
    assert [o.path for o in train.outs][0] == paths.policy_dir(".", run).as_posix()
    sample = stages["sample-synth_hard-tiny-base-seed0"]
    base = Run("tiny", "base", 0)
    assert sample.deps[0] == paths.base_model_dir(".", "tiny").as_posix()  # the base model is evaluated as is
    assert sample.outs[0].path == paths.generations_file(".", "synth_hard", base).as_posix()
    passk = stages["passk-synth_hard-tiny-base-seed0"]
    assert passk.metrics == (paths.passk_file(".", "synth_hard", base).as_posix(),)


def test_resumable_state_is_not_an_output_and_training_metrics_persist():
    cfg = _cfg()
    run = Run("tiny", "grpo", 0)
    train = next(
        s for s in build_stages(cfg, DEFAULT_CONFIG_FILES) if s.name == "train_policy-tiny-grpo-seed0"
    )
    outs = {o.path: o for o in train.outs}
    assert paths.checkpoints_dir(".", run).as_posix() not in outs
    assert paths.diag_dir(".", run).as_posix() not in outs
    assert outs[paths.train_metrics_file(".", run).as_posix()].persist
    assert not outs[paths.policy_dir(".", run).as_posix()].persist


def test_same_jobs_and_outputs_as_the_snakemake_workflow(tmp_path):
    """Every DVC stage is a Snakemake job with the same outputs (DVC adds only the persistent training log)."""
    copy_workflow(tmp_path)
    (tmp_path / "src").symlink_to(REPO / "src")  # the tools import this checkout's acerl (tool_env)
    cfg = _cfg(TEST_CONFIG)
    smk = snakemake_jobs(snakemake_dry_run(tmp_path, TEST_CONFIG, "--forceall"))
    dvc_only = {
        paths.train_metrics_file(".", r).as_posix() for r in cfg.runs()
    }  # persist: a log across resumes
    ours = set()
    for stage in build_stages(cfg, TEST_CONFIG):
        outs = {o.path for o in stage.outs} | set(stage.metrics)
        rule = stage.name.split("-", 1)[0]
        ours.add((rule, frozenset(p for p in outs if p not in dvc_only)))
    assert ours == smk


# ------------------------------------------------------------------------------------------------ params
def _leaves(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        out = []
        for k, v in data.items():
            out += _leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [(prefix, data)]


def _perturbed(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float):
        return [value * 2 + 1, value / 2 if value else 0.5]
    if isinstance(value, list) and value and all(isinstance(v, int | float) for v in value):
        return [value[:-1] or [value[0] + 1], [*value, value[-1] * 2]]
    if isinstance(value, str):
        return [value + "x", "relu", "seq-mean-token-sum", "k1", "signed", "cosine", "token", "cpu", "verl"]
    return []


def _set(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node = out
    *head, last = key.split(".")
    for part in head:
        node = node[part]
    node[last] = value
    return out


def _covered(key: str, listed: list[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in listed)


@pytest.mark.parametrize("files", [DEFAULT_CONFIG_FILES, TEST_CONFIG], ids=["default", "test"])
def test_train_params_cover_everything_that_changes_the_run_spec(files):
    """Perturb every value the config files set: when a run's resolved settings (what Snakemake's params and the
    trainer's resume check compare) change, the key is one of the stage's DVC params."""
    data = merged_dict([REPO / f for f in files])
    cfg = validate(data)
    runs = cfg.runs()
    listed = {r: param_keys(cfg, "train_policy", run=r) for r in runs}
    checked = 0
    for key, value in _leaves(data):
        for new in _perturbed(value):
            try:
                other = validate(_set(data, key, new))
            except Exception:
                continue
            if (other.runs(), other.diagnostic_runs()) != (runs, cfg.diagnostic_runs()):
                continue  # a grid change: dvc.yaml must be regenerated (test_write_and_check_round_trip)
            for run in runs:
                if run_spec(other, run) != run_spec(cfg, run):
                    checked += 1
                    assert _covered(key, listed[run]), f"{key} changes {run.id} but is not a param"
    assert checked > 50


def test_alpha_sweep_variants_do_not_track_the_method_alpha():
    cfg = _cfg()
    variant = param_keys(cfg, "train_policy", run=Run("tiny", "ace_grpo-alpha0.5", 0))
    method = param_keys(cfg, "train_policy", run=Run("tiny", "ace_grpo", 0))
    assert "methods.ace_grpo.estimator" in method
    assert not _covered("methods.ace_grpo.estimator.alpha", variant)
    assert _covered("methods.ace_grpo.estimator.modulation", variant)
    grpo = param_keys(cfg, "train_policy", run=Run("tiny", "grpo", 0))
    assert not any(k.startswith("methods.ace") for k in grpo)


def test_params_list_only_keys_each_file_sets():
    cfg = _cfg(TEST_CONFIG)
    keys = param_keys(cfg, "train_policy", run=Run("tiny", "ace_grpo", 0))
    entries = params_by_file(keys, {f: yaml.safe_load((REPO / f).read_text()) for f in TEST_CONFIG})
    by_file = {next(iter(e)): next(iter(e.values())) for e in entries}
    assert "models.tiny.train.total_steps" in by_file["config/test.yaml"]
    assert "models.tiny.train.save_every" not in by_file["config/test.yaml"]  # a resource key: not a param
    assert "methods.ace_grpo.estimator" not in by_file["config/test.yaml"]  # test.yaml leaves methods alone
    assert "methods.ace_grpo.estimator" in by_file["config/config.yaml"]
    for f, listed in by_file.items():
        data = yaml.safe_load((REPO / f).read_text())
        for key in listed:
            node = data
            for part in key.split("."):
                node = node[part]  # KeyError: a listed key the file does not set


def test_sample_tracks_the_response_length_only_when_it_is_the_default():
    cfg = _cfg()
    run = Run("tiny", "grpo", 0)
    assert "models.tiny.train.max_response_length" in param_keys(cfg, "sample", run=run)
    other = validate(
        {
            **merged_dict([REPO / "config/config.yaml"]),
            "evaluation": {**cfg.evaluation.model_dump(), "max_new_tokens": 32},
        }
    )
    assert "models.tiny.train.max_response_length" not in param_keys(other, "sample", run=run)


def test_render_is_deterministic_and_plots_name_existing_outputs():
    cfg = _cfg()
    text = render_dvc_yaml(cfg, DEFAULT_CONFIG_FILES, REPO)
    assert text == render_dvc_yaml(cfg, DEFAULT_CONFIG_FILES, REPO)
    doc = yaml.safe_load(text)
    outs = {p for st in doc["stages"].values() for p in out_paths(st)}
    for plot in doc["plots"]:
        (spec,) = plot.values()
        for f in spec["y"]:
            assert any(f == o or f.startswith(o + "/") for o in outs), f


def test_snakemake_touch_argv():
    assert snakemake_touch_argv(DEFAULT_CONFIG_FILES) == [
        "snakemake",
        "all",
        "--touch",
        "--forceall",
        "--cores",
        "1",
    ]
    argv = snakemake_touch_argv(TEST_CONFIG)
    assert argv[-2:] == ["--configfile", "config/test.yaml"]


def test_dvc_reads_the_generated_pipeline(tmp_path):
    (tmp_path / "config").mkdir()
    for f in TEST_CONFIG:
        shutil.copy(REPO / f, tmp_path / f)
    for f in (".dvcignore", ".dvc/config", ".dvc/.gitignore", "src/acerl/stage_versions.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / f, tmp_path / f)
    out = write_dvc_yaml(TEST_CONFIG, tmp_path / "dvc.yaml")
    init_repo(tmp_path)
    listed = sh(tmp_path, "dvc", "stage", "list", "--name-only").stdout.split()
    assert listed == list(yaml.safe_load(out.read_text())["stages"])
    status = dvc_status(tmp_path)  # every stage is new: deps and params read, none missing
    assert set(status) == set(listed)
    deps = status["train_policy-tiny-ace_grpo-seed0"][0]["changed deps"]
    assert deps["config/config.yaml"] == deps["config/test.yaml"] == "new"  # a missing key would be "deleted"


# What the sample stage reads: a quick counterpart of the slow key-by-key sweep (tests/workflow/test_stage_table.py),
# which only perturbs the keys the table already lists and so cannot see a key missing from it.
SPEED_KNOBS = ("compute.device", "compute.torch_threads", "grading.workers", "compute.resources")
VLLM_MEMORY = (
    "kv_cache_gib",
    "gpu_memory_utilization",
)  # vLLM's memory budget: a speed knob (acerl.pipeline.stages)


def _all_perturbations(value: Any) -> list[Any]:
    """:func:`_perturbed`, plus a value for unset keys and the other valid names of the sampling's enumerations
    (backend, precision, prompt template)."""
    from acerl.prompts import template_names

    if value is None:
        return [1, 32, "x"]
    if isinstance(value, str):
        names = ["hf", "vllm", "fp32", "bf16", *template_names()]
        return [*_perturbed(value), *(v for v in names if v != value)]
    return _perturbed(value)


class _RecordingSampler:
    """Stands in for the model (not for the stage): records what the stage asks for, answers a fixed text."""

    def __init__(self, calls: list, tokenizer: Any) -> None:
        self.calls, self.tokenizer = calls, tokenizer

    def generate(self, prompts, params):
        from acerl.generate.base import Completion

        self.calls.append((list(prompts), params))
        return [[Completion("1", [5, 2], "stop") for _ in range(params.n)] for _ in prompts]


def _what_sampling_reads(cfg, run: Run, root, monkeypatch, tokenizer) -> Any:
    """Everything the sample stage hands the sampler (its construction settings but the speed knobs, every
    shard's prompts and sampling parameters) and the generations it writes."""
    import acerl.generate as generate
    from acerl.evaluate.pipeline import sample_run
    from acerl.pipeline.io import read_jsonl

    built, calls = [], []

    def make_sampler(backend, model_dir, *, device, batch_size, vllm_settings, precision):
        if backend == "hf":  # what each backend reads (acerl.generate.make_sampler)
            built.append((backend, batch_size, precision))
        else:
            built.append((backend, {k: v for k, v in vllm_settings.items() if k not in VLLM_MEMORY}))
        return _RecordingSampler(calls, tokenizer)

    monkeypatch.setattr(generate, "make_sampler", make_sampler)
    shutil.rmtree(paths.generations_file(root, "synth_easy", run).parent, ignore_errors=True)
    out = sample_run(cfg, run, "synth_easy", root, progress=False)
    return built, calls, read_jsonl(out, required=())


def test_sample_params_cover_everything_the_sampler_is_asked(tmp_path, monkeypatch):
    """Perturb every value of the validated config (defaults included): when the sample stage asks its sampler
    for anything different or writes different generations, the key is one of the stage's deciding keys."""
    from acerl.models.tokenizer import build_char_tokenizer
    from acerl.pipeline.io import write_jsonl

    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = (  # the chat templates need one; any will do
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    run = Run("tiny", "grpo", 0)
    root = tmp_path / "root"
    problems = [{"id": f"p{i}", "problem": f"{i} + {i} = ?", "answer": str(2 * i)} for i in range(5)]
    write_jsonl(paths.data_file(root, "synth_easy"), problems)
    paths.policy_dir(root, run).mkdir(parents=True)
    (paths.policy_dir(root, run) / "config.json").write_text("{}")
    import acerl.evaluate.pipeline as pipeline
    import acerl.pipeline.io

    monkeypatch.setattr(pipeline, "gc", type("NoGc", (), {"collect": staticmethod(lambda: 0)}))  # speed only
    monkeypatch.setattr(acerl.pipeline.io, "fsync_path", lambda path: None)  # speed only
    cfg = load_config([REPO / f for f in DEFAULT_CONFIG_FILES], ["evaluation.shard_size=2"])  # 3 shards of 5
    job = Job("sample", run.model, run, "synth_easy")
    listed = job_param_keys(cfg, job)
    baseline = _what_sampling_reads(cfg, run, root, monkeypatch, tokenizer)
    data = cfg.model_dump(mode="json")
    checked = 0
    for key, value in _leaves(data):
        if any(key == k or key.startswith(k + ".") for k in SPEED_KNOBS):
            continue
        for new in _all_perturbations(value):
            try:
                other = validate(_set(data, key, new))
            except Exception:
                continue
            if job not in study_jobs(other):
                continue  # a grid change
            if _what_sampling_reads(other, run, root, monkeypatch, tokenizer) != baseline:
                checked += 1
                assert _covered(key, listed + job_param_keys(other, job)), f"{key} changes sampling"
    assert checked >= 8
