# sample: acerl sample --model {model} --method {method} --seed {seed} --benchmark {benchmark} --no-progress
#   reads:   policy       runs/{model}/{method}/seed{seed}/final
#            problems     data/{benchmark}.jsonl
#   writes:  generations  generations/{benchmark}/{model}/{method}/seed{seed}.jsonl.gz
# grade: acerl grade --model {model} --method {method} --seed {seed} --benchmark {benchmark}
#   reads:   generations  generations/{benchmark}/{model}/{method}/seed{seed}.jsonl.gz
#   writes:  scored       scored/{benchmark}/{model}/{method}/seed{seed}.parquet
# passk: acerl passk --model {model} --method {method} --seed {seed} --benchmark {benchmark}
#   reads:   scored   scored/{benchmark}/{model}/{method}/seed{seed}.parquet
#   writes:  metrics  metrics/{benchmark}/{model}/{method}/seed{seed}.json
#            curve    metrics/{benchmark}/{model}/{method}/seed{seed}.curve.tsv
# sample -> grade -> passk for every (benchmark, run), the base models included (method "base").


rule sample:
    input:
        unpack(stage_input("sample")),
    output:
        **stage_output("sample"),
    log:
        log_path("sample"),
    benchmark:
        bench_path("sample")
    conda:
        "../envs/acerl.yaml"
    threads: res("sample", "threads")
    resources:
        mem_mb=res("sample", "mem_mb"),
        runtime=res("sample", "runtime"),
        gpus=res("sample", "gpus"),
        gres=gres("sample"),
        tasks_per_gpu=0,  # one task, not one per GPU (the plugin's default); docs/cluster.md, "GPUs"
    params:
        cmd=stage_cmd("sample"),
        decides=stage_params("sample"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule grade:
    input:
        unpack(stage_input("grade")),
    output:
        **stage_output("grade"),
    log:
        log_path("grade"),
    benchmark:
        bench_path("grade")
    conda:
        "../envs/acerl.yaml"
    threads: res("grade", "threads")
    resources:
        mem_mb=res("grade", "mem_mb"),
        runtime=res("grade", "runtime"),
    params:
        cmd=stage_cmd("grade"),
        decides=stage_params("grade"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule passk:
    input:
        unpack(stage_input("passk")),
    output:
        **stage_output("passk"),
    log:
        log_path("passk"),
    benchmark:
        bench_path("passk")
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("passk", "mem_mb"),
        runtime=res("passk", "runtime"),
    params:
        cmd=stage_cmd("passk"),
        decides=stage_params("passk"),
    shell:
        "{params.cmd} > {log} 2>&1"
