# train_policy: acerl train --model {model} --method {method} --seed {seed} --no-progress
#   reads:   base     models/base/{model}
#            train    data/train.jsonl
#   writes:  final    runs/{model}/{method}/seed{seed}/final
#            live     runs/{model}/{method}/seed{seed}/dvclive
#   appends: metrics  runs/{model}/{method}/seed{seed}/metrics.jsonl (DVC output only)
# One (model, method, seed) run. Resumable state lives in runs/.../checkpoints/, which is not a
# rule output, so Snakemake never deletes it when a job fails or is preempted: a retry resumes from it. The
# per-step metrics.jsonl is a DVC output (persist) but not a Snakemake one, for the same reason.


rule train_policy:
    input:
        unpack(stage_input("train_policy")),
    output:
        **stage_output("train_policy"),
    log:
        log_path("train_policy"),
    benchmark:
        bench_path("train_policy")
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
        cmd=stage_cmd("train_policy"),
        decides=stage_params("train_policy"),
    shell:
        "exec {params.cmd} > {log} 2>&1"
