"""A run of the study -> a verl 0.9.1 training job (``python -m verl.trainer.main_ppo`` + Hydra overrides).

:func:`verl_overrides` maps the run's resolved config (the model's Table 5 hyperparameters, the family's
clipping / loss aggregation / KL / dynamic sampling / overlong shaping, the estimator) to verl config keys;
docs/verl.md lists the full mapping per method. :func:`build_verl_command` is the command line;
:func:`train_run_verl` runs it (one node: directly; several nodes: inside the SLURM allocation through
``scripts/ray_on_slurm.sh``, which starts a Ray cluster first), then exports the final and diagnostic
checkpoints to Hugging Face folders (:mod:`acerl.verl_backend.checkpoints`) and collects verl's per-step
metrics into ``paths.train_metrics_file``.

ACE runs inside verl through the plugin :mod:`acerl.verl_backend.plugin`, loaded in every verl process with
``VERL_USE_EXTERNAL_MODULES`` (set for the driver and forwarded to every Ray worker through
``ray_kwargs.ray_init.runtime_env.env_vars``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from acerl.config import Config, ConfigError, PolicyLossParams, Run
from acerl.config.settings import resolve, run_spec, without_resource_keys
from acerl.data.real import IDENTITY_CHAT_TEMPLATE, prepare_verl_data, prompt_messages
from acerl.errors import MissingInputError
from acerl.pipeline import paths
from acerl.pipeline.io import write_json, write_text
from acerl.pipeline.provenance import record_launch
from acerl.pipeline.reuse import check_reused_inputs
from acerl.train.finished import check_final
from acerl.train.lock import run_lock
from acerl.train.tracker import verl_loggers
from acerl.verl_backend import GEN_BATCH_KEY, PLUGIN_MODULE, VERL_BUILTIN_ESTIMATORS, estimator_params_key
from acerl.verl_backend.checkpoints import (
    CALLBACK_CLASS,
    export_checkpoint,
    latest_step,
    link_folder,
    prune_checkpoints,
    repair_tracker,
    save_frequency,
    snapshot_step_dir,
    step_dir,
)
from acerl.verl_backend.node import check_driver, ray_node_env, remove_ray_temp_dir

logger = logging.getLogger(__name__)

__all__ = [
    "ENTRY_MODULE",
    "PLUGIN_ENV",
    "REWARD_FUNCTION",
    "build_verl_command",
    "check_attention",
    "collect_metrics",
    "export_run",
    "format_value",
    "merge_overrides",
    "ray_on_slurm_script",
    "remove_resumable_checkpoints",
    "token_budgets",
    "train_run_verl",
    "verl_env",
    "process_env",
    "verl_overrides",
    "verl_train_prompts",
]

ENTRY_MODULE = "verl.trainer.main_ppo"
PLUGIN_ENV = "VERL_USE_EXTERNAL_MODULES"
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"
EXTRA_MODULES_ENV = "ACERL_VERL_EXTRA_MODULES"  # comma-separated modules verl imports beside the ACE plugin
EXTRA_OVERRIDES_ENV = "ACERL_VERL_EXTRA_OVERRIDES"  # a file of Hydra overrides, one per line, appended last
REWARD_FUNCTION = "pkg://acerl.grading.reward"
ROLLOUT_ENGINE = "vllm"
FILTER_METRIC = "acc"  # reward_extra_info key written by acerl.grading.reward.compute_score
FSDP_STRATEGY = "fsdp2"  # actor and reference; verl's default is FSDP1 ("fsdp"); docs/verl.md, "FSDP2"


# ------------------------------------------------------------------------------------------ formatting
_BARE = re.compile(r"^[A-Za-z0-9_./:\-]+$")


def format_value(value: Any) -> str:
    """A Python value as a Hydra override value (``True``, ``null``, ``1e-06``, ``[a,b]``, quoted strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot pass non-finite {value!r} to verl")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    text = str(value)
    if _BARE.match(text) and text not in ("null", "true", "false", "True", "False"):
        return text
    # Hydra quoted strings: a quote is escaped with a backslash; backslashes are literal except before a quote
    # or at the end, where they are doubled.
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)
    return "'" + text + "'"


def _kv(key: str, value: Any) -> str:
    return f"{key}={format_value(value)}"


# ----------------------------------------------------------------------------------------------- paths
def ray_on_slurm_script() -> Path:
    """``scripts/ray_on_slurm.sh`` of this checkout (``$ACERL_RAY_ON_SLURM`` overrides)."""
    override = os.environ.get("ACERL_RAY_ON_SLURM")
    script = (
        Path(override) if override else Path(__file__).resolve().parents[3] / "scripts" / "ray_on_slurm.sh"
    )
    if not script.is_file():
        raise FileNotFoundError(
            f"multi-node launcher not found: {script} (set ACERL_RAY_ON_SLURM to its path)"
        )
    return script


