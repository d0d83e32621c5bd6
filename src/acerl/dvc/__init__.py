"""The pipeline as DVC stages: ``dvc.yaml`` is generated from the config, never written by hand.

Modules: :mod:`acerl.dvc.render` (the stages, plots and params of ``dvc.yaml``), :mod:`acerl.dvc.sync` (a
pulled study made current for Snakemake), :mod:`acerl.dvc.cache` (the cache files re-hashed),
:mod:`acerl.dvc.cli` (``acerl dvc``).

``acerl dvc write`` renders :func:`render_dvc_yaml` for ``config/config.yaml`` into ``dvc.yaml`` (a
test checks the committed file is current). Every stage is one job of the stage table :mod:`acerl.pipeline.stages`, which
the Snakemake rules read too: the same command, inputs (``deps``), outputs (``outs``, ``metrics``) and deciding
config keys (``params``, read from the config files themselves, so ``dvc exp run -S
'config/config.yaml:methods.ace_dapo.estimator.alpha=0.5'`` changes what the command reads), plus the stage's
code version from ``src/acerl/stage_versions.py`` (:mod:`acerl.stage_versions`).

One stage per job, named ``<snakemake rule>-<wildcards>`` (DVC allows only letters, digits, ``_`` and ``-``):

    prepare_data                         data/<split>.jsonl
    prepare_base-<model>                 models/base/<model>/
    prepare_verl_data-<model>            data/verl/<model>/{train,val}.parquet (compute.backend: verl)
    train_policy-<model>-<method>-seed<s>   runs/<model>/<method>/seed<s>/{final/, metrics.jsonl, dvclive/}
    sample|grade|passk-<benchmark>-<model>-<method>-seed<s>   generations/, scored/, metrics/ (Pass@k: metrics
                                         and its curve, drawn by ``dvc plots show``)
    diagnose-<model>-<method>-seed<s>    diagnostics/<run>.json
    report                               results/{tables/, figures/, report.md, compute.md}

Not DVC outputs: resumable checkpoints and diagnostic snapshots (``paths.checkpoints_dir``, ``paths.diag_dir``).
DVC deletes only declared outputs before it reruns a stage, so they survive and a rerun resumes; and a clone
needs nothing of them (an output with ``push: false`` would make every clone's ``dvc pull`` fail and its
``dvc status`` report "not in cache" forever). ``metrics.jsonl`` is ``persist: true`` for the same reason: on
resume the trainer keeps the steps already logged. See docs/sharing.md.

Params: a key is listed for a config file only where that file sets it (DVC rejects a listed key missing from
its file); a key no file sets keeps its schema default, and adding it to a file needs ``acerl dvc write``
again (``check`` says so).
"""

from __future__ import annotations

from acerl.dvc.cache import DamagedObject, damaged_cache_objects
from acerl.dvc.render import (
    DEFAULT_CONFIG_FILES,
    DVC_YAML,
    TRAINING_PLOT_METRICS,
    Stage,
    build_stages,
    check_dvc_yaml,
    config_flags,
    params_by_file,
    render_dvc_yaml,
    stage_name,
    write_dvc_yaml,
)
from acerl.dvc.sync import (
    dvc_yaml_config_files,
    missing_outputs,
    snakemake_touch_argv,
    sync_config_files,
)

__all__ = [
    "DEFAULT_CONFIG_FILES",
    "DVC_YAML",
    "DamagedObject",
    "Stage",
    "TRAINING_PLOT_METRICS",
    "build_stages",
    "check_dvc_yaml",
    "config_flags",
    "damaged_cache_objects",
    "dvc_yaml_config_files",
    "missing_outputs",
    "params_by_file",
    "render_dvc_yaml",
    "snakemake_touch_argv",
    "stage_name",
    "sync_config_files",
    "write_dvc_yaml",
]
