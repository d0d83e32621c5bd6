"""The pipeline's stage table: the one place the pipeline graph is written.

For every job kind (a Snakemake rule, a family of DVC stages) :data:`TABLE` holds its jobs for a config, and for
each job its inputs, its outputs (with DVC's metrics and plots), the config keys that decide its result and its
command: one :class:`StageSpec` per job kind, built by keyword. ``workflow/rules/*.smk`` spell out its patterns and
commands (``tests/workflow/test_stage_table.py`` checks each rule and job against it) and take their deciding
``params:`` from it; :mod:`acerl.dvc` (``deps``, ``outs``, ``metrics``, ``params``, ``plots``) renders
``dvc.yaml`` from it. So the two tools run the same jobs on the same files and rerun them for the same reasons.
Paths come from :mod:`acerl.pipeline.paths`, the grid from :class:`acerl.config.Config`.

Deciding keys (:func:`param_keys`) are merged-config key paths; a key stands for its whole subtree. They list
what changes a job's result and nothing else (docs/sharing.md, "What reruns a job"):

- not the speed knobs: ``grading.workers``, ``compute.torch_threads``, ``compute.device``,
  ``compute.gradient_checkpointing``, ``compute.max_tokens_per_micro_batch``, ``compute.resources``
  (except in the report, whose compute table prints them), vLLM's memory budget (``evaluation.vllm.kv_cache_gib``,
  ``gpu_memory_utilization``);
- but every knob that moves a random stream or a rounding: ``evaluation.shard_size`` (each shard has its own seed),
  ``evaluation.batch_size`` (the HF sampler draws one generator over its batches), ``compute.precision``.

The code's share of a result is :data:`acerl.stage_versions.STAGE_VERSIONS`: one number per stage, a param in both
tools, bumped with a change to ``src/acerl`` that changes what the stage writes.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from acerl.config import Config, DiagnosticsConfig, Run
from acerl.config.settings import run_spec, spec_keys
from acerl.pipeline import paths
from acerl.stage_versions import STAGE_VERSIONS

ROOT = (
    "."  # every path of the table is relative to the work directory (the folder of dvc.yaml / the Snakefile)
)
VERSIONS_FILE = "src/acerl/stage_versions.py"  # DVC reads the stage versions from it as a params file
VERSIONS_KEY = "STAGE_VERSIONS"

Shape = Literal["study", "model", "run", "evaluation"]
Inputs = dict[str, str | list[str]]


# ------------------------------------------------------------------------------------------------ jobs
@dataclass(frozen=True)
class Job:
    """One job of a stage: the whole study, one model, one run, or one run on one benchmark."""

    stage: str
    model: str | None = None
    run: Run | None = None
    benchmark: str | None = None

    @property
    def parts(self) -> tuple[str, ...]:
        """The job's wildcard values in name order (``<benchmark>``, ``<model>``, ``<method>``, ``seed<s>``)."""
        head = () if self.benchmark is None else (self.benchmark,)
        if self.run is not None:
            return (*head, self.run.model, self.run.method, f"seed{self.run.seed}")
        return head if self.model is None else (*head, self.model)


@dataclass(frozen=True)
class Output:
    """One output of a job. ``persist``: a log the job appends to across resumes (DVC keeps it when it reruns the
    stage; Snakemake, which deletes the outputs of a failed or rerun job, does not declare it). ``metric``: a DVC
    metrics file (DVC's top-level ``plots`` are :func:`acerl.dvc.render.render_dvc_yaml`'s)."""

    name: str
    path: str
    directory: bool = False
    persist: bool = False
    metric: bool = False


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """Everything about one stage: its jobs for a config, and for a job its files, deciding keys and command."""

    name: str
    shape: Shape  # what one job covers: the study, a model, a run, or a run on a benchmark
    doc: str
    subcommand: str  # ``acerl <subcommand>``
    jobs: Callable[[Config], list[Job]]
    inputs: Callable[[Config, Job], Inputs]
    outputs: Callable[[Config, Job], list[Output]]
    keys: Callable[[Config, Job], list[str]]  # the deciding keys (:func:`param_keys`; DVC's params)
    # Snakemake's params of a job where they are not the keys' values (a training job: its resolved run spec)
    recorded: Callable[[Config, Job], dict[str, Any]] | None = None
    quiet: bool = False  # has a progress bar, silenced in batch jobs (``--no-progress``)
    log_name: str | None = None  # the log / benchmark file name of a study-wide job