# ------------------------------------------------------------------------------------------- overrides
def _diagnostic_steps(cfg: Config, run: Run) -> list[int]:
    return list(resolve(cfg, run).diagnostic_steps)


def _data_overrides(cfg: Config, run: Run, root: Path) -> list[str]:
    model = cfg.models[run.model]
    tr = model.train
    chat = prompt_messages("", model.template)
    out = [
        _kv("data.train_files", str(paths.verl_train_file(root, run.model))),
        _kv("data.val_files", str(paths.verl_val_file(root, run.model))),
        _kv("data.prompt_key", "prompt"),
        _kv("data.max_prompt_length", tr.max_prompt_length),
        _kv("data.max_response_length", tr.max_response_length),
        _kv("data.train_batch_size", tr.prompts_per_step),
        _kv("data.filter_overlong_prompts", True),
        _kv("data.truncation", "error"),
        _kv("data.shuffle", True),
        _kv("data.seed", run.seed),
    ]
    out += [
        _kv(f"+data.apply_chat_template_kwargs.{k}", v) for k, v in sorted(chat.chat_template_kwargs.items())
    ]
    return out


def _actor_overrides(cfg: Config, run: Run, root: Path) -> list[str]:
    model, settings = cfg.models[run.model], resolve(cfg, run)
    tr, fam = settings.hyper, settings.family
    update_tokens, logprob_tokens = token_budgets(cfg, run)
    if tr.prompts_per_step % tr.mini_batch_size:  # verl checks this only without dynamic batching
        raise ValueError(
            f"models.{run.model}.train: prompts_per_step={tr.prompts_per_step} is not a multiple of "
            f"mini_batch_size={tr.mini_batch_size} (verl's ppo_mini_batch_size)"
        )
    a = "actor_rollout_ref.actor"
    out = [_kv("actor_rollout_ref.model.path", str(paths.base_model_dir(root, run.model)))]
    if prompt_messages("", model.template).raw:
        out.append(_kv("actor_rollout_ref.model.custom_chat_template", IDENTITY_CHAT_TEMPLATE))
    out += [
        _kv(f"{a}.optim.lr", tr.lr),
        _kv(f"{a}.optim.weight_decay", tr.weight_decay),
        _kv(f"{a}.optim.betas", list(tr.betas)),
        _kv(f"{a}.optim.clip_grad", tr.grad_clip),
        _kv(f"{a}.optim.lr_warmup_steps", tr.warmup_steps),
        _kv(f"{a}.optim.lr_scheduler_type", tr.lr_schedule),
        _kv(f"{a}.grad_clip", tr.grad_clip),
        _kv(f"{a}.ppo_mini_batch_size", tr.mini_batch_size),
        _kv(f"{a}.ppo_micro_batch_size_per_gpu", tr.micro_batch_size_per_gpu),
        _kv(f"{a}.use_dynamic_bsz", True),
        _kv(f"{a}.ppo_max_token_len_per_gpu", update_tokens),
        _kv(f"{a}.ppo_epochs", tr.ppo_epochs),
        _kv(f"{a}.data_loader_seed", run.seed),
        _kv(f"{a}.clip_ratio_low", fam.clip_ratio_low),
        _kv(f"{a}.clip_ratio_high", fam.clip_ratio_high),
        _kv(f"{a}.clip_ratio_c", fam.clip_ratio_c),
        _kv(f"{a}.loss_agg_mode", fam.loss_agg_mode),
        *_policy_loss_overrides(fam.policy_loss, a),
        _kv(f"{a}.use_kl_loss", settings.needs_reference),  # verl computes pi_ref only with its KL loss
        _kv(f"{a}.kl_loss_coef", settings.kl_loss_coef),
        _kv(f"{a}.kl_loss_type", fam.kl_type),
        _kv(f"{a}.entropy_coeff", 0.0),  # actor/entropy comes from the old-log-prob pass (docs/verl.md)
        _kv(f"{a}.strategy", FSDP_STRATEGY),
        _kv("actor_rollout_ref.ref.strategy", FSDP_STRATEGY),
        _kv("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", tr.micro_batch_size_per_gpu),
        _kv("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", True),
        _kv("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", logprob_tokens),
    ]
    return out


