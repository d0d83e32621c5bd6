# prepare_data: training prompts, evaluation benchmarks and the held-out diagnostic set.


rule prepare_data:
    output:
        splits=[str(P.data_file(ROOT, s)) for s in CFG.data_splits],
    log:
        log_path("prepare_data", "data"),
    benchmark:
        bench_path("prepare_data", "data")
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("prepare_data", "mem_mb"),
        runtime=res("prepare_data", "runtime"),
    params:
        cmd=stage_command("prepare_data", CONFIG_FILES, ROOT),
        data=spec_json(CFG.data.model_dump(mode="json")),
    shell:
        "{params.cmd} > {log} 2>&1"
