# report: the paper's tables (LaTeX + Markdown) and figures (PDF + PNG) from every run's results, and the compute
# accounting from the benchmark TSVs. `snakemake --report report.html` shows every table and figure by category.


rule report:
    input:
        passk=all_passk_files(),
        diagnostics=all_diagnostics_files(),
    output:
        tables=report(
            directory(str(P.tables_dir(ROOT))),
            patterns=["{name}.md"],
            caption="../report/item.rst",
            category=report_category("table"),
            labels=report_labels("table"),
        ),
        figures=report(
            directory(str(P.figures_dir(ROOT))),
            patterns=["{name}.png"],
            caption="../report/item.rst",
            category=report_category("figure"),
            labels=report_labels("figure"),
        ),
        compute=report(
            str(P.compute_file(ROOT)),
            caption="../report/compute.rst",
            category="Compute",
            labels={"name": "compute.md", "kind": "compute"},
        ),
        summary=report(
            str(P.report_file(ROOT)),
            caption="../report/summary.rst",
            category="Summary",
            labels={"name": "report.md", "kind": "summary"},
        ),
    log:
        log_path("report", "report"),
    benchmark:
        bench_path("report", "report")
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("report", "mem_mb"),
        runtime=res("report", "runtime"),
    params:
        cmd=stage_command("report", CONFIG_FILES, ROOT),
        report=spec_json(CFG.report.model_dump(mode="json")),
        captions=report_captions(CFG),
        resources=spec_json(
            CFG.compute.model_dump(
                mode="json", include={"resources", "model_resources"}
            )
        ),
    shell:
        "{params.cmd} > {log} 2>&1"
