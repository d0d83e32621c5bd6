"""The one typed, validated config for the whole pipeline (Snakemake, DVC and the CLI all read this).

A YAML file (``config/config.yaml``, ``config/test.yaml``, ``config/paper.yaml``) is validated by
:func:`load_config`; unknown keys and wrong types fail with the full key path and the file. Derived values
(the run grid here, a run's resolved settings in :mod:`acerl.config.settings`, paths in :mod:`acerl.pipeline.paths`) are never
retyped in rules.

Vocabulary:
- a *model* is a base model entry (``models.<key>``): built from scratch (``source: tiny``) or loaded from
  the hub / a local folder (``source: hub``), with its prompt template and its training hyperparameters
  (the paper's Table 5, one column per model);
- a *method* is a named entry composed of an algorithm *family* (``grpo`` | ``dapo``: clipping, loss
  aggregation, KL, dynamic sampling, overlong shaping) and an advantage *estimator* (``grpo`` | ``ace`` with its
  parameters), so a new variant is a config entry, not code;
- a *run* is (model, method, seed); the *study* section lists which runs the paper's tables need.

The package's files, each one concern; callers import from ``acerl.config``:
- :mod:`~acerl.config.schema`: the sections below the root, every key's type, default, checks and description;
- :mod:`~acerl.config.grid`: the study grid (:class:`Run`, the runs, the tables' rows, evaluations, resources,
  vLLM settings), methods of :class:`Config`;
- :mod:`~acerl.config.root`: :class:`Config`, the root, and its checks across sections;
- :mod:`~acerl.config.loading`: reading, merging, overriding and validating config files;
- :mod:`~acerl.config.reference`: the key reference (docs/config.md).
"""

from __future__ import annotations

from acerl.config.grid import BASE_METHOD, SYNTHETIC_BENCHMARKS, Run, alpha_variant_key, check_overlong
from acerl.config.loading import deep_merge, load_config, merged_dict, parse_override, read_yaml, validate
from acerl.config.reference import reference_markdown
from acerl.config.report import MethodsComparison, PrimaryEndpoint, ReportConfig, TestbedGate
from acerl.config.root import Config
from acerl.config.schema import (
    ESTIMATORS,
    POLICY_LOSSES,
    Ablation,
    AceEstimator,
    AlphaSweep,
    ComputeConfig,
    ConfigError,
    DataConfig,
    DatasetSource,
    DiagnosticsConfig,
    DynamicSampling,
    EstimatorConfig,
    EstimatorParams,
    EvaluationConfig,
    FamilyConfig,
    GradingConfig,
    GrpoEstimator,
    MainGrid,
    MethodConfig,
    ModelConfig,
    OverlongShaping,
    PolicyLossConfig,
    PolicyLossParams,
    RealData,
    Resources,
    StudyConfig,
    SyntheticData,
    TrainHyper,
    VanillaLoss,
    VLLMConfig,
    as_written,
    register_estimator_params,
    register_policy_loss_params,
    spec_json,
)

__all__ = [
    "BASE_METHOD",
    "ESTIMATORS",
    "POLICY_LOSSES",
    "SYNTHETIC_BENCHMARKS",
    "Ablation",
    "AceEstimator",
    "AlphaSweep",
    "ComputeConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "DatasetSource",
    "DiagnosticsConfig",
    "DynamicSampling",
    "EstimatorConfig",
    "EstimatorParams",
    "EvaluationConfig",
    "FamilyConfig",
    "GradingConfig",
    "GrpoEstimator",
    "MainGrid",
    "MethodConfig",
    "MethodsComparison",
    "ModelConfig",
    "OverlongShaping",
    "PolicyLossConfig",
    "PolicyLossParams",
    "PrimaryEndpoint",
    "RealData",
    "ReportConfig",
    "Resources",
    "Run",
    "StudyConfig",
    "SyntheticData",
    "TestbedGate",
    "TrainHyper",
    "VLLMConfig",
    "VanillaLoss",
    "register_estimator_params",
    "register_policy_loss_params",
    "alpha_variant_key",
    "as_written",
    "check_overlong",
    "deep_merge",
    "load_config",
    "merged_dict",
    "parse_override",
    "read_yaml",
    "reference_markdown",
    "spec_json",
    "validate",
]