def _p(path: Path) -> str:
    return path.as_posix()


def _fields(prefix: str, model: type, exclude: Sequence[str] = ()) -> list[str]:
    return [f"{prefix}.{name}" for name in model.model_fields if name not in exclude]  # type: ignore[attr-defined]


def models_used(cfg: Config) -> list[str]:
    """Models some evaluated or trained run uses, in config order (one ``prepare_base`` job each)."""
    used = {r.model for r in cfg.base_runs() + cfg.runs()}
    return [m for m in cfg.models if m in used]


def trained_models(cfg: Config) -> list[str]:
    used = {r.model for r in cfg.runs()}
    return [m for m in cfg.models if m in used]


def _req(value: Any, what: str) -> Any:
    if value is None:
        raise ValueError(f"this stage's job needs a {what}")
    return value


# ------------------------------------------------------------------------------------------- the keys
def _max_tokens_keys(model: str, explicit: int | None) -> list[str]:
    """``max_new_tokens: null`` means the model's ``train.max_response_length`` (evaluation, diagnostics)."""
    return [] if explicit is not None else [f"models.{model}.train.max_response_length"]


def _sampler_keys(cfg: Config) -> list[str]:
    """What the configured sampler's output depends on besides the sampling parameters: the HF sampler's batch
    size (one generator drawn over the batches) and precision; vLLM's engine settings except its memory budget."""
    if cfg.evaluation.backend == "hf":
        return ["evaluation.batch_size", "compute.precision"]
    return [
        f"evaluation.vllm.{k}" for k in ("tensor_parallel_size", "max_model_len", "dtype", "enforce_eager")
    ]


def _keys_prepare_base(cfg: Config, job: Job) -> list[str]:
    model = _req(job.model, "model")
    if cfg.models[model].source == "tiny":  # built and SFT'd here: architecture, SFT, template, the SFT seed
        return [f"models.{model}.{k}" for k in ("source", "template", "tiny", "sft")] + [
            "data.synthetic.seed"
        ]
    return [f"models.{model}.{k}" for k in ("source", "hub_id", "path")]


def _keys_prepare_verl_data(cfg: Config, job: Job) -> list[str]:
    model = _req(job.model, "model")
    keys = [f"models.{model}.template", "data.kind"]  # the rows' chat messages and their data_source name
    return keys + (["data.real.train.path", "data.real.train.hub_id"] if cfg.data.kind == "real" else [])


_TRAIN_KEYS = ("grading.timeout_s", "compute.backend")  # outside the run spec: timeouts are wrong answers


def _keys_train(cfg: Config, job: Job) -> list[str]:
    """The keys the run's resolved settings read (:func:`acerl.config.settings.spec_keys`), the grader's time limit and
    the trainer backend."""
    return [*spec_keys(cfg, _req(job.run, "run")), *_TRAIN_KEYS]


def _recorded_train(cfg: Config, job: Job) -> dict[str, Any]:
    """Snakemake's record of a training job: the resolved run spec itself (``run_spec.json``), not the values of
    the keys it is resolved from, and the keys outside it."""
    return {"run_spec": run_spec(cfg, _req(job.run, "run")), **_key_values(cfg, _TRAIN_KEYS)}


