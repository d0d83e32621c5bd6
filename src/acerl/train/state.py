"""The mutable state of a local training run: what a step changes and a checkpoint restores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from acerl.optim import Schedule, TrainOptimizer
from acerl.train.data import PromptStream

__all__ = ["TrainState"]


@dataclass
class TrainState:
    """The mutable state of a run (everything a checkpoint restores, plus the fixed reference)."""

    model: torch.nn.Module
    ref_model: torch.nn.Module | None
    tokenizer: Any
    optimizer: TrainOptimizer
    scheduler: Schedule
    generator: torch.Generator
    stream: PromptStream
    fill_stream: PromptStream  # dynamic sampling's extra batches (the main stream gives each step's first)
    step: int = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