def token_budgets(cfg: Config, run: Run) -> tuple[int, int]:
    """Tokens per GPU and micro-batch for verl's dynamic batching: ``(update, log-prob passes)``.

    ``train.max_tokens_per_gpu`` (default ``2 * (max_prompt_length + max_response_length)``: the longest
    sequence always fits, and a micro-batch's logits stay at two full-length sequences, e.g. 8,048 tokens x
    152,064 vocabulary = 2.4 GB in bf16 for Qwen2.5-Math-7B, where 16 fixed sequences of 4,024 tokens would be
    19.6 GB); the log-prob passes keep no activations for a backward pass and get 1.5x.
    """
    tr = cfg.models[run.model].train
    longest = tr.max_prompt_length + tr.max_response_length
    update = tr.max_tokens_per_gpu if tr.max_tokens_per_gpu is not None else 2 * longest
    if update < longest:
        raise ValueError(
            f"models.{run.model}.train.max_tokens_per_gpu={update} is below one full sequence "
            f"(max_prompt_length + max_response_length = {longest}): raise it to at least {longest}"
        )
    return update, update * 3 // 2


VERL_POLICY_LOSS_KEYS: dict[str, frozenset[str]] = {
    "vanilla": frozenset(),
    "clip_cov": frozenset({"clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"}),
    "kl_cov": frozenset({"kl_cov_ratio", "ppo_kl_coef"}),
}
"""acerl policy losses that are verl 0.9.1's own (``policy_loss.loss_mode``), with the keys verl's
``actor.policy_loss`` section takes for each."""


def _policy_loss_overrides(loss: PolicyLossParams, actor: str) -> list[str]:
    """``actor.policy_loss.loss_mode`` and the loss's own keys: verl runs its own function, which the local
    trainer's equals (tests/algos/test_covariance.py). A loss verl lacks is a one-line error."""
    keys = VERL_POLICY_LOSS_KEYS.get(loss.name)
    if keys is None or set(loss.kwargs()) != keys:
        raise ConfigError(
            f"policy loss {loss.name!r} has no verl counterpart (verl's own: {', '.join(VERL_POLICY_LOSS_KEYS)}); "
            "train it with compute.backend: local, or register a verl policy loss of the same name"
        )
    out = [_kv(f"{actor}.policy_loss.loss_mode", loss.name)]
    return out + [_kv(f"{actor}.policy_loss.{k}", v) for k, v in loss.kwargs().items()]


def _attention_overrides(cfg: Config) -> list[str]:
    """The FSDP workers' attention and padding mode, set explicitly: verl's own default is flash-attention 2,
    which needs a ``flash_attn`` the GPU lock cannot pin (docs/verl.md, "Attention")."""
    return [
        _kv("+actor_rollout_ref.model.override_config.attn_implementation", cfg.compute.verl_attention),
        _kv("actor_rollout_ref.model.use_remove_padding", cfg.compute.verl_remove_padding),
    ]


def check_attention(cfg: Config, find_spec: Callable[[str], Any] | None = None) -> None:
    """Preflight in the training environment: refuse ``flash_attention_2`` when ``flash_attn`` is not importable
    (verl's every worker would stop at step 0 with transformers' ImportError)."""
    import importlib.util

    find = find_spec or importlib.util.find_spec
    if cfg.compute.verl_attention == "flash_attention_2" and find("flash_attn") is None:
        raise ConfigError(
            f"compute.verl_attention=flash_attention_2 but flash_attn is not importable by {sys.executable}: "
            "install flash-attn built for this torch and CUDA (pip install flash-attn --no-build-isolation), "
            "or set compute.verl_attention: sdpa"
        )


def _rollout_overrides(cfg: Config, run: Run) -> list[str]:
    tr = cfg.models[run.model].train
    ev = cfg.evaluation
    r = "actor_rollout_ref.rollout"
    return [
        _kv(f"{r}.name", ROLLOUT_ENGINE),
        _kv(f"{r}.n", tr.group_size),
        _kv(f"{r}.temperature", tr.temperature),
        _kv(f"{r}.top_p", tr.top_p),
        _kv(f"{r}.gpu_memory_utilization", tr.gpu_memory_utilization),
        _kv(f"{r}.log_prob_micro_batch_size_per_gpu", tr.micro_batch_size_per_gpu),
        _kv(f"{r}.log_prob_use_dynamic_bsz", True),
        _kv(f"{r}.log_prob_max_token_len_per_gpu", token_budgets(cfg, run)[1]),
        _kv(f"{r}.seed", run.seed),
        _kv(f"{r}.val_kwargs.n", tr.val_samples),
        _kv(f"{r}.val_kwargs.do_sample", True),
        _kv(f"{r}.val_kwargs.temperature", ev.temperature),
        _kv(f"{r}.val_kwargs.top_p", ev.top_p),
    ]