def _keys_sample(cfg: Config, job: Job) -> list[str]:
    run = _req(job.run, "run")
    ev = [f"evaluation.{k}" for k in ("n", "temperature", "top_p", "max_new_tokens", "seed", "shard_size")]
    return [
        *ev,
        "evaluation.backend",
        *_sampler_keys(cfg),
        f"models.{run.model}.template",
        *_max_tokens_keys(run.model, cfg.evaluation.max_new_tokens),
    ]


def _keys_diagnose(cfg: Config, job: Job) -> list[str]:
    """The diagnostics settings (not the grid), the seed they derive theirs from, the sampler, the grader's time
    limit, the prompt template and the checkpoint schedule's length (``total_steps``)."""
    run = _req(job.run, "run")
    d = _req(cfg.study.diagnostics, "study.diagnostics section")
    sampler = _sampler_keys(cfg)
    entropy = [] if "evaluation.batch_size" in sampler else ["evaluation.batch_size"]  # always the HF scorer
    return [
        *_fields("study.diagnostics", DiagnosticsConfig, exclude=("models", "methods", "seeds")),
        "evaluation.seed",
        "evaluation.backend",
        *sampler,
        *entropy,
        "grading.timeout_s",
        f"models.{run.model}.template",
        f"models.{run.model}.train.total_steps",
        *_max_tokens_keys(run.model, d.max_new_tokens),
    ]


REPORT_KEYS = (
    "name",
    "models",
    "methods",
    "study",
    "evaluation.benchmarks",
    "evaluation.ks",
    "compute.backend",
    "compute.resources",  # the compute table's GPU-hours count the GPUs each job asked for
    "compute.model_resources",
    "report",
)


# ----------------------------------------------------------------------------------------- the files
def local_data_sources(cfg: Config) -> list[str]:
    """Local dataset files (``data.real.*.path``) prepare_data reads; none for the synthetic data."""
    real = cfg.data.real if cfg.data.kind == "real" else None
    sources = [] if real is None else [real.train, *real.benchmarks.values()]
    return [Path(s.path).as_posix() for s in sources if s.path is not None]


def _inputs_prepare_data(cfg: Config, job: Job) -> Inputs:
    return {"sources": local_data_sources(cfg)}


def _outputs_prepare_data(cfg: Config, job: Job) -> list[Output]:
    outs = [Output(split, _p(paths.data_file(ROOT, split))) for split in cfg.data_splits]
    if cfg.data.kind == "real":
        outs.append(Output("real_data_report", _p(paths.real_data_report_file(ROOT))))
    return outs


def _inputs_prepare_base(cfg: Config, job: Job) -> Inputs:
    mc = cfg.models[_req(job.model, "model")]
    if mc.source == "tiny":  # the SFT data, and the benchmarks the SFT'd model is scored on
        return {
            "sft": _p(paths.data_file(ROOT, "sft")),
            "benchmarks": [_p(paths.data_file(ROOT, b)) for b in cfg.evaluation.benchmarks],
        }
    return {"local": Path(mc.path).as_posix()} if mc.path else {}


def _outputs_prepare_base(cfg: Config, job: Job) -> list[Output]:
    return [Output("model", _p(paths.base_model_dir(ROOT, _req(job.model, "model"))), directory=True)]


def _inputs_prepare_verl_data(cfg: Config, job: Job) -> Inputs:
    return {
        "train": _p(paths.data_file(ROOT, "train")),
        "benchmarks": [_p(paths.data_file(ROOT, b)) for b in cfg.benchmark_names],
    }


def _outputs_prepare_verl_data(cfg: Config, job: Job) -> list[Output]:
    model = _req(job.model, "model")
    return [
        Output("train", _p(paths.verl_train_file(ROOT, model))),
        Output("val", _p(paths.verl_val_file(ROOT, model))),
    ]


