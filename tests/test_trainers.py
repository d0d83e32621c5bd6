"""The trainer backends sit in one registry with one signature (``compute.backend`` -> a :class:`Trainer`), as
the samplers sit behind :func:`acerl.generate.make_sampler`; ``acerl train`` goes through it."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

from acerl.config import ComputeConfig, ConfigError, Run, load_config
from acerl.errors import MissingInputError
from acerl.pipeline import paths
from acerl.trainers import TRAINERS, Trainer, TrainOptions, train_from_config

REPO = Path(__file__).resolve().parents[1]


def test_every_schema_backend_is_registered_with_one_signature() -> None:
    choices = typing.get_args(ComputeConfig.model_fields["backend"].annotation)
    assert set(choices) == set(TRAINERS.names()) == {"local", "verl"}
    protocol = inspect.signature(Trainer.__call__)
    expected = protocol.replace(parameters=list(protocol.parameters.values())[1:])  # less self
    for name in TRAINERS:
        assert inspect.signature(TRAINERS.get(name)) == expected, name


def test_an_unknown_backend_is_a_one_line_config_error(tmp_path: Path) -> None:
    cfg = load_config(REPO / "config" / "config.yaml")
    bogus = cfg.model_copy(update={"compute": cfg.compute.model_copy(update={"backend": "slurm"})})
    with pytest.raises(ConfigError) as err:
        train_from_config(bogus, Run("tiny", "grpo", 0), tmp_path)
    assert str(err.value) == "compute.backend: unknown trainer backend 'slurm'; valid names: local, verl"
    with pytest.raises(ConfigError, match="compute.backend: Input should be 'local' or 'verl'"):
        load_config(REPO / "config" / "config.yaml", ["compute.backend=slurm"])


def test_the_configured_backend_is_the_one_called(tmp_path: Path) -> None:
    """Each backend is reached (and stops at its first missing input, before any work): the local trainer at the
    base model, verl (given a base folder it can read) at the training data it converts to parquet."""
    run = Run("tiny", "grpo", 0)
    local = load_config(REPO / "config" / "config.yaml")
    with pytest.raises(MissingInputError, match=str(paths.base_model_dir(tmp_path, "tiny"))):
        train_from_config(local, run, tmp_path)
    verl = load_config([REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"])
    assert verl.compute.backend == "verl"
    base = paths.base_model_dir(tmp_path, "qwen25_math_7b")
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    with pytest.raises(MissingInputError, match="run prepare_data first"):
        train_from_config(verl, Run("qwen25_math_7b", "grpo", 0), tmp_path)


def test_verl_refuses_the_local_trainers_options(tmp_path: Path) -> None:
    cfg = load_config([REPO / "config" / "config.yaml", REPO / "config" / "paper.yaml"])
    options = TrainOptions(device="cuda", old_logprobs="rollout", progress=False)
    assert options.local_only() == ["device", "old_logprobs"]
    with pytest.raises(ConfigError, match="^--device, --old-logprobs: local-trainer options"):
        train_from_config(cfg, Run("qwen25_math_7b", "grpo", 0), tmp_path, options)
