# Config loading and validation, and the input functions of all the rules. No pipeline logic lives here;
# the config schema, the run grid and every path live in the acerl package.
import os
import shlex
from pathlib import Path

from snakemake.logging import logger

from acerl.config import BASE_METHOD, load_config, spec_json, validate
from acerl.pipeline.stages import (
    config_args,
    evaluation_columns,
    job_of,
    local_data_sources,
    main_grid_runs,
    models_used,
    param_values,
    portable_path,
    run_columns,
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


# ---- the stage table (acerl.pipeline.stages) holds every job's files, command and deciding params; the rules spell
# them out, a test checks they agree (tests/workflow/test_stage_table.py), and the same table writes dvc.yaml.
# Every command's `--config FILE ...`: a param, so a job whose list of config files changed reruns.
CONFIG_ARGS = shlex.join(config_args(JOB_CONFIG_FILES))
# training through verl (its parquet files), not the local trainer
VERL = CFG.compute.backend == "verl"


def stage_params(stage):
    """The values of the config keys that decide the job, and the stage's code version (acerl.stage_versions)."""
    return lambda wildcards: spec_json(param_values(CFG, job_of(stage, wildcards)))


def is_tiny(wildcards):
    """The model is the tiny one, built and SFT'd by prepare_base (models.<model>.source: tiny)."""
    return CFG.models[wildcards.model].source == "tiny"


def local_model_folder(wildcards):
    """A hub model's local folder (models.<model>.path), if it has one."""
    model = CFG.models[wildcards.model]
    return Path(model.path).as_posix() if model.source != "tiny" and model.path else []


def evaluates_base(wildcards):
    """The evaluated run is a base model itself (method "base"), not a trained policy."""
    return wildcards.method == BASE_METHOD


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
