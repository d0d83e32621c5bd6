# prepare_base: a base model folder per model (the tiny model is built and SFT'd here; hub models downloaded).


rule prepare_base:
    input:
        train=str(P.data_file(ROOT, "train")),
    output:
        model=directory(str(P.base_model_dir(ROOT, "{model}"))),
    log:
        log_path("prepare_base", "{model}"),
    benchmark:
        bench_path("prepare_base", "{model}")
    conda:
        "../envs/acerl.yaml"
    threads: res("prepare_base", "threads")
    resources:
        mem_mb=res("prepare_base", "mem_mb"),
        runtime=res("prepare_base", "runtime"),
        gpus=res("prepare_base", "gpus"),
        gres=gres("prepare_base"),
    params:
        cmd=lambda w: stage_command("prepare_base", CONFIG_FILES, ROOT, model=w.model),
        base=lambda w: spec_json(
            CFG.models[w.model].model_dump(mode="json", exclude={"train", "display"})
        ),
    shell:
        "{params.cmd} > {log} 2>&1"
