"""One resolved run: :class:`RunSettings`, the frozen, typed settings of a (model, method, seed) training run.

:func:`resolve` builds it once; the local trainer, the verl launcher and the run spec (:func:`run_spec`,
recorded beside a run's checkpoints) all read it, so a setting's resolution (the family's KL override of the
model's beta, whether reference log-probs are needed, the trainer overrides) is written here only. The pydantic
schema in :mod:`acerl.config` has already checked every single key; the cross-key checks of one run are in
:func:`resolve`. The run spec is Snakemake's params of a training job; :func:`spec_keys` lists the config keys
it is resolved from, DVC's params of the job (DVC reads the config files, so ``dvc exp run -S`` edits take
effect).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from acerl.config import (
    BASE_METHOD,
    AceEstimator,
    Config,
    ConfigError,
    EstimatorConfig,
    FamilyConfig,
    GradingConfig,
    ModelConfig,
    Run,
    TrainHyper,
    check_overlong,
)

RESOURCE_KEYS = ("gpu_memory_utilization", "max_tokens_per_gpu", "save_every", "keep_checkpoints")
"""``models.<model>.train`` keys that set how a run is computed, not its result (vLLM's memory share, the
dynamic-batching token budget, the checkpoint schedule): not in the run spec, so a change of one resumes a run
and reruns nothing (docs/training.md, "What a run spec holds")."""

ReferenceKind = Literal["initial", "ema"]
OldLogprobs = Literal["recompute", "rollout"]
TrackerName = Literal["none", "tensorboard", "wandb"]

__all__ = [
    "RESOURCE_KEYS",
    "OldLogprobs",
    "ReferenceKind",
    "RunSettings",
    "TrackerName",
    "local_run_spec",
    "resolve",
    "run_spec",
    "spec_keys",
    "without_resource_keys",
]


@dataclass(frozen=True)
class RunSettings:
    """Everything that decides a training run's result, resolved from the config.

    Attributes:
        run: the (model, method, seed).
        base: the base model's identity (``models.<model>`` without ``train`` and ``display``), as the run spec
            records it.
        hyper: the model's training hyperparameters (paper Table 5).
        family_key, family: the method's algorithm family (clipping, loss aggregation, KL, reward kind, DAPO).
        estimator: the method's advantage estimator and its parameters.
        template: prompt template name.
        diagnostic_steps: steps whose policy is saved for the diagnostics (0 = before training).
        precision: ``fp32`` or ``bf16`` (``compute.precision``); gradient_checkpointing,
            max_tokens_per_micro_batch: the local trainer's memory settings (``compute.*``; no effect on results
            beyond float rounding, so not in the run spec).
        grading: the grader's limits (``grading``: the per-item timeout and worker processes).
        tracker, project: the experiment tracker that also receives each step's metrics (``compute.tracker``)
            and its project name (the config's ``name``); not in the run spec.
    """

    run: Run
    base: dict[str, Any]
    hyper: TrainHyper
    family_key: str
    family: FamilyConfig
    estimator: EstimatorConfig
    template: str
    diagnostic_steps: tuple[int, ...]
    precision: str
    gradient_checkpointing: bool
    max_tokens_per_micro_batch: int | None
    grading: GradingConfig
    tracker: TrackerName
    project: str

    @property
    def reference(self) -> ReferenceKind:
        """``initial`` (frozen base model) or ``ema`` (exponential moving average of the policy)."""
        return self.family.reference

    @property
    def ref_ema_decay(self) -> float:
        """EMA decay per training step (``reference == "ema"``)."""
        return float(self.family.ref_ema_decay)

    @property
    def old_logprobs(self) -> OldLogprobs:
        """Where ``log pi_old`` comes from: ``recompute`` (the policy's teacher-forced log-probs before the update,
        as verl computes them; exact, so ``c_i = 0`` at step 0) or ``rollout`` (the sampler's own log-probs)."""
        return self.hyper.old_logprobs

    @property
    def kl_coef(self) -> float:
        """beta: the family's ``kl_coef`` if set, else the model's (Table 5)."""
        return self.family.kl_coef if self.family.kl_coef is not None else self.hyper.kl_coef

    @property
    def kl_loss_coef(self) -> float:
        """The beta the loss applies: :attr:`kl_coef` with ``use_kl_loss``, else 0."""
        return self.kl_coef if self.family.use_kl_loss else 0.0

    @property
    def needs_reference(self) -> bool:
        """Reference log-probs are computed: the KL loss is on, or the estimator takes them (ACE's ``c_i``)."""
        return self.family.use_kl_loss or self.estimator.needs_reference

    def spec(self) -> dict[str, Any]:
        """The run spec: everything that decides the run's result, as plain JSON data (resolved from the config
        keys :func:`spec_keys` lists)."""
        return {
            "model": self.run.model,
            "method": self.run.method,
            "seed": self.run.seed,
            "base": self.base,
            "train": self.hyper.model_dump(mode="json", exclude=set(RESOURCE_KEYS)),
            "family": self.family.model_dump(mode="json"),
            "estimator": self.estimator.model_dump(mode="json"),
            "diagnostic_steps": list(self.diagnostic_steps),
            "precision": self.precision,
        }


def without_resource_keys(spec: Any) -> Any:
    """A recorded run spec as this code writes it: specs recorded before :data:`RESOURCE_KEYS` left the spec hold
    them under ``train``, and are compared without them (a finished run stays finished, a checkpoint resumes)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("train"), dict):
        return spec
    return {**spec, "train": {k: v for k, v in spec["train"].items() if k not in RESOURCE_KEYS}}


def local_run_spec(settings: RunSettings) -> dict[str, Any]:
    """The local trainer's ``run_spec.json``: :meth:`RunSettings.spec` plus its ``trainer`` section, a copy of
    the reference kind and the ``log pi_old`` source (``family`` and ``train`` hold them too, with the
    ``train_run`` overrides applied). The copy keeps the file's format, so run folders written before stay
    valid."""
    spec = settings.spec()
    spec["trainer"] = {"reference": settings.reference, "old_logprobs": settings.old_logprobs}
    if settings.reference == "ema":
        spec["trainer"]["ref_ema_decay"] = settings.ref_ema_decay
    return spec


def _checked_overrides(
    run: Run, reference: str | None, ref_ema_decay: float | None, old_logprobs: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trainer overrides that were given, checked by the schema's own field types: the family's part and the
    training hyperparameters' part."""
    family_part = {
        k: v for k, v in (("reference", reference), ("ref_ema_decay", ref_ema_decay)) if v is not None
    }
    try:
        FamilyConfig.model_validate(family_part)
        if old_logprobs is not None:
            TrainHyper.model_validate({"old_logprobs": old_logprobs})
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"run {run.id}: {err['loc'][0]} override: {err['msg']}") from None
    return family_part, ({"old_logprobs": old_logprobs} if old_logprobs is not None else {})


def base_identity(cfg: Config, model: str) -> dict[str, Any]:
    """``models.<model>`` without ``train`` and ``display``: the base model as a run spec records it."""
    return cfg.models[model].model_dump(mode="json", exclude={"train", "display"})


def resolve(
    cfg: Config,
    run: Run,
    *,
    reference: ReferenceKind | None = None,
    ref_ema_decay: float | None = None,
    old_logprobs: OldLogprobs | None = None,
) -> RunSettings:
    """The :class:`RunSettings` of training run ``run``; the keyword arguments override the config (the local
    trainer's ``reference``, ``ref_ema_decay`` and ``old_logprobs``), checked like config keys."""
    if run.is_base:
        raise ConfigError(
            f"run {run.id}: method {BASE_METHOD!r} is the untrained base model; nothing to train"
        )
    if run.model not in cfg.models:
        raise ConfigError(f"run {run.id}: unknown model {run.model!r}; valid: {', '.join(cfg.models)}")
    check_overlong(cfg, run)
    family_over, train_over = _checked_overrides(run, reference, ref_ema_decay, old_logprobs)
    model, method = cfg.models[run.model], cfg.method(run.method)
    return RunSettings(
        run=run,
        base=base_identity(cfg, run.model),
        hyper=model.train.model_copy(update=train_over),
        family_key=method.family,
        family=cfg.families[method.family].model_copy(update=family_over),
        estimator=method.estimator,
        template=model.template,
        diagnostic_steps=tuple(cfg.diagnostic_steps(run.model) if run in cfg.diagnostic_runs() else ()),
        precision=cfg.compute.precision,
        gradient_checkpointing=cfg.compute.gradient_checkpointing,
        max_tokens_per_micro_batch=cfg.compute.max_tokens_per_micro_batch,
        grading=cfg.grading,
        tracker=cfg.compute.tracker,
        project=cfg.name,
    )


def run_spec(cfg: Config, run: Run) -> dict[str, Any]:
    """Everything that decides a run's result, as plain JSON data: a training run's :meth:`RunSettings.spec`,
    the base model's identity for an untrained one."""
    if not run.is_base:
        return resolve(cfg, run).spec()
    return {
        "model": run.model,
        "method": run.method,
        "seed": run.seed,
        "base": base_identity(cfg, run.model),
        "precision": cfg.compute.precision,
    }


def spec_keys(cfg: Config, run: Run) -> list[str]:
    """The merged-config key paths (a key stands for its subtree) :func:`resolve` reads into
    :meth:`RunSettings.spec`: the stage table's deciding keys of a training run (DVC's params), written next to
    the resolution they describe. A test changes every key of the config and checks that the spec changes
    exactly for these.

    An alpha-sweep variant (``ace_grpo-alpha0.5``) reads its ACE method's estimator *except* ``alpha`` (the
    variant fixes alpha itself), so changing the method's alpha does not touch the other sweep points.
    """
    base = _sweep_base(cfg, run.method)
    method = base or run.method
    keys = [f"models.{run.model}.{k}" for k in ModelConfig.model_fields if k not in ("display", "train")]
    keys += [f"models.{run.model}.train.{k}" for k in TrainHyper.model_fields if k not in RESOURCE_KEYS]
    keys += [f"families.{cfg.method(run.method).family}", f"methods.{method}.family"]
    if base is None:
        keys.append(f"methods.{method}.estimator")
    else:
        keys += [f"methods.{method}.estimator.{k}" for k in AceEstimator.model_fields if k != "alpha"]
    if run in cfg.diagnostic_runs():  # the diagnostic steps (total_steps is a models.<model>.train key)
        keys += [f"study.diagnostics.{k}" for k in ("every", "early_steps", "early_every")]
    return [*keys, "compute.precision"]


def _sweep_base(cfg: Config, method: str) -> str | None:
    """The configured ACE method an alpha-sweep variant derives from (``None`` for a configured method)."""
    if method in cfg.methods:
        return None
    sweep = cfg.study.alpha_sweep
    if sweep is None or method not in cfg.resolved_methods:
        raise KeyError(f"unknown method {method!r}")
    return sweep.method