def _inputs_train(cfg: Config, job: Job) -> Inputs:
    run = _req(job.run, "run")
    out: Inputs = {
        "base": _p(paths.base_model_dir(ROOT, run.model)),
        "train": _p(paths.data_file(ROOT, "train")),
    }
    if cfg.compute.backend == "verl":
        out["verl_train"] = _p(paths.verl_train_file(ROOT, run.model))
        out["verl_val"] = _p(paths.verl_val_file(ROOT, run.model))
    return out


def _outputs_train(cfg: Config, job: Job) -> list[Output]:
    run = _req(job.run, "run")
    outs = [
        Output("final", _p(paths.policy_dir(ROOT, run)), directory=True),
        Output("metrics", _p(paths.train_metrics_file(ROOT, run)), persist=True),
    ]
    if cfg.compute.backend == "local":  # rebuilt from metrics.jsonl whenever the trainer starts
        outs.append(Output("live", _p(paths.live_dir(ROOT, run)), directory=True))
    return outs


def _eval_parts(job: Job) -> tuple[str, Run]:
    return _req(job.benchmark, "benchmark"), _req(job.run, "run")


def _inputs_sample(cfg: Config, job: Job) -> Inputs:
    benchmark, run = _eval_parts(job)
    return {"policy": _p(paths.policy_dir(ROOT, run)), "problems": _p(paths.data_file(ROOT, benchmark))}


def _inputs_diagnose(cfg: Config, job: Job) -> Inputs:
    run = _req(job.run, "run")
    return {
        "final": _p(paths.policy_dir(ROOT, run)),
        "reference": _p(paths.base_model_dir(ROOT, run.model)),
        "heldout": _p(paths.data_file(ROOT, "heldout")),
    }


def _inputs_report(cfg: Config, job: Job) -> Inputs:
    out: Inputs = {
        "passk": [_p(paths.passk_file(ROOT, b, r)) for b, r in cfg.evaluations()],
        "diagnostics": [_p(paths.diagnostics_file(ROOT, r)) for r in cfg.diagnostic_runs()],
        # the training-dynamics figure reads each main-grid run's metrics.jsonl beside its final policy
        # (metrics.jsonl, a log resumes append to, is no Snakemake output; final/ is written after it)
        "training": [_p(paths.policy_dir(ROOT, r)) for r in main_grid_runs(cfg)],
    }
    if cfg.report.compare_to_paper:  # the paper's published numbers, for the "ours vs paper" table
        out["paper"] = _p(paths.paper_results_dir(ROOT))
    return out


def main_grid_runs(cfg: Config) -> list[Run]:
    """The runs of the study's main grid (``study.main``): the training-dynamics figure's runs."""
    main = cfg.study.main
    return [r for r in cfg.runs() if r.model in main.models and r.method in main.methods]


def run_columns(runs: Sequence[Run]) -> dict[str, list[str]]:
    """The runs' wildcard values column by column: ``expand(pattern, zip, **run_columns(runs))`` in a Snakemake
    rule names one file per run."""
    return {
        "model": [r.model for r in runs],
        "method": [r.method for r in runs],
        "seed": [str(r.seed) for r in runs],
    }


def evaluation_columns(cfg: Config) -> dict[str, list[str]]:
    """:func:`run_columns` of every evaluated (benchmark, run), the benchmark column first."""
    evaluations = cfg.evaluations()
    return {"benchmark": [b for b, _ in evaluations], **run_columns([r for _, r in evaluations])}


def _outputs_report(cfg: Config, job: Job) -> list[Output]:
    return [
        Output("tables", _p(paths.tables_dir(ROOT)), directory=True),
        Output("figures", _p(paths.figures_dir(ROOT)), directory=True),
        Output("compute", _p(paths.compute_file(ROOT))),
        Output("summary", _p(paths.report_file(ROOT))),
        Output("page", _p(paths.report_page_file(ROOT))),
        Output("headline", _p(paths.headline_file(ROOT))),
    ]


def _outputs_sample(cfg: Config, job: Job) -> list[Output]:
    benchmark, run = _eval_parts(job)
    return [Output("generations", _p(paths.generations_file(ROOT, benchmark, run)))]


