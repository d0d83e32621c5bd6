# Config loading and validation, and the input functions of all the rules. No pipeline logic lives here;
# the config schema, the run grid and every path live in the acerl package.
import os

from snakemake.logging import logger

from acerl.config import load_config, spec_json, validate
from acerl.pipeline.stages import (
    job_benchmark_file,
    job_command,
    job_inputs,
    job_log_file,
    job_of,
    job_outputs,
    models_used,
    param_values,
    pattern_job,
    portable_path,
    split_view_files,
    VIEW_CONFIG_ENV,
)
from acerl.report.catalog import captions as report_captions, describe
from acerl.report.inputs import reported_study_name

# The config files Snakemake merged (the workflow default first, then --configfile ones, which win), passed
# to every `acerl` call so rules and CLI see one config; relative to the project (Snakemake makes them absolute),
# so the jobs' recorded params do not change when the project is copied, cloned or moved.
CONFIG_FILES = list(
    dict.fromkeys(
        [
            "config/config.yaml",
            *map(portable_path, workflow.config_settings.configfiles),
        ]
    )
)
# Snakemake's banner ("Config file(s): ...") lists the --configfile files before config/config.yaml; this line
# gives the order in which they are merged.
logger.info(
    "acerl: config files, later ones win: " + " < ".join(map(str, CONFIG_FILES))
)
CONFIG_REFUSED = (
    "snakemake --config key=value overrides are not passed to the jobs; put them in a file and use "
    "--configfile FILE instead"
)
if workflow.config_settings.config:
    raise WorkflowError(CONFIG_REFUSED)
CFG = validate(config, source=" + ".join(map(str, CONFIG_FILES)))
if load_config(CONFIG_FILES).model_dump() != CFG.model_dump():
    raise WorkflowError(CONFIG_REFUSED)
# A --configfile that sets only the tracker stays out of the jobs' commands (their recorded params), so switching
# it reruns nothing; the jobs stack it through the environment (acerl.pipeline.stages.split_view_files).
JOB_CONFIG_FILES, VIEW_CONFIG_FILES = split_view_files(CONFIG_FILES)
if VIEW_CONFIG_FILES:
    os.environ[VIEW_CONFIG_ENV] = os.pathsep.join(map(str, VIEW_CONFIG_FILES))
ROOT = "."


def res(rule_name, attr):
    """Resources of a rule from the config (compute.resources / compute.model_resources)."""

    def get(wildcards):
        model = getattr(wildcards, "model", None)
        return getattr(CFG.resources(rule_name, model), attr)

    return get


def gres(rule_name):
    """SLURM generic resources for the rule's GPUs ('gpu:N' per node; '' when none: the plugin then omits it)."""

    def get(wildcards):
        n = CFG.resources(rule_name, getattr(wildcards, "model", None)).gpus
        return f"gpu:{n}" if n else ""

    return get


def log_path(stage):
    """The rule's log file pattern (the stage table's, from acerl.pipeline.paths)."""
    return str(job_log_file(ROOT, pattern_job(stage)))


def bench_path(stage):
    """The rule's benchmark TSV pattern, which the report's compute accounting reads for every job."""
    return str(job_benchmark_file(ROOT, pattern_job(stage)))


# ---- the stage table (acerl.pipeline.stages): every rule's input, output and params; the same table writes dvc.yaml
def stage_input(stage):
    """The job's named inputs (use with ``unpack``)."""
    return lambda wildcards: job_inputs(CFG, job_of(stage, wildcards))


def stage_output(stage):
    """The rule's named output patterns; a ``persist`` output (a log the job appends to across resumes) is left
    out, as Snakemake deletes the outputs of a failed job."""
    return {
        o.name: directory(o.path) if o.directory else o.path
        for o in job_outputs(CFG, pattern_job(stage))
        if not o.persist
    }


def stage_cmd(stage):
    return lambda wildcards: job_command(
        job_of(stage, wildcards), JOB_CONFIG_FILES, ROOT
    )


def stage_params(stage):
    """The values of the config keys that decide the job, and the stage's code version (acerl.stage_versions)."""
    return lambda wildcards: spec_json(param_values(CFG, job_of(stage, wildcards)))


def all_targets():
    # The report and every base model. A base model is a target, not only an intermediate: Snakemake deletes a
    # job's output before the job, so an interrupted rebuild (Ctrl-C in prepare_base) leaves it missing while the
    # results made from it exist; without it here the next run would have nothing to do.
    return [
        rules.report.output.tables,
        rules.report.output.figures,
        *expand(rules.prepare_base.output.model, model=models_used(CFG)),
    ]


def report_category(kind):
    """Category of a table / figure in Snakemake's report (acerl.report.catalog), from its file stem."""
    return lambda wildcards: describe(wildcards.name, kind).category


def report_labels(kind):
    return lambda wildcards: {"name": wildcards.name, "kind": kind}
