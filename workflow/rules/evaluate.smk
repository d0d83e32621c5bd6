# sample -> grade -> passk for every (benchmark, run), the base models included (method "base").


rule sample:
    input:
        # the run's final policy; for method "base" the base model itself
        policy=branch(
            evaluates_base,
            then="models/base/{model}",
            otherwise="runs/{model}/{method}/seed{seed}/final",
        ),
        problems="data/{benchmark}.jsonl",
    output:
        generations="generations/{benchmark}/{model}/{method}/seed{seed}.jsonl.gz",
    log:
        "logs/sample/{benchmark}/{model}/{method}/seed{seed}.log",
    benchmark:
        "benchmarks/logs/sample/{benchmark}/{model}/{method}/seed{seed}.tsv"
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
        configs=CONFIG_ARGS,
        decides=stage_params("sample"),
    shell:
        "acerl sample {params.configs} --root ."
        " --model {wildcards.model:q} --method {wildcards.method:q} --seed {wildcards.seed}"
        " --benchmark {wildcards.benchmark:q} --no-progress > {log} 2>&1"


rule grade:
    input:
        generations="generations/{benchmark}/{model}/{method}/seed{seed}.jsonl.gz",
    output:
        scored="scored/{benchmark}/{model}/{method}/seed{seed}.parquet",
    log:
        "logs/grade/{benchmark}/{model}/{method}/seed{seed}.log",
    benchmark:
        "benchmarks/logs/grade/{benchmark}/{model}/{method}/seed{seed}.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: res("grade", "threads")
    resources:
        mem_mb=res("grade", "mem_mb"),
        runtime=res("grade", "runtime"),
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("grade"),
    shell:
        "acerl grade {params.configs} --root ."
        " --model {wildcards.model:q} --method {wildcards.method:q} --seed {wildcards.seed}"
        " --benchmark {wildcards.benchmark:q} > {log} 2>&1"


rule passk:
    input:
        scored="scored/{benchmark}/{model}/{method}/seed{seed}.parquet",
    output:
        metrics="metrics/{benchmark}/{model}/{method}/seed{seed}.json",
        curve="metrics/{benchmark}/{model}/{method}/seed{seed}.curve.tsv",
    log:
        "logs/passk/{benchmark}/{model}/{method}/seed{seed}.log",
    benchmark:
        "benchmarks/logs/passk/{benchmark}/{model}/{method}/seed{seed}.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("passk", "mem_mb"),
        runtime=res("passk", "runtime"),
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("passk"),
    shell:
        "acerl passk {params.configs} --root ."
        " --model {wildcards.model:q} --method {wildcards.method:q} --seed {wildcards.seed}"
        " --benchmark {wildcards.benchmark:q} > {log} 2>&1"