def _algorithm_overrides(cfg: Config, run: Run) -> list[str]:
    settings = resolve(cfg, run)
    est, fam = settings.estimator, settings.family
    ds = fam.dynamic_sampling
    out = [
        _kv("algorithm.adv_estimator", est.name),
        _kv("algorithm.norm_adv_by_std_in_grpo", est.norm_by_std),
        _kv("algorithm.use_kl_in_reward", False),
        _kv("algorithm.filter_groups.enable", ds.enable),
    ]
    if ds.enable:
        out += [
            _kv("algorithm.filter_groups.metric", FILTER_METRIC),
            _kv("algorithm.filter_groups.max_num_gen_batches", ds.max_batches),
            # the recipe's data.gen_batch_size, read by the plugin's cap (V1 resets data.gen_batch_size to 1)
            _kv(f"+{GEN_BATCH_KEY}", ds.gen_batch_factor * settings.hyper.prompts_per_step),
        ]
    # GRPO is verl's built-in (its eps is checked when the config loads); every other acerl estimator, ACE
    # among them, runs through the plugin's registered-estimator path with its keys where the plugin reads them
    if est.name not in VERL_BUILTIN_ESTIMATORS:
        section = estimator_params_key(est.name)
        out.append(_kv("algorithm._target_", f"{PLUGIN_MODULE}.AceAlgoConfig"))
        out += [_kv(f"+{section}.{k}", v) for k, v in est.kwargs().items() if k != "norm_by_std"]
    out.append(_kv("critic.enable", False))
    return out


def _reward_overrides(cfg: Config, run: Run) -> list[str]:
    settings = resolve(cfg, run)  # checks that DAPO's overlong buffer fits the response budget
    fam, tr = settings.family, settings.hyper
    rf = "reward.custom_reward_function"
    out = [
        _kv(f"{rf}.path", REWARD_FUNCTION),
        _kv(f"{rf}.name", "compute_score"),
        _kv(f"+{rf}.reward_kwargs.correct_score", 1.0),
        _kv(f"+{rf}.reward_kwargs.incorrect_score", -1.0 if fam.reward == "signed" else 0.0),
        _kv(f"+{rf}.reward_kwargs.grader_workers", cfg.grading.workers),
        _kv(f"+{rf}.reward_kwargs.grader_timeout_s", float(cfg.grading.timeout_s)),
    ]
    ov = fam.overlong
    if ov.enable:
        out += [
            _kv("reward.reward_manager.name", "dapo"),
            _kv("+reward.reward_kwargs.overlong_buffer_cfg.enable", True),
            _kv("+reward.reward_kwargs.overlong_buffer_cfg.len", ov.buffer),
            _kv("+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor", float(ov.penalty_factor)),
            _kv("+reward.reward_kwargs.overlong_buffer_cfg.log", False),
            _kv("+reward.reward_kwargs.max_resp_len", tr.max_response_length),
        ]
    else:
        out.append(_kv("reward.reward_manager.name", "naive"))
    return out


def _trainer_overrides(cfg: Config, run: Run, root: Path) -> list[str]:
    tr = cfg.models[run.model].train
    res = cfg.resources("train_policy", run.model)
    if res.gpus < 1:
        raise ValueError(
            f"the verl backend needs GPUs: set compute.resources.train_policy.gpus (or "
            f"compute.model_resources.{run.model}.train_policy.gpus) to the GPUs per node"
        )
    diag = [s for s in _diagnostic_steps(cfg, run) if s > 0]
    out = [
        _kv("trainer.project_name", cfg.name),
        _kv("trainer.experiment_name", f"{run.model}-{run.method}-seed{run.seed}"),
        _kv("trainer.logger", verl_loggers(cfg.compute.tracker)),  # compute.tracker: the local trainer's too
        _kv("trainer.nnodes", res.nodes),
        _kv("trainer.n_gpus_per_node", res.gpus),
        _kv("trainer.total_epochs", tr.total_epochs),
        _kv("trainer.total_training_steps", tr.total_steps),
        _kv("trainer.save_freq", save_frequency(tr.save_every, diag)),
        _kv("trainer.max_actor_ckpt_to_keep", tr.keep_checkpoints),
        _kv("trainer.resume_mode", "auto"),
        _kv("trainer.default_local_dir", str(paths.checkpoints_dir(root, run))),
        _kv("trainer.test_freq", tr.val_every if tr.val_every > 0 else -1),  # -1: no in-training validation
        _kv("trainer.val_before_train", False),
    ]
    # the callback snapshots diagnostic steps and prunes the checkpoints an earlier attempt left (checkpoints.py)
    out += [
        _kv("trainer.checkpoint_callback_class", CALLBACK_CLASS),
        _kv("+trainer.acerl.snapshot_steps", diag),
        _kv("+trainer.acerl.snapshot_dir", str(paths.verl_snapshot_dir(root, run))),
    ]
    return out