def _inputs_grade(cfg: Config, job: Job) -> Inputs:
    benchmark, run = _eval_parts(job)
    return {"generations": _p(paths.generations_file(ROOT, benchmark, run))}


def _outputs_grade(cfg: Config, job: Job) -> list[Output]:
    benchmark, run = _eval_parts(job)
    return [Output("scored", _p(paths.scored_file(ROOT, benchmark, run)))]


def _inputs_passk(cfg: Config, job: Job) -> Inputs:
    benchmark, run = _eval_parts(job)
    return {"scored": _p(paths.scored_file(ROOT, benchmark, run))}


def _outputs_passk(cfg: Config, job: Job) -> list[Output]:
    benchmark, run = _eval_parts(job)
    return [
        Output("metrics", _p(paths.passk_file(ROOT, benchmark, run)), metric=True),
        Output("curve", _p(paths.passk_curve_file(ROOT, benchmark, run))),
    ]


def _outputs_diagnose(cfg: Config, job: Job) -> list[Output]:
    return [Output("diagnostics", _p(paths.diagnostics_file(ROOT, _req(job.run, "run"))))]


def _keys_prepare_data(cfg: Config, job: Job) -> list[str]:
    return ["data"]


def _keys_grade(cfg: Config, job: Job) -> list[str]:
    return ["grading.timeout_s"]


def _keys_passk(cfg: Config, job: Job) -> list[str]:
    return ["evaluation.ks"]


def _keys_report(cfg: Config, job: Job) -> list[str]:
    return list(REPORT_KEYS)


# ------------------------------------------------------------------------------------------ the jobs
def _jobs_prepare_data(cfg: Config) -> list[Job]:
    return [Job("prepare_data")]


def _jobs_prepare_base(cfg: Config) -> list[Job]:
    return [Job("prepare_base", m) for m in models_used(cfg)]


def _jobs_prepare_verl_data(cfg: Config) -> list[Job]:
    """One per trained model, with the verl backend only."""
    if cfg.compute.backend != "verl":
        return []
    return [Job("prepare_verl_data", m) for m in trained_models(cfg)]


def _jobs_train(cfg: Config) -> list[Job]:
    return [Job("train_policy", r.model, r) for r in cfg.runs()]


def _evaluation_jobs(stage: str, cfg: Config) -> list[Job]:
    return [Job(stage, r.model, r, b) for b, r in cfg.evaluations()]


def _jobs_sample(cfg: Config) -> list[Job]:
    return _evaluation_jobs("sample", cfg)


def _jobs_grade(cfg: Config) -> list[Job]:
    return _evaluation_jobs("grade", cfg)


def _jobs_passk(cfg: Config) -> list[Job]:
    return _evaluation_jobs("passk", cfg)


def _jobs_diagnose(cfg: Config) -> list[Job]:
    return [Job("diagnose", r.model, r) for r in cfg.diagnostic_runs()]


def _jobs_report(cfg: Config) -> list[Job]:
    return [Job("report")]


