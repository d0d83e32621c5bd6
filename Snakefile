# The ACE study as a Snakemake workflow: a table of contents.
#   snakemake -c2 all                                              embedded default (CPU, minutes)
#   snakemake --profile slurm --configfile=config/paper.yaml all   the paper's grid on a SLURM cluster, once
#       scripts/install_slurm_profile.sh installed the site profile (or: make paper, which checks it first)
# Every rule shows its path patterns and the `acerl` command it runs; tests/workflow/test_stage_table.py holds them to
# the stage table (acerl.pipeline.stages), which dvc.yaml is written from. acerl.config validates the config.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


wildcard_constraints:
    model=r"[^/]+",
    method=r"[^/]+",
    seed=r"\d+",
    benchmark=r"[^/]+",


include: "workflow/rules/data.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/diagnose.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(),
