# train_policy: one (model, method, seed) run. Resumable state lives in runs/.../checkpoints/, which is not a
# rule output, so Snakemake never deletes it when a job fails or is preempted: a retry resumes from it.


rule train_policy:
    input:
        base=str(P.base_model_dir(ROOT, "{model}")),
        train=str(P.data_file(ROOT, "train")),
    output:
        final=directory(str(P.policy_dir(ROOT, WILDCARD_RUN))),
    log:
        log_path("train_policy", *RUN_PARTS),
    benchmark:
        bench_path("train_policy", *RUN_PARTS)
    conda:
        "../envs/acerl.yaml"
    threads: res("train_policy", "threads")
    resources:
        mem_mb=res("train_policy", "mem_mb"),
        runtime=res("train_policy", "runtime"),
        gpus=res("train_policy", "gpus"),
        gres=gres("train_policy"),
        nodes=res("train_policy", "nodes"),
    params:
        cmd=lambda w: stage_command("train_policy", CONFIG_FILES, ROOT, run=run_of(w)),
        spec=run_spec,
    shell:
        "exec {params.cmd} > {log} 2>&1"
