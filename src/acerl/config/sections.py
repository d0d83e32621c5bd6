"""Typed settings of the parts the config configures but which live above it: the tiny model's architecture
(``models.<m>.tiny``, read by :mod:`acerl.models.tiny`), its supervised fine-tuning (``models.<m>.sft``, read by
:mod:`acerl.models.sft`) and the synthetic task's parameters (``data.synthetic.params``, read by
:func:`acerl.data.synthetic.write_splits`).

They sit below :mod:`acerl.config` so the schema nests them as sections (a misspelt key or a wrong value fails
``acerl config`` with the key's path, not a ``prepare_*`` job minutes later) without importing the torch-heavy
modules that use them. Each class is the one home of its keys' names, types, defaults and checks.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["SFTConfig", "SyntheticParams", "TinyModelConfig"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TinyModelConfig(_Section):
    """Architecture of the tiny Llama (defaults: 341K parameters)."""

    hidden_size: int = Field(128, ge=1, description="model width d")
    num_layers: int = Field(2, ge=1, description="transformer blocks")
    num_heads: int = Field(4, ge=1, description="attention heads (head dim = hidden_size / num_heads)")
    num_kv_heads: int = Field(
        4, ge=1, description="key/value heads (= num_heads: plain multi-head attention)"
    )
    intermediate_size: int = Field(256, ge=1, description="SwiGLU hidden width")
    max_position_embeddings: int = Field(
        256, ge=1, description="longest prompt + response in tokens (characters)"
    )
    rope_theta: float = Field(10000.0, gt=0)
    tie_word_embeddings: bool = True
    initializer_range: float = Field(0.02, gt=0)

    @model_validator(mode="after")
    def _divisible_heads(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads != 0:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}"
            )
        return self


class SFTConfig(_Section):
    """Supervised fine-tuning settings of the tiny base model."""

    steps: int = Field(450, ge=1, description="optimizer steps")
    seed: int | None = Field(
        None,
        ge=0,
        description="seed of the initial weights and the batch order (None: data.synthetic.seed); models that "
        "differ only here are independently SFT'd bases of one recipe (config/gate.yaml)",
    )
    batch_size: int = Field(64, ge=1, description="sequences per step")
    lr: float = Field(3e-3, gt=0, description="peak AdamW learning rate")
    warmup_steps: int = Field(30, ge=0, description="linear warm-up from 0 to lr (at most steps)")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine decay ends at lr * min_lr_ratio")
    weight_decay: float = Field(0.01, ge=0)
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = Field(1.0, gt=0, description="global gradient-norm clip")
    template: str = Field(
        "plain",
        description="prompt template (acerl.prompts); in a config, the model's template unless set here",
    )
    log_every: int = Field(25, ge=1, description="steps per loss-curve point (and log line)")
    eval_rows: int = Field(200, ge=0, description="rows of each evaluation file scored at the end")

    @model_validator(mode="after")
    def _warmup_within_steps(self) -> SFTConfig:
        if self.warmup_steps > self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps], got {self.warmup_steps} > {self.steps}")
        return self


class SyntheticParams(_Section):
    """Sizes, difficulties and the mistake model of the synthetic task's splits (docs/tiny_task.md)."""

    sizes: dict[str, int] | None = Field(
        None,
        description="problems per split, merged over acerl.data.synthetic.DEFAULT_SIZES (0 skips a split)",
    )
    difficulties: dict[str, str | list[str] | dict[str, Any]] | None = Field(
        None,
        description="per split: a preset name, a list of presets (equal mixture) or Difficulty fields; merged "
        "over DEFAULT_DIFFICULTIES",
    )
    mistake_rate: float = Field(
        0.5, ge=0, le=1, description="share of worked solutions in mistake_splits that carry one mistake"
    )
    mistake_weights: dict[str, float] | None = Field(
        None, description="relative frequency per mistake type (None: DEFAULT_MISTAKE_WEIGHTS)"
    )
    mistake_splits: tuple[str, ...] = Field(("sft",), description="splits whose solutions carry mistakes")

    @field_validator("sizes")
    @classmethod
    def _sizes_not_negative(cls, v: dict[str, int] | None) -> dict[str, int] | None:
        negative = sorted(k for k, n in (v or {}).items() if n < 0)
        if negative:
            raise ValueError(f"split size(s) of {negative} below 0; give 0 to skip a split")
        return v
