# OEF, overconfidence magnitude and entropy at the diagnostic checkpoints a run saved while training.


rule diagnose:
    input:
        final="runs/{model}/{method}/seed{seed}/final",
        reference="models/base/{model}",
        heldout="data/heldout.jsonl",
    output:
        diagnostics="diagnostics/{model}/{method}/seed{seed}.json",
    log:
        "logs/diagnose/{model}/{method}/seed{seed}.log",
    benchmark:
        "benchmarks/logs/diagnose/{model}/{method}/seed{seed}.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: res("diagnose", "threads")
    resources:
        mem_mb=res("diagnose", "mem_mb"),
        runtime=res("diagnose", "runtime"),
        gpus=res("diagnose", "gpus"),
        gres=gres("diagnose"),
        tasks_per_gpu=0,  # one task, not one per GPU (the plugin's default); docs/cluster.md, "GPUs"
    params:
        configs=CONFIG_ARGS,
        decides=stage_params("diagnose"),
    shell:
        "acerl diagnose {params.configs} --root ."
        " --model {wildcards.model:q} --method {wildcards.method:q} --seed {wildcards.seed}"
        " --no-progress > {log} 2>&1"