# ------------------------------------------------------------------------------------------ the table
TABLE: dict[str, StageSpec] = {
    s.name: s
    for s in (
        StageSpec(
            name="prepare_data",
            shape="study",
            doc="training prompts, evaluation benchmarks and the held-out diagnostic set",
            subcommand="prepare-data",
            log_name="data",
            jobs=_jobs_prepare_data,
            inputs=_inputs_prepare_data,
            outputs=_outputs_prepare_data,
            keys=_keys_prepare_data,
        ),
        StageSpec(
            name="prepare_base",
            shape="model",
            doc="a base model folder (the tiny model built and SFT'd; a hub model linked)",
            subcommand="prepare-base",
            jobs=_jobs_prepare_base,
            inputs=_inputs_prepare_base,
            outputs=_outputs_prepare_base,
            keys=_keys_prepare_base,
        ),
        StageSpec(
            name="prepare_verl_data",
            shape="model",
            doc="verl's parquet files of a trained model (compute.backend: verl)",
            subcommand="prepare-verl-data",
            jobs=_jobs_prepare_verl_data,
            inputs=_inputs_prepare_verl_data,
            outputs=_outputs_prepare_verl_data,
            keys=_keys_prepare_verl_data,
        ),
        StageSpec(
            name="train_policy",
            shape="run",
            doc="one (model, method, seed) training run",
            subcommand="train",
            quiet=True,
            jobs=_jobs_train,
            inputs=_inputs_train,
            outputs=_outputs_train,
            keys=_keys_train,
            recorded=_recorded_train,
        ),
        StageSpec(
            name="sample",
            shape="evaluation",
            doc="n completions per benchmark problem",
            subcommand="sample",
            quiet=True,
            jobs=_jobs_sample,
            inputs=_inputs_sample,
            outputs=_outputs_sample,
            keys=_keys_sample,
        ),
        StageSpec(
            name="grade",
            shape="evaluation",
            doc="a math-verify verdict per completion",
            subcommand="grade",
            jobs=_jobs_grade,
            inputs=_inputs_grade,
            outputs=_outputs_grade,
            keys=_keys_grade,
        ),
        StageSpec(
            name="passk",
            shape="evaluation",
            doc="Pass@k from the verdicts",
            subcommand="passk",
            jobs=_jobs_passk,
            inputs=_inputs_passk,
            outputs=_outputs_passk,
            keys=_keys_passk,
        ),
        StageSpec(
            name="diagnose",
            shape="run",
            doc="OEF, overconfidence magnitude and entropy at the run's diagnostic checkpoints",
            subcommand="diagnose",
            quiet=True,
            jobs=_jobs_diagnose,
            inputs=_inputs_diagnose,
            outputs=_outputs_diagnose,
            keys=_keys_diagnose,
        ),
        StageSpec(
            name="report",
            shape="study",
            doc="the paper's tables and figures from every run's results",
            subcommand="report",
            log_name="report",
            jobs=_jobs_report,
            inputs=_inputs_report,
            outputs=_outputs_report,
            keys=_keys_report,
        ),
    )
}
STAGES = tuple(TABLE)
assert set(STAGE_VERSIONS) == set(STAGES)


# ------------------------------------------------------------------------------------------ accessors
def spec(stage: str) -> StageSpec:
    if stage not in TABLE:
        raise ValueError(f"unknown stage {stage!r}; valid: {', '.join(STAGES)}")
    return TABLE[stage]


def study_jobs(cfg: Config) -> list[Job]:
    """Every job of the study in pipeline order (what ``snakemake all`` and ``dvc repro`` run)."""
    return [job for s in TABLE.values() for job in s.jobs(cfg)]


def subcommand_stage(subcommand: str) -> StageSpec | None:
    """The stage ``acerl <subcommand>`` runs; None for a subcommand that is no stage (``config``, ...)."""
    return next((s for s in TABLE.values() if s.subcommand == subcommand), None)


def job_of(stage: str, wildcards: Any, seed: Callable[[str], Any] = int) -> Job:
    """The job of ``stage`` whose wildcard values are ``wildcards``' attributes (``model``, ``method``, ``seed``,
    ``benchmark``: a Snakemake rule's ``wildcards``); ``seed`` converts the seed's text."""
    shape = spec(stage).shape
    if shape == "study":
        return Job(stage)
    if shape == "model":
        return Job(stage, wildcards.model)
    run = Run(wildcards.model, wildcards.method, seed(wildcards.seed))
    return Job(stage, run.model, run, wildcards.benchmark if shape == "evaluation" else None)


class _Patterns:
    """Every wildcard as its Snakemake pattern (``{model}``, ...)."""

    def __getattr__(self, name: str) -> str:
        return "{" + name + "}"


