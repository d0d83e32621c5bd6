"""The root of a pipeline config file (:class:`Config`): its sections and the checks across them (names that
refer to other sections, backend and vLLM constraints, each run's settings). The derived values (the run grid)
come from :class:`acerl.config.grid.StudyGrid`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from acerl.config.grid import BASE_METHOD, StudyGrid, check_overlong, require
from acerl.config.plugins import import_plugins
from acerl.config.report import ReportConfig
from acerl.config.schema import (
    AceEstimator,
    ComputeConfig,
    DataConfig,
    EvaluationConfig,
    FamilyConfig,
    GradingConfig,
    GrpoEstimator,
    MethodConfig,
    ModelConfig,
    StudyConfig,
    _Model,
)


class Config(StudyGrid, _Model):
    """The root of a pipeline config file."""

    name: str = Field("study", description="study name (shown in reports)")
    plugins: list[str] = Field(
        [],
        description="modules imported before the methods are validated, each registering estimators or policy "
        "losses of one's own (importable from PYTHONPATH; docs/extending.md)",
    )
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

    @field_validator("plugins")
    @classmethod
    def _import_plugins(cls, v: list[str]) -> list[str]:
        import_plugins(v)  # before families and methods, whose validation needs what they register
        return v

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
            require(m.family, self.families, f"methods.{key}.family")
        s = self.study
        for i, mk in enumerate(s.main.models):
            require(mk, self.models, f"study.main.models[{i}]")
        for i, me in enumerate(s.main.methods):
            require(me, self.methods, f"study.main.methods[{i}]")
        if self.report.methods is not None:
            mc = self.report.methods
            named = [("baseline", mc.baseline), *([("reference", mc.reference)] if mc.reference else [])]
            named += [(f"methods[{i}]", m) for i, m in enumerate(mc.methods)]
            named += [(f"expected.{m}", m) for m in mc.expected]
            for where, me in named:
                require(
                    me,
                    dict.fromkeys(s.main.methods),
                    f"report.methods.{where} (a method of study.main.methods)",
                )
        if self.report.gate is not None:
            gate = self.report.gate
            for where, me in (("baseline", gate.baseline), ("control", gate.control)):
                require(
                    me, dict.fromkeys(s.main.methods), f"report.gate.{where} (a method of study.main.methods)"
                )
            if not s.main.include_base:
                raise ValueError(
                    "report.gate compares with the base models: set study.main.include_base: true"
                )
        if s.alpha_sweep:
            require(s.alpha_sweep.model, self.models, "study.alpha_sweep.model")
            require(s.alpha_sweep.method, self.methods, "study.alpha_sweep.method")
            if not isinstance(self.methods[s.alpha_sweep.method].estimator, AceEstimator):
                raise ValueError("study.alpha_sweep.method must use the 'ace' estimator")
        if s.ablation:
            require(s.ablation.model, self.models, "study.ablation.model")
            for i, me in enumerate(s.ablation.methods):
                require(me, self.methods, f"study.ablation.methods[{i}]")
        if s.diagnostics:
            for i, mk in enumerate(s.diagnostics.models):
                require(mk, self.models, f"study.diagnostics.models[{i}]")
            for i, me in enumerate(s.diagnostics.methods):
                require(me, self.methods, f"study.diagnostics.methods[{i}]")
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
            self._check_group(run.model, run.method)
        return self

    def _check_group(self, model: str, method: str) -> None:
        """An estimator with a group baseline (GRPO's group mean) needs two rollouts per prompt or more: with one
        every advantage is 0, so the run would train on nothing."""
        est = self.method(method).estimator
        size = self.models[model].train.group_size
        if est.needs_group and size < 2:
            raise ValueError(
                f"models.{model}.train.group_size: {size} rollout per prompt gives method {method!r} (estimator "
                f"{est.name!r}, which compares each rollout with its group's) no advantage signal; use 2 or more, "
                "or an estimator without a group baseline (psr, nsr, w_reinforce)"
            )

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


def _default(model: type[BaseModel], key: str) -> Any:
    """The schema default of ``model``'s field ``key`` (written once, in the field)."""
    return model.model_fields[key].default


def _tiny_heads(model: ModelConfig) -> int | None:
    """The attention-head count of a ``source: tiny`` model (its ``tiny`` overrides over the defaults); ``None``
    for hub models (known only from their downloaded config)."""
    if model.source != "tiny":
        return None
    return model.tiny.num_heads


def _check_key(key: str) -> None:
    if not key or any(c in key for c in "/ \\{}") or key.startswith("."):
        raise ValueError(f"key {key!r} must be non-empty and contain no '/', spaces, braces or backslashes")