def process_env(env: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of verl's processes: ``environ`` (default ``os.environ``) updated with ``env``, without
    ``ROCR_VISIBLE_DEVICES`` where ``CUDA_VISIBLE_DEVICES`` is set.

    SLURM sets both in a GPU job when the site's gres.conf names no vendor (no ``AutoDetect``, no
    ``Flags=nvidia_gpu_env``), and verl's workers refuse to start with both ("Please don't set
    ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set"). The project's GPU path is CUDA (the GPU
    lock), so the AMD variable goes (docs/cluster.md, "GPUs")."""
    out = {**(os.environ if environ is None else environ), **env}
    if out.get("CUDA_VISIBLE_DEVICES") and "ROCR_VISIBLE_DEVICES" in out:
        del out["ROCR_VISIBLE_DEVICES"]
    return out


def verl_env(cfg: Config, run: Run, root: Path | str) -> dict[str, str]:
    """Environment variables every verl process needs: the config's ``plugins`` (first, so the ACE plugin
    registers their estimators), the ACE plugin and the per-step metrics file."""
    extra = [m.strip() for m in os.environ.get(EXTRA_MODULES_ENV, "").split(",") if m.strip()]
    env = {
        PLUGIN_ENV: ",".join([*cfg.plugins, PLUGIN_MODULE, *extra]),
        FILE_LOGGER_ENV: str(paths.verl_logs_dir(Path(root).resolve(), run) / "metrics.jsonl"),
    }
    if cfg.compute.tracker != "none":  # verl's TensorBoard / wandb loggers write where these say
        env["TENSORBOARD_DIR" if cfg.compute.tracker == "tensorboard" else "WANDB_DIR"] = str(
            paths.tracker_dir(Path(root).resolve(), run)
        )
    return env


def _ray_overrides(cfg: Config, run: Run, root: Path) -> list[str]:
    res = cfg.resources("train_policy", run.model)
    # One node: main_ppo starts Ray itself; on SLURM it must not claim more CPUs than the job holds ("Unable
    # to register worker with raylet"). Several nodes: ray_on_slurm.sh starts each node with --num-cpus, and
    # ray.init() connecting to an existing cluster rejects num_cpus.
    out = [_kv("ray_kwargs.ray_init.num_cpus", res.threads if res.nodes == 1 else None)]
    if res.nodes == 1:  # its own Ray: never RAY_ADDRESS's or a leftover ray_current_cluster's (node.py)
        out.append(_kv("+ray_kwargs.ray_init.address", "local"))
    for key, value in verl_env(cfg, run, root).items():
        out.append(_kv(f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}", value))
    return out


def verl_overrides(cfg: Config, run: Run, root: Path | str) -> list[str]:
    """Every Hydra override of ``verl/trainer/config/ppo_trainer.yaml`` for ``run`` (see docs/verl.md)."""
    if run.is_base:
        raise ValueError(f"{run.id}: the base model is not trained")
    root = Path(root).resolve()
    return [
        *_data_overrides(cfg, run, root),
        *_actor_overrides(cfg, run, root),
        *_attention_overrides(cfg),
        *_rollout_overrides(cfg, run),
        *_algorithm_overrides(cfg, run),
        *_reward_overrides(cfg, run),
        *_trainer_overrides(cfg, run, root),
        *_ray_overrides(cfg, run, root),
    ]


def merge_overrides(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``base`` with ``extra`` applied: an override of a key already in ``base`` replaces it in place (keeping
    a ``+`` prefix, which Hydra rejects twice for one key), new keys are appended in order."""
    out = list(base)
    where = {ov.split("=", 1)[0].lstrip("+"): i for i, ov in enumerate(out)}
    for ov in extra:
        key = ov.split("=", 1)[0].lstrip("+")
        if key in where:
            i = where[key]
            plus = "+" if out[i].startswith("+") and not ov.startswith("+") else ""
            out[i] = plus + ov
        else:
            where[key] = len(out)
            out.append(ov)
    return out


