# diagnose: OEF, overconfidence magnitude and entropy at the diagnostic checkpoints a run saved while training.


rule diagnose:
    input:
        final=str(P.policy_dir(ROOT, WILDCARD_RUN)),
        reference=str(P.base_model_dir(ROOT, "{model}")),
        heldout=str(P.data_file(ROOT, "heldout")),
    output:
        diagnostics=str(P.diagnostics_file(ROOT, WILDCARD_RUN)),
    log:
        log_path("diagnose", *RUN_PARTS),
    benchmark:
        bench_path("diagnose", *RUN_PARTS)
    conda:
        "../envs/acerl.yaml"
    threads: res("diagnose", "threads")
    resources:
        mem_mb=res("diagnose", "mem_mb"),
        runtime=res("diagnose", "runtime"),
        gpus=res("diagnose", "gpus"),
        gres=gres("diagnose"),
    params:
        cmd=lambda w: stage_command("diagnose", CONFIG_FILES, ROOT, run=run_of(w)),
        diagnostics=(
            spec_json(CFG.study.diagnostics.model_dump(mode="json"))
            if CFG.study.diagnostics
            else ""
        ),
    shell:
        "{params.cmd} > {log} 2>&1"
