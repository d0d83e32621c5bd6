# The data: training prompts, evaluation benchmarks and the held-out diagnostic set (synthetic, or the real
# datasets of data.real), and verl's parquet files of each trained model (compute.backend: verl).


rule prepare_data:
    input:
        sources=local_data_sources(CFG),  # data.real.*.path: local dataset files (none for synthetic data)
    output:
        splits=expand("data/{split}.jsonl", split=CFG.data_splits),
        real_data_report=branch(
            CFG.data.kind == "real", then="data/real_data_report.json"
        ),
    log:
        "logs/prepare_data/data.log",
    benchmark:
        "benchmarks/logs/prepare_data/data.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("prepare_data", "mem_mb"),
        runtime=res("prepare_data", "runtime"),
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("prepare_data"),
    shell:
        "acerl prepare-data {params.configs} --root . > {log} 2>&1"


rule prepare_verl_data:
    input:
        train="data/train.jsonl",
        benchmarks=expand("data/{benchmark}.jsonl", benchmark=CFG.benchmark_names),
    output:
        train="data/verl/{model}/train.parquet",
        val="data/verl/{model}/val.parquet",
    log:
        "logs/prepare_verl_data/{model}.log",
    benchmark:
        "benchmarks/logs/prepare_verl_data/{model}.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("prepare_verl_data", "mem_mb"),
        runtime=res("prepare_verl_data", "runtime"),
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("prepare_verl_data"),
    shell:
        "acerl prepare-verl-data {params.configs} --root . --model {wildcards.model:q} > {log} 2>&1"