def extra_overrides_from_env() -> list[str]:
    """Overrides from the file ``$ACERL_VERL_EXTRA_OVERRIDES`` names (one per line; blank and ``#`` lines
    skipped): site-specific knobs for runs started through ``acerl train`` / Snakemake."""
    name = os.environ.get(EXTRA_OVERRIDES_ENV)
    if not name:
        return []
    f = Path(name)
    if not f.is_file():
        raise MissingInputError(f"{EXTRA_OVERRIDES_ENV}={name}: no such file (one Hydra override per line)")
    lines = [line.strip() for line in f.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def build_verl_command(cfg: Config, run: Run, root: Path | str) -> list[str]:
    """``[python, -m, verl.trainer.main_ppo, *overrides]`` for ``run`` (run it with :func:`verl_env` set)."""
    return [sys.executable, "-m", ENTRY_MODULE, *verl_overrides(cfg, run, root)]


# ------------------------------------------------------------------------------------------- metrics
def collect_metrics(logs: Path | str, target: Path | str) -> Path:
    """Merge verl's file-logger records (``{"step", "data"}``, one file per attempt) into the project's flat
    ``metrics.jsonl`` (``{"step": s, **metrics}``); a step logged by several attempts keeps the last one."""

    by_step: dict[int, dict[str, Any]] = {}
    for f in sorted(Path(logs).glob("metrics*.jsonl"), key=_attempt_order):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a killed attempt
            if isinstance(rec, dict) and "step" in rec and isinstance(rec.get("data"), dict):
                by_step[int(rec["step"])] = {"step": int(rec["step"]), **rec["data"]}
    text = "".join(json.dumps(by_step[s], sort_keys=True) + "\n" for s in sorted(by_step))
    write_text(Path(target), text)
    return Path(target)


def _attempt_order(path: Path) -> tuple[int, str]:
    # metrics.jsonl is the newest attempt; rotated ones are metrics.attempt-<UTC time>.jsonl
    return (1, "") if path.name == "metrics.jsonl" else (0, path.name)


def _rotate_metrics(logs: Path) -> None:
    current = logs / "metrics.jsonl"
    if current.is_file():
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(current.stat().st_mtime))
        target = logs / f"metrics.attempt-{stamp}.jsonl"
        n = 1
        while target.exists():
            target, n = logs / f"metrics.attempt-{stamp}-{n}.jsonl", n + 1
        os.replace(current, target)


def supersede_if_settings_changed(cfg: Config, run: Run, root: Path | str) -> bool:
    """verl resumes from whatever checkpoint it finds (``resume_mode=auto``). When the run spec differs from the
    one saved beside those checkpoints (``run_spec.json``: a new alpha, learning rate, ...), move checkpoints and
    snapshots aside (:func:`acerl.train.checkpoint.supersede_stale_state`) so the run starts again from step 0,
    as the local trainer does. Returns True when it did."""
    from acerl.train.checkpoint import supersede_stale_state

    ckpts = paths.checkpoints_dir(root, run)
    saved = paths.run_spec_file(root, run)
    if latest_step(ckpts) is None or not saved.is_file():
        return False
    if without_resource_keys(json.loads(saved.read_text())) == json.loads(json.dumps(run_spec(cfg, run))):
        return False
    supersede_stale_state(Path(root), run, ckpts, also=(paths.verl_snapshot_dir(root, run),))
    return True


# ---------------------------------------------------------------------------------------------- export
def export_run(
    cfg: Config,
    run: Run,
    root: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    runner: Callable[..., Any] = subprocess.run,
) -> Path:
    """Export diagnostic snapshots and the final checkpoint of a finished verl run to HF folders.

    Step 0 (the base model) is linked from ``paths.base_model_dir``; each other diagnostic step from its
    snapshot (then the snapshot is deleted); the final policy from verl's latest checkpoint, which must be
    step ``train.total_steps``. Then the resumable checkpoints are deleted, unless
    ``compute.keep_verl_checkpoints`` is set. ``runner`` runs the model merger (``subprocess.run``-compatible).
    """
    root = Path(root).resolve()
    total = cfg.models[run.model].train.total_steps
    ckpts = paths.checkpoints_dir(root, run)
    last = latest_step(ckpts)
    if last != total:
        raise RuntimeError(
            f"{run.id}: verl's latest checkpoint is step {last} in {ckpts}, expected train.total_steps={total} "
            "(fewer steps per epoch than planned? see docs/verl.md, 'Steps')"
        )
    menv = process_env(env or {})
    snaps = paths.verl_snapshot_dir(root, run)
    for step in _diagnostic_steps(cfg, run):
        target = paths.diag_step_dir(root, run, step)
        if (target / "config.json").is_file():
            continue
        if step == 0:
            link_folder(paths.base_model_dir(root, run.model), target)
            continue
        snap = snapshot_step_dir(snaps, step) / "actor"
        if not snap.is_dir() and step == total:
            snap = step_dir(ckpts, step) / "actor"
        export_checkpoint(snap, target, env=menv, run=runner)
    final = paths.policy_dir(root, run)
    if not (final / "config.json").is_file():
        export_checkpoint(step_dir(ckpts, total) / "actor", final, env=menv, run=runner)
    if snaps.is_dir():
        shutil.rmtree(snaps)
    if not cfg.compute.keep_verl_checkpoints:
        remove_resumable_checkpoints(ckpts)
    return final