def pattern_job(stage: str) -> Job:
    """The job of ``stage`` with Snakemake wildcards for its values (``{model}``, ``{method}``, ...)."""
    return job_of(stage, _Patterns(), seed=str)


def log_parts(job: Job) -> tuple[str, ...]:
    """The job's name under ``logs/<stage>/`` and ``benchmarks/logs/<stage>/``: its wildcard values, or for a
    study-wide job a fixed name (``data``, ``report``)."""
    return job.parts or (_req(spec(job.stage).log_name, "study-wide job's log name"),)


def job_log_file(root: str | Path, job: Job) -> Path:
    """The Snakemake ``log:`` of ``job``."""
    return paths.log_file(root, job.stage, *log_parts(job))


def job_benchmark_file(root: str | Path, job: Job) -> Path:
    """The Snakemake ``benchmark:`` TSV of ``job`` (what :mod:`acerl.report.compute` reads)."""
    return paths.benchmark_file(root, job.stage, *log_parts(job))


def job_inputs(cfg: Config, job: Job) -> Inputs:
    return spec(job.stage).inputs(cfg, job)


def job_outputs(cfg: Config, job: Job) -> list[Output]:
    return spec(job.stage).outputs(cfg, job)


def param_keys(cfg: Config, job: Job) -> list[str]:
    """The config keys (merged-config key paths) whose values decide ``job``'s result."""
    return list(dict.fromkeys(spec(job.stage).keys(cfg, job)))


def pipeline_graph(cfg: Config) -> str:
    """The study's stages as a Mermaid flowchart (the README's picture, kept current by a test): one node per
    stage with jobs in ``cfg``, naming its command and what one job writes (Snakemake's wildcards), and an edge
    from each stage to the stages that read its outputs."""
    jobs = study_jobs(cfg)
    producer = {out.path: job.stage for job in jobs for out in job_outputs(cfg, job)}
    edges: dict[tuple[str, str], None] = {}
    for job in jobs:
        for value in job_inputs(cfg, job).values():
            for path in [value] if isinstance(value, str) else value:
                source = producer.get(path)
                if source is not None and source != job.stage:
                    edges[(source, job.stage)] = None
    lines = ["flowchart LR"]
    for stage in dict.fromkeys(job.stage for job in jobs):  # pipeline order, stages with jobs only
        writes = job_outputs(cfg, pattern_job(stage))[0].path
        lines.append(f'  {stage}["<b>{stage}</b><br/>acerl {spec(stage).subcommand}<br/><i>{writes}</i>"]')
    lines += [f"  {a} --> {b}" for a, b in edges]
    return "\n".join(lines) + "\n"


def _lookup(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _key_values(cfg: Config, keys: Iterable[str]) -> dict[str, Any]:
    """``{key: value}`` in the validated config (defaults included)."""
    data = cfg.model_dump(mode="json")
    return {k: _lookup(data, k) for k in keys}


PARAMS_RECORD = "acerl_params.json"


def params_record_file(root: str | Path, job: Job) -> Path | None:
    """Where a preparation job (``prepare_data``, ``prepare_base``) records its :func:`param_values` beside its
    outputs, so that a trainer reusing them can check they were made for its config; ``None`` for other jobs."""
    if job.stage == "prepare_data":
        return paths.data_file(root, "train").parent / PARAMS_RECORD
    if job.stage == "prepare_base":
        return paths.base_model_dir(root, _req(job.model, "model")) / PARAMS_RECORD
    return None


def record_params(cfg: Config, root: str | Path, job: Job) -> Path | None:
    """Write :func:`param_values` of preparation ``job`` to :func:`params_record_file` (``None``: a job that
    records none)."""
    from acerl.pipeline.io import write_json

    file = params_record_file(root, job)
    return None if file is None else write_json(file, param_values(cfg, job), indent=2, sort_keys=True)


def param_values(cfg: Config, job: Job) -> dict[str, Any]:
    """Snakemake's ``params`` of the job: the stage's code version under ``"version"`` and the stage's record of
    the job (a training job's resolved run spec), else the values of :func:`param_keys`."""
    stage = spec(job.stage)
    recorded = stage.recorded(cfg, job) if stage.recorded else _key_values(cfg, param_keys(cfg, job))
    return {"version": STAGE_VERSIONS[job.stage], **recorded}


# -------------------------------------------------------------------------------------------- commands
def portable_path(path: str | Path, workdir: str | Path = ".") -> str:
    """``path`` relative to ``workdir`` when it lies inside it (as written otherwise).

    Snakemake makes ``--configfile`` paths absolute; inside the commands (and so in every job's recorded
    params) they would tie the results to one checkout's location, and a copy, a colleague's clone or a move
    of the project would rerun every job. Relative paths keep the commands the same wherever the project is.
    """
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path(workdir).resolve()))
    except ValueError:
        return str(path)


