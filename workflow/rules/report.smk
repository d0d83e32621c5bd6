# The paper's tables (LaTeX + Markdown) and figures (PDF + PNG) from every run's results, and the compute
# accounting from the benchmark TSVs. `snakemake --report report.html --configfile <the run's config>` shows
# every table (its HTML rendering, readable in the page) and figure by category, and the summary page; report()
# adds that presentation.
# Inputs: one Pass@k file per evaluated (benchmark, run), one diagnostics file per diagnosed run, the final policy
# of each main-grid run (expand with zip: the lists come from the config), whose metrics.jsonl beside it the
# training-dynamics figure reads (a log resumes append to, so no Snakemake output; final/ is written after it),
# and the paper's published numbers for the "ours vs paper" table (report.compare_to_paper).
# update(): Snakemake neither deletes the previous report before the job nor after a failure (a bad result file):
# it keeps a copy and puts it back, so a failed report leaves the last good one in place.
# Snakemake's HTML report (workflow/report/workflow.rst) names the study its results come from, not the config
# given now: `snakemake --report` without the study's --configfile would title it with the default's name.
config["study_name"] = reported_study_name(ROOT) or CFG.name


rule report:
    input:
        passk=expand(
            "metrics/{benchmark}/{model}/{method}/seed{seed}.json",
            zip,
            **evaluation_columns(CFG),
        ),
        diagnostics=expand(
            "diagnostics/{model}/{method}/seed{seed}.json",
            zip,
            **run_columns(CFG.diagnostic_runs()),
        ),
        training=expand(
            "runs/{model}/{method}/seed{seed}/final",
            zip,
            **run_columns(main_grid_runs(CFG)),
        ),
        paper=branch(CFG.report.compare_to_paper, then="config/paper_results"),
    output:
        tables=report(
            update(directory("results/tables")),
            patterns=["{name}.html"],
            caption="../report/item.rst",
            category=report_category("table"),
            labels=report_labels("table"),
        ),
        figures=report(
            update(directory("results/figures")),
            patterns=["{name}.png"],
            caption="../report/item.rst",
            category=report_category("figure"),
            labels=report_labels("figure"),
        ),
        compute=report(
            update("results/compute.md"),
            caption="../report/compute.rst",
            category="Compute",
            labels={"name": "compute.md", "kind": "compute"},
        ),
        summary=update("results/report.md"),
        page=report(
            update("results/report.html"),
            caption="../report/summary.rst",
            category="Summary",
            labels={"name": "report.html", "kind": "summary"},
        ),
        headline=update("results/headline.txt"),
    log:
        "logs/report/report.log",
    benchmark:
        "benchmarks/logs/report/report.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("report", "mem_mb"),
        runtime=res("report", "runtime"),
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("report"),
        captions=report_captions(CFG),  # text of Snakemake's HTML report only (workflow/report/item.rst)
    shell:
        "acerl report {params.configs} --root . > {log} 2>&1"
