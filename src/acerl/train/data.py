"""The training prompt stream: seeded epoch shuffling with a resumable position (Alg. 1 line 2).

Each epoch is a fresh permutation of the training rows drawn from ``numpy.random.default_rng((seed, epoch))``;
batches are consecutive slices of the concatenated epochs (a batch may straddle an epoch boundary). The
state is two integers, so a checkpoint restores the exact stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PromptStream"]


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
