# Config loading and validation, and the input functions of all the rules. No pipeline logic lives here;
# the config schema, the run grid and every path live in the acerl package.
from pathlib import Path

from acerl import paths as P
from acerl.config import Run, load_config, spec_json, validate
from acerl.stages import portable_path, stage_command
from acerl.report.catalog import captions as report_captions, describe

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
CFG = validate(config, source=" + ".join(map(str, CONFIG_FILES)))
if load_config(CONFIG_FILES).model_dump() != CFG.model_dump():
    raise WorkflowError(
        "snakemake --config key=value overrides are not passed to the jobs; put them in a file and use "
        "--configfile FILE instead"
    )
ROOT = "."

WILDCARD_RUN = Run("{model}", "{method}", "{seed}")


def run_of(wildcards):
    return Run(wildcards.model, wildcards.method, int(wildcards.seed))


def run_spec(wildcards):
    """The resolved settings of a run: a change re-runs exactly the jobs it affects."""
    return spec_json(CFG.run_spec(run_of(wildcards)))


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


def log_path(rule_name, *parts):
    return str(Path("logs", rule_name, *parts).with_suffix(".log"))


def bench_path(rule_name, *parts):
    return str(P.benchmark_file(ROOT, rule_name, *parts))


RUN_PARTS = ("{model}", "{method}", "seed{seed}")


def policy_input(wildcards):
    """The HF folder a run is evaluated from (the base model folder for method 'base')."""
    return str(P.policy_dir(ROOT, run_of(wildcards)))


def all_passk_files():
    """Pass@k of every (benchmark, run) the reports need (acerl.config.Config.evaluations)."""
    return [str(P.passk_file(ROOT, b, r)) for b, r in CFG.evaluations()]


def all_diagnostics_files():
    return [str(P.diagnostics_file(ROOT, r)) for r in CFG.diagnostic_runs()]


def all_targets():
    return [rules.report.output.tables, rules.report.output.figures]


def report_category(kind):
    """Category of a table / figure in Snakemake's report (acerl.report.catalog), from its file stem."""
    return lambda wildcards: describe(wildcards.name, kind).category


def report_labels(kind):
    return lambda wildcards: {"name": wildcards.name, "kind": kind}