VIEW_KEYS = frozenset({"compute.tracker"})
"""Config keys that change how a run is watched, never a result or a file a tool tracks."""

VIEW_CONFIG_ENV = "ACERL_VIEW_CONFIG"
"""Config files (``os.pathsep``-separated) every ``acerl`` command stacks last: the view-only overlays."""


def _leaf_keys(data: Any, prefix: str = "") -> set[str]:
    if not isinstance(data, dict) or not data:
        return {prefix} if prefix else set()
    return set().union(*(_leaf_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
                         for k, v in data.items()))  # fmt: skip


def split_view_files(config_files: Sequence[str | Path]) -> tuple[list[str | Path], list[str | Path]]:
    """``(the jobs' config files, the view-only ones)``: a ``--configfile`` overlay that sets only
    :data:`VIEW_KEYS` (``compute.tracker: tensorboard``) is left out of every job's command, which Snakemake
    records as a param, and reaches the jobs through :data:`VIEW_CONFIG_ENV`. So switching the tracker reruns
    nothing. A file is split off only where stacking it last gives the same config."""
    from acerl.config.loading import load_config, read_yaml

    views = [f for f in config_files[1:] if _leaf_keys(read_yaml(f)) <= VIEW_KEYS]
    jobs = [f for f in config_files if f not in views]
    if views and load_config([*jobs, *views]).model_dump() != load_config(config_files).model_dump():
        return list(config_files), []
    return jobs, views


def config_args(config_files: Sequence[str | Path]) -> list[str]:
    out: list[str] = []
    for f in config_files:
        out += ["--config", str(f)]
    return out


def stage_argv(
    stage: str,
    config_files: Sequence[str | Path],
    root: str | Path = ".",
    *,
    run: Run | None = None,
    model: str | None = None,
    benchmark: str | None = None,
    progress: bool = False,
) -> list[str]:
    """``acerl <subcommand> --config ... --root ... [--model --method --seed] [--benchmark]`` for one stage."""
    stage_spec = spec(stage)
    argv = ["acerl", stage_spec.subcommand, *config_args(config_files), "--root", str(root)]
    if run is not None:
        argv += ["--model", str(run.model), "--method", str(run.method), "--seed", str(run.seed)]
    elif model is not None:
        argv += ["--model", model]
    if benchmark is not None:
        argv += ["--benchmark", benchmark]
    if stage_spec.quiet and not progress:
        argv.append("--no-progress")
    return argv


def stage_command(stage: str, config_files: Sequence[str | Path], root: str | Path = ".", **kw: Any) -> str:
    """:func:`stage_argv` as one shell-quoted string (Snakemake ``shell:``, DVC ``cmd:``)."""
    return shlex.join(stage_argv(stage, config_files, root, **kw))


def job_command(job: Job, config_files: Sequence[str | Path], root: str | Path = ".") -> str:
    """The command of one job of the table."""
    model = job.model if job.run is None else None
    return stage_command(job.stage, config_files, root, run=job.run, model=model, benchmark=job.benchmark)
