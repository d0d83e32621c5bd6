# A base model folder per model: the tiny model is built and SFT'd here; a hub model is linked.


rule prepare_base:
    input:
        # What a base model reads depends on its config, so these are input functions: the tiny model
        # (models.<model>.source: tiny) reads the SFT data and the benchmarks it is scored on; a hub model reads
        # its local folder (models.<model>.path) if it has one, else nothing.
        sft=branch(is_tiny, then="data/sft.jsonl"),
        benchmarks=branch(
            is_tiny,
            then=expand("data/{benchmark}.jsonl", benchmark=CFG.evaluation.benchmarks),
        ),
        local=local_model_folder,
    output:
        model=directory("models/base/{model}"),
    log:
        "logs/prepare_base/{model}.log",
    benchmark:
        "benchmarks/logs/prepare_base/{model}.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: res("prepare_base", "threads")
    resources:
        mem_mb=res("prepare_base", "mem_mb"),
        runtime=res("prepare_base", "runtime"),
        gpus=res("prepare_base", "gpus"),
        gres=gres("prepare_base"),
        tasks_per_gpu=0,  # one task, not one per GPU (the plugin's default); docs/cluster.md, "GPUs"
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("prepare_base"),
    shell:
        "acerl prepare-base {params.configs} --root . --model {wildcards.model:q} > {log} 2>&1"
