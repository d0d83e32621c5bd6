# One (model, method, seed) training run. Resumable state lives in runs/.../checkpoints/, which is not a rule
# output, so Snakemake never deletes it when a job fails or is preempted: a retry resumes from it. The per-step
# log runs/{model}/{method}/seed{seed}/metrics.jsonl, which a resumed run appends to, is a DVC output (persist)
# but not a Snakemake one, for the same reason. With compute.backend: verl the run reads verl's parquet files
# (rule prepare_verl_data); with the local trainer it writes dvclive/, rebuilt from metrics.jsonl at every start.


rule train_policy:
    input:
        base="models/base/{model}",
        train="data/train.jsonl",
        verl_train=branch(VERL, then="data/verl/{model}/train.parquet"),
        verl_val=branch(VERL, then="data/verl/{model}/val.parquet"),
    output:
        final=directory("runs/{model}/{method}/seed{seed}/final"),
        live=branch(
            not VERL, then=directory("runs/{model}/{method}/seed{seed}/dvclive")
        ),
    log:
        "logs/train_policy/{model}/{method}/seed{seed}.log",
    benchmark:
        "benchmarks/logs/train_policy/{model}/{method}/seed{seed}.tsv"
    conda:
        "../envs/acerl.yaml"
    threads: res("train_policy", "threads")
    resources:
        mem_mb=res("train_policy", "mem_mb"),
        runtime=res("train_policy", "runtime"),
        gpus=res("train_policy", "gpus"),
        gres=gres("train_policy"),
        tasks_per_gpu=0,  # one task, not one per GPU (the plugin's default); docs/cluster.md, "GPUs"
        nodes=res("train_policy", "nodes"),
    params:
        configs=CONFIG_ARGS,
        # the run's resolved settings (run_spec.json), the grader's time limit, the backend, the code version
        decides=stage_params("train_policy"),
    shell:
        "exec acerl train {params.configs} --root ."
        " --model {wildcards.model:q} --method {wildcards.method:q} --seed {wildcards.seed}"
        " --no-progress > {log} 2>&1"
