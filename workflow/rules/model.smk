# prepare_base: acerl prepare-base --model {model}
#   reads:   sft         data/sft.jsonl (per model)
#            benchmarks  data/synth_easy.jsonl, data/synth_hard.jsonl (per model)
#   writes:  model       models/base/{model}
# A base model folder per model (the tiny model is built and SFT'd here; hub models linked).


rule prepare_base:
    input:
        unpack(stage_input("prepare_base")),
    output:
        **stage_output("prepare_base"),
    log:
        log_path("prepare_base"),
    benchmark:
        bench_path("prepare_base")
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
        cmd=stage_cmd("prepare_base"),
        decides=stage_params("prepare_base"),
    shell:
        "{params.cmd} > {log} 2>&1"
