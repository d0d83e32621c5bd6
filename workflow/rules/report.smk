# report: acerl report
#   reads:   passk        every metrics/{benchmark}/{model}/{method}/seed{seed}.json
#            diagnostics  every diagnostics/{model}/{method}/seed{seed}.json
#            training     every runs/{model}/{method}/seed{seed}/final
#            paper        config/paper_results
#   writes:  tables       results/tables
#            figures      results/figures
#            compute      results/compute.md
#            summary      results/report.md
#            page         results/report.html
#            headline     results/headline.txt
# The paper's tables (LaTeX + Markdown) and figures (PDF + PNG) from every run's results, and the compute
# accounting from the benchmark TSVs. `snakemake --report report.html --configfile <the run's config>` shows
# every table (its HTML rendering, readable in the page) and figure by category, and the summary page.
# Inputs, outputs and params: the stage table (acerl.pipeline.stages); report() adds the HTML report's presentation.
# update(): Snakemake neither deletes the previous report before the job nor after a failure (a bad result file):
# it keeps a copy and puts it back, so a failed report leaves the last good one in place.
REPORT_OUT = stage_output("report")
# Snakemake's HTML report (workflow/report/workflow.rst) names the study its results come from, not the config
# given now: `snakemake --report` without the study's --configfile would title it with the default's name.
config["study_name"] = reported_study_name(ROOT) or CFG.name


rule report:
    input:
        unpack(stage_input("report")),
    output:
        tables=report(
            update(REPORT_OUT["tables"]),
            patterns=["{name}.html"],
            caption="../report/item.rst",
            category=report_category("table"),
            labels=report_labels("table"),
        ),
        figures=report(
            update(REPORT_OUT["figures"]),
            patterns=["{name}.png"],
            caption="../report/item.rst",
            category=report_category("figure"),
            labels=report_labels("figure"),
        ),
        compute=report(
            update(REPORT_OUT["compute"]),
            caption="../report/compute.rst",
            category="Compute",
            labels={"name": "compute.md", "kind": "compute"},
        ),
        summary=update(REPORT_OUT["summary"]),
        page=report(
            update(REPORT_OUT["page"]),
            caption="../report/summary.rst",
            category="Summary",
            labels={"name": "report.html", "kind": "summary"},
        ),
        headline=update(REPORT_OUT["headline"]),
    log:
        log_path("report"),
    benchmark:
        bench_path("report")
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("report", "mem_mb"),
        runtime=res("report", "runtime"),
    params:
        cmd=stage_cmd("report"),
        decides=stage_params("report"),
        captions=report_captions(CFG),  # text of Snakemake's HTML report only (workflow/report/item.rst)
    shell:
        "{params.cmd} > {log} 2>&1"