def remove_resumable_checkpoints(checkpoints: Path) -> None:
    """Delete a finished run's verl checkpoints (fp32 weights + Adam state, ~12 bytes per parameter each) once
    its final policy is exported; ``compute.keep_verl_checkpoints: true`` keeps them."""
    if checkpoints.is_dir():
        logger.info(
            "removing the resumable checkpoints %s (compute.keep_verl_checkpoints is false)", checkpoints
        )
        shutil.rmtree(checkpoints)


# ------------------------------------------------------------------------------------------ the run
def verl_train_prompts(cfg: Config, run: Run, root: Path | str) -> int:
    """Training prompts verl keeps: ``len(RLHFDataset)`` over the run's parquet with the base model's tokenizer
    (the run's chat template and keyword arguments) and verl's prompt-length filter, as the V1 trainer builds
    it (``v1/trainer_base.py:_init_dataloader``; its ``steps_per_epoch`` is this // ``train_batch_size``)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    model = cfg.models[run.model]
    tokenizer = AutoTokenizer.from_pretrained(paths.base_model_dir(root, run.model))
    chat = prompt_messages("", model.template)
    if chat.raw:
        tokenizer.chat_template = IDENTITY_CHAT_TEMPLATE  # actor_rollout_ref.model.custom_chat_template
    data_config = OmegaConf.create(
        {
            "prompt_key": "prompt",
            "max_prompt_length": model.train.max_prompt_length,
            "filter_overlong_prompts": True,
            "truncation": "error",
            "apply_chat_template_kwargs": dict(chat.chat_template_kwargs),
        }
    )
    files = [str(paths.verl_train_file(root, run.model))]
    # verl types the tokenizer as transformers' Python-backend class; a fast one serves alike
    return len(RLHFDataset(files, tokenizer, data_config))  # type: ignore[arg-type]


def _check_steps(cfg: Config, run: Run, root: Path) -> None:
    """``train.total_steps`` must fit ``total_epochs`` of verl's epochs.

    verl counts ``steps_per_epoch = kept prompts // train_batch_size`` after its prompt-length filter and stops at
    ``min(total_training_steps, steps_per_epoch * total_epochs)``. With dynamic sampling (the DAPO family) an
    "epoch" is only this step count: each step generates its batch plus refills for filtered groups, and the
    data iterator restarts when exhausted, so DAPO-family runs go through more prompts per step (docs/verl.md).
    """
    import pyarrow.parquet as pq

    tr = cfg.models[run.model].train
    n_rows = pq.ParquetFile(paths.verl_train_file(root, run.model)).metadata.num_rows
    n_train = verl_train_prompts(cfg, run, root)
    per_epoch = n_train // tr.prompts_per_step  # verl's train dataloader drops the last partial batch
    available = per_epoch * tr.total_epochs
    kept = f"{n_train} of {n_rows} training prompts fit max_prompt_length={tr.max_prompt_length}"
    if available < tr.total_steps:
        raise ValueError(
            f"{run.id}: {kept}; they give {per_epoch} steps per epoch at {tr.prompts_per_step} prompts per step, "
            f"{available} steps in {tr.total_epochs} epochs; models.{run.model}.train.total_steps is "
            f"{tr.total_steps}: set it to {available} (or raise total_epochs)"
        )
    if n_train < n_rows:
        logger.warning("%s: %s (verl drops the others)", run.id, kept)
    if available > tr.total_steps:
        logger.warning(
            "%s: verl stops at train.total_steps=%d, before the %d steps of %d epochs",
            run.id,
            tr.total_steps,
            available,
            tr.total_epochs,
        )


def train_run_verl(
    cfg: Config,
    run: Run,
    root: Path | str,
    *,
    dry_run: bool = False,
    extra_overrides: Sequence[str] = (),
    runner: Callable[..., Any] = subprocess.run,
) -> Path:
    """Train ``run`` with verl (resuming from its latest checkpoint) and export it; returns the final policy.

    One node: runs :func:`build_verl_command` directly. Several nodes (``compute.resources`` /
    ``model_resources`` ``train_policy.nodes``): runs it through ``scripts/ray_on_slurm.sh`` inside the SLURM
    allocation. ``extra_overrides`` are appended and win over the generated ones (site-specific knobs such as
    ``actor_rollout_ref.rollout.tensor_model_parallel_size=2``). With ``dry_run`` the launch command is logged
    and nothing is run or written. A run whose latest verl checkpoint is already the last step is only
    exported (e.g. after an export failure). ``runner`` (``subprocess.run``-compatible) starts the training
    and merger processes.

    As with the local trainer, an existing ``final/`` is returned only when the settings it was trained with
    (the run folder's ``run_spec.json``) are the requested ones (:func:`acerl.train.finished.check_final`),
    ``data/`` and the base model must have been made for this config, and the run's lock
    (:func:`acerl.train.lock.run_lock`) keeps a second launcher of the same run out.
    """
    root = Path(root).resolve()
    if dry_run:
        return _train_run_verl(cfg, run, root, True, extra_overrides, runner)
    with run_lock(root, run):
        return _train_run_verl(cfg, run, root, False, extra_overrides, runner)


def _train_run_verl(
    cfg: Config,
    run: Run,
    root: Path,
    dry_run: bool,
    extra_overrides: Sequence[str],
    runner: Callable[..., Any],
) -> Path:
    """:func:`train_run_verl`, under the run's lock unless ``dry_run``."""
    final = paths.policy_dir(root, run)
    if (final / "config.json").is_file():
        check_final(final, paths.run_spec_file(root, run), run_spec(cfg, run), run.id)
        logger.info("%s: final policy %s exists; nothing to do", run.id, final)
        return final
    if not dry_run:
        check_reused_inputs(cfg, root, run)
    if not paths.verl_train_file(root, run.model).is_file() and not dry_run:
        if not paths.data_file(root, "train").is_file():
            raise MissingInputError(f"{paths.data_file(root, 'train')} is missing: run prepare_data first")
        prepare_verl_data(cfg, root, [run.model])
    base = build_verl_command(cfg, run, root)
    cmd = [*base[:3], *merge_overrides(base[3:], [*extra_overrides, *extra_overrides_from_env()])]
    env = verl_env(cfg, run, root)
    res = cfg.resources("train_policy", run.model)
    if res.nodes > 1:
        env.update(
            {
                "RAY_NUM_CPUS": str(res.threads),
                "RAY_NUM_GPUS": str(res.gpus),
                "ACERL_EXPECT_NODES": str(res.nodes),
            }
        )
        launch = ["bash", str(ray_on_slurm_script()), "--", *cmd]
    else:
        env.update(ray_node_env())
        launch = cmd
    logger.info(
        "%s: %s", run.id, " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(launch)
    )
    if dry_run:
        return final
    if res.nodes > 1 and "SLURM_JOB_NODELIST" not in os.environ:
        raise RuntimeError(
            f"{run.id}: {res.nodes}-node training must run inside a SLURM allocation of {res.nodes} nodes "
            "(SLURM_JOB_NODELIST is not set)"
        )
    check_attention(cfg)
    check_driver()
    repair_tracker(paths.checkpoints_dir(root, run))
    supersede_if_settings_changed(cfg, run, root)
    if latest_step(paths.checkpoints_dir(root, run)) == cfg.models[run.model].train.total_steps:
        logger.info("%s: training finished earlier; exporting", run.id)
        return export_run(cfg, run, root, env=env, runner=runner)
    _check_steps(cfg, run, root)
    prune_checkpoints(paths.checkpoints_dir(root, run), cfg.models[run.model].train.keep_checkpoints)

    logs = paths.verl_logs_dir(root, run)
    logs.mkdir(parents=True, exist_ok=True)
    write_json(paths.run_spec_file(root, run), run_spec(cfg, run), indent=2, sort_keys=True)
    record_launch(
        paths.software_file(root, run),
        resuming=latest_step(paths.checkpoints_dir(root, run)) is not None,
        what=f"{run.id}: verl checkpoints in {paths.checkpoints_dir(root, run)}",
    )
    write_text(paths.verl_command_file(root, run), json.dumps({"argv": launch, "env": env}, indent=2) + "\n")
    _rotate_metrics(logs)
    child = process_env(env)
    if res.nodes == 1:
        child.pop("RAY_ADDRESS", None)  # a one-node job starts its own Ray (ray_init.address=local)
    try:
        proc = runner(launch, env=child, check=False)
    finally:
        if res.nodes == 1:
            remove_ray_temp_dir(env)
    collect_metrics(logs, paths.train_metrics_file(root, run))
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, launch)
    return export_run(cfg, run, root, env=env, runner=runner)
