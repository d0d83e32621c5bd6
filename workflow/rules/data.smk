# prepare_data: acerl prepare-data
#   reads:   nothing
#   writes:  train       data/train.jsonl
#            sft         data/sft.jsonl
#            synth_easy  data/synth_easy.jsonl
#            synth_hard  data/synth_hard.jsonl
#            heldout     data/heldout.jsonl
# prepare_verl_data: acerl prepare-verl-data --model {model}
#   reads:   train       data/train.jsonl
#            benchmarks  data/synth_easy.jsonl, data/synth_hard.jsonl
#   writes:  train       data/verl/{model}/train.parquet
#            val         data/verl/{model}/val.parquet
# Inputs, outputs, params: the stage table (acerl.pipeline.stages).


rule prepare_data:
    input:
        unpack(stage_input("prepare_data")),
    output:
        **stage_output("prepare_data"),
    log:
        log_path("prepare_data"),
    benchmark:
        bench_path("prepare_data")
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("prepare_data", "mem_mb"),
        runtime=res("prepare_data", "runtime"),
    params:
        cmd=stage_cmd("prepare_data"),
        decides=stage_params("prepare_data"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule prepare_verl_data:
    input:
        unpack(stage_input("prepare_verl_data")),
    output:
        **stage_output("prepare_verl_data"),
    log:
        log_path("prepare_verl_data"),
    benchmark:
        bench_path("prepare_verl_data")
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("prepare_verl_data", "mem_mb"),
        runtime=res("prepare_verl_data", "runtime"),
    params:
        cmd=stage_cmd("prepare_verl_data"),
        decides=stage_params("prepare_verl_data"),
    shell:
        "{params.cmd} > {log} 2>&1"
