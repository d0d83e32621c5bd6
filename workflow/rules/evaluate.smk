# sample -> grade -> passk for every (benchmark, run), the base models included (method "base").


rule sample:
    input:
        policy=policy_input,
        problems=str(P.data_file(ROOT, "{benchmark}")),
    output:
        generations=str(P.generations_file(ROOT, "{benchmark}", WILDCARD_RUN)),
    log:
        log_path("sample", "{benchmark}", *RUN_PARTS),
    benchmark:
        bench_path("sample", "{benchmark}", *RUN_PARTS)
    conda:
        "../envs/acerl.yaml"
    threads: res("sample", "threads")
    resources:
        mem_mb=res("sample", "mem_mb"),
        runtime=res("sample", "runtime"),
        gpus=res("sample", "gpus"),
        gres=gres("sample"),
    params:
        cmd=lambda w: stage_command(
            "sample", CONFIG_FILES, ROOT, run=run_of(w), benchmark=w.benchmark
        ),
        evaluation=spec_json(CFG.evaluation.model_dump(mode="json", exclude={"ks"})),
    shell:
        "{params.cmd} > {log} 2>&1"


rule grade:
    input:
        generations=rules.sample.output.generations,
    output:
        scored=str(P.scored_file(ROOT, "{benchmark}", WILDCARD_RUN)),
    log:
        log_path("grade", "{benchmark}", *RUN_PARTS),
    benchmark:
        bench_path("grade", "{benchmark}", *RUN_PARTS)
    conda:
        "../envs/acerl.yaml"
    threads: res("grade", "threads")
    resources:
        mem_mb=res("grade", "mem_mb"),
        runtime=res("grade", "runtime"),
    params:
        cmd=lambda w: stage_command(
            "grade", CONFIG_FILES, ROOT, run=run_of(w), benchmark=w.benchmark
        ),
        grading=spec_json(CFG.grading.model_dump(mode="json")),
    shell:
        "{params.cmd} > {log} 2>&1"


rule passk:
    input:
        scored=rules.grade.output.scored,
    output:
        metrics=str(P.passk_file(ROOT, "{benchmark}", WILDCARD_RUN)),
    log:
        log_path("passk", "{benchmark}", *RUN_PARTS),
    benchmark:
        bench_path("passk", "{benchmark}", *RUN_PARTS)
    conda:
        "../envs/acerl.yaml"
    threads: 1
    resources:
        mem_mb=res("passk", "mem_mb"),
        runtime=res("passk", "runtime"),
    params:
        cmd=lambda w: stage_command(
            "passk", CONFIG_FILES, ROOT, run=run_of(w), benchmark=w.benchmark
        ),
        ks=CFG.evaluation.ks,
    shell:
        "{params.cmd} > {log} 2>&1"
