# report: the paper's tables (LaTeX + Markdown) and figures (PDF + PNG) from every run's results.


rule report:
    input:
        passk=all_passk_files(),
        diagnostics=all_diagnostics_files(),
    output:
        tables=directory(str(P.tables_dir(ROOT))),
        figures=directory(str(P.figures_dir(ROOT))),
        summary=str(P.report_file(ROOT)),
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
    shell:
        "{params.cmd} > {log} 2>&1"
