# diagnose: acerl diagnose --model {model} --method {method} --seed {seed} --no-progress
#   reads:   final        runs/{model}/{method}/seed{seed}/final
#            reference    models/base/{model}
#            heldout      data/heldout.jsonl
#   writes:  diagnostics  diagnostics/{model}/{method}/seed{seed}.json
# OEF, overconfidence magnitude and entropy at the diagnostic checkpoints a run saved while training.


rule diagnose:
    input:
        unpack(stage_input("diagnose")),
    output:
        **stage_output("diagnose"),
    log:
        log_path("diagnose"),
    benchmark:
        bench_path("diagnose")
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
        cmd=stage_cmd("diagnose"),
        decides=stage_params("diagnose"),
    shell:
        "{params.cmd} > {log} 2>&1"
