"""The training prompts: the seeded stream of row indices (Alg. 1 line 2) and the encoded training set.

Each epoch is a fresh permutation of the training rows drawn from ``numpy.random.default_rng((seed, epoch))``;
batches are consecutive slices of the concatenated epochs (a batch may straddle an epoch boundary). The
state is two integers, so a checkpoint restores the exact stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from acerl.errors import BadInputError, fix_command
from acerl.generate.base import encode_prompt
from acerl.prompts import build_prompt

__all__ = ["PromptStream", "TrainingSet"]


@dataclass
class PromptStream:
    """Indices into a dataset of ``size`` rows, ``k`` at a time, epoch after epoch.

    Args:
        size: number of training rows (> 0).
        seed: shuffling seed (the run seed).
        epoch: epochs completed so far; position: rows of the current epoch already drawn.
    """

    size: int
    seed: int
    epoch: int = 0
    position: int = 0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("the training set is empty")
        self._order: np.ndarray | None = None

    def _permutation(self) -> np.ndarray:
        if self._order is None:
            self._order = np.random.default_rng((self.seed, self.epoch)).permutation(self.size)
        return self._order

    def next(self, k: int) -> list[int]:
        """The next ``k`` row indices (continuing into the next epoch when this one runs out)."""
        out: list[int] = []
        while len(out) < k:
            order = self._permutation()
            take = min(k - len(out), self.size - self.position)
            out.extend(int(i) for i in order[self.position : self.position + take])
            self.position += take
            if self.position == self.size:
                self.epoch, self.position, self._order = self.epoch + 1, 0, None
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None


@dataclass
class TrainingSet:
    """Training rows (``problem``, ``answer``) with their prompts encoded on first use."""

    rows: list[dict[str, Any]]
    tokenizer: Any
    template: str
    max_prompt_length: int
    source: Path
    _ids: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.rows:
            raise BadInputError(
                f"{self.source}: no training problems (an empty training set); delete it and run "
                f"{fix_command('prepare-data')}"
            )

    def __len__(self) -> int:
        return len(self.rows)

    def prompt_ids(self, i: int) -> list[int]:
        if i not in self._ids:
            row = self.rows[i]
            ids = encode_prompt(self.tokenizer, build_prompt(row["problem"], self.template, self.tokenizer))
            if len(ids) > self.max_prompt_length:
                raise ValueError(
                    f"{self.source}: row {row.get('id', i)!r} has a {len(ids)}-token prompt, longer than "
                    f"max_prompt_length={self.max_prompt_length} (models.<model>.train.max_prompt_length)"
                )
            self._ids[i] = ids
        return self._ids[i]

    def answer(self, i: int) -> str:
        return str(self.rows[i]["answer"])
