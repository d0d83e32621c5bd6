"""Test infrastructure: the CI-scale study trained through verl 0.9.1's own trainer loop on CPU.

The product path is unchanged: ``acerl train`` -> :func:`acerl.verl_backend.launcher.train_run_verl` ->
``python -m verl.trainer.main_ppo`` (V1 trainer, Ray, TransferQueue, the ACE plugin). What a CPU needs comes
in through the launcher's two site hooks, exactly as a cluster's site knobs would:

- ``ACERL_VERL_EXTRA_MODULES=fakes.verl_cpu_platform,fakes.verl_cpu_rollout``: a CPU "accelerator" platform
  (:mod:`fakes.verl_cpu_platform`) and a transformers rollout server behind verl's server interface
  (:mod:`fakes.verl_cpu_rollout`), imported by verl in every process beside the ACE plugin;
- ``ACERL_VERL_EXTRA_OVERRIDES``: the file :func:`cpu_overrides` writes (fake Ray GPUs, fp32 mixed precision
  with the launcher's own FSDP2 strategy, the ``cpu_hf`` rollout, one TransferQueue storage unit, one agent-loop /
  reward worker).

Three of those test-only settings hide product paths, so each has a switch that gives one run the product's
setting back (docs/verl.md, "The product paths the stand-ins would hide"): ``bf16=True`` drops the fp32 override
(verl's default bf16 parameters and compute, fp32 reduce, under CPU autocast), ``dataloader_workers`` runs verl's
``StatefulDataLoader`` with worker processes, and the overlay's ``keep_verl_checkpoints: true`` is undone by
:data:`DELETE_CHECKPOINTS` (the product's deletion of the checkpoints after the export).
"""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # on PYTHONPATH in verl's processes: the `fakes` package
REPO = TESTS.parent
RANKS = 2  # FSDP ranks (fake Ray GPUs)
GROUP_SIZE = 8  # rollouts per prompt (the overlay's group_size)
PROMPTS_PER_STEP = 8  # groups per training step (the overlay's prompts_per_step)
ROLLOUT_LOG_ENV = "ACERL_CPU_ROLLOUT_LOG"  # verl_cpu_rollout's record of weight loads and generations
ADV_DUMP_ENV = "ACERL_CPU_ADV_DUMP"  # verl_cpu_rollout's record of every advantage computation

OVERLAY = f"""\
# CPU verl overlay (tests/fakes/verl_cpu_loop.py): the CI-scale study trained by verl's main_ppo
compute:
  backend: verl
  keep_verl_checkpoints: true  # the tests read the checkpoints after the export
  resources:
    train_policy: {{threads: 2, gpus: {RANKS}, nodes: 1, mem_mb: 8000, runtime: 60}}
models:
  tiny:
    train:
      total_steps: 3
      # 8 prompts (24 groups over 3 steps): the tiny policy solves ~5% of the problems and only 15-20% of the
      # groups mix right and wrong, so with 4 prompts a GRPO run could see no non-zero advantage in 3 steps
      prompts_per_step: {PROMPTS_PER_STEP}
      group_size: {GROUP_SIZE}
      mini_batch_size: {PROMPTS_PER_STEP}  # one optimizer step per training step (the resume test counts Adam's steps)
      save_every: 1
      # fewer than the steps: verl's rotation deletes, and across the killed run's resume the launcher's prune does
      keep_checkpoints: 2
families:
  dapo:
    # the tiny policy solves ~5% of the synthetic problems, so most groups are all-wrong and filtered. With the
    # stand-in's seeded rollouts (fakes.cpu_sampling) a step's refills depend on the base model and the commit,
    # not on the load: one base needed 37, 48 and 48 prompts at steps 1-3, another more than 64 at step 3. The
    # cap of 24 batches (192 prompts a step) bounds a step's work in advance; a run that needed more would stop
    # with the cap's one-line error, naming it
    dynamic_sampling: {{enable: true, max_batches: 24}}
"""


# an overlay after write_overlay's: the product's default, the checkpoints deleted once the final policy is exported
DELETE_CHECKPOINTS = {"compute": {"keep_verl_checkpoints": False}}


def cpu_overrides(*, bf16: bool = False, dataloader_workers: int = 0) -> list[str]:
    """What a CPU needs beyond the launcher's overrides (later overrides win; see docs/verl.md). ``bf16``: keep
    verl's default mixed precision, as on a GPU (bf16 parameters and autocast, fp32 reduce and buffers), instead
    of fp32 everywhere; ``dataloader_workers``: verl's training dataloader's worker processes (0: the trainer's
    own process)."""
    a, r, ref = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
    fp32 = "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    env = "+ray_kwargs.ray_init.runtime_env.env_vars"
    precision = (
        []
        if bf16
        else [f"+{a}.fsdp_config.mixed_precision={fp32}", f"+{ref}.fsdp_config.mixed_precision={fp32}"]
    )
    return [
        f"+ray_kwargs.ray_init.num_gpus={RANKS}",
        # logical CPUs: verl's placement bundles ask for 3 CPUs per worker (max_colocate_count), so Ray must
        # advertise more than the machine's cores; the processes still share the real ones
        f"ray_kwargs.ray_init.num_cpus={4 * RANKS + 4}",
        f"{env}.VERL_PLATFORM=cpu",
        f"{env}.VERL_ENGINE_DEVICE=cuda",
        f"{env}.PYTHONPATH={TESTS}{os.pathsep}{REPO / 'src'}",
        # Ray's web dashboard (and its agent's HTTP side) serves nobody here: two processes fewer per run
        "+ray_kwargs.ray_init.include_dashboard=False",
        *precision,
        f"{r}.name=cpu_hf",
        # verl's stable request ids (det-<row>): the CPU server seeds each row's stream from them
        # (fakes.cpu_sampling), so the rollouts do not depend on how requests were batched
        f"{r}.full_determinism=True",
        f"{r}.agent.num_workers=1",
        "reward.num_workers=1",
        f"data.dataloader_num_workers={dataloader_workers}",
        "+reward.custom_reward_function.reward_kwargs.grader_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]


def cpu_env(work: Path, *, bf16: bool = False, dataloader_workers: int = 0, name: str = "") -> dict[str, str]:
    """Environment for ``acerl train`` (and so for main_ppo and its Ray workers); ``bf16`` and
    ``dataloader_workers`` as in :func:`cpu_overrides`, written to ``verl_cpu_overrides{name}.txt``."""
    overrides = work / f"verl_cpu_overrides{name}.txt"
    lines = [
        *cpu_overrides(bf16=bf16, dataloader_workers=dataloader_workers),
        f"hydra.run.dir={work / 'hydra'}",
    ]
    overrides.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    pythonpath = os.pathsep.join([str(TESTS), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    return {
        "ACERL_VERL_EXTRA_MODULES": "fakes.verl_cpu_platform,fakes.verl_cpu_rollout",
        "ACERL_VERL_EXTRA_OVERRIDES": str(overrides),
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": "cuda",
        "PYTHONPATH": pythonpath,
        ROLLOUT_LOG_ENV: str(work / "cpu_rollout.jsonl"),
        "RAY_TMPDIR": f"/tmp/acerl-ray-{os.getpid()}",  # Ray's socket paths must stay under 107 characters
        "RAY_DEDUP_LOGS": "0",
        # Ray starts one idle Python worker per logical CPU (12) when the first driver connects; verl's actors
        # start their own, so those would only compete for the two cores
        "RAY_prestart_worker_first_driver": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }


def write_overlay(work: Path) -> Path:
    f = work / "verl_cpu.yaml"
    f.write_text(OVERLAY, encoding="utf-8")
    return f
