"""Subprocess entry for the kill / signal tests:
``python train_worker.py ROOT METHOD STEPS SAVE_EVERY DELAY [DEVICE]``.

Trains the tiny run with :class:`conftest.DigitVerifier`, sleeping ``DELAY`` seconds per grading call so a
test can interrupt it between checkpoints. On a CUDA ``DEVICE`` torch's deterministic algorithms are on (with
``CUBLAS_WORKSPACE_CONFIG`` set by the caller), so an interrupted and resumed run can match an unbroken one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainer_fixtures import DigitVerifier, make_config  # noqa: E402

from acerl.config import Run  # noqa: E402
from acerl.config.settings import resolve
from acerl.train import train_run  # noqa: E402


class SlowVerifier(DigitVerifier):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def grade_many(self, items, *, progress=None):
        time.sleep(self.delay)
        return super().grade_many(items, progress=progress)


def main() -> None:
    root, method, steps, save_every, delay = sys.argv[1:6]
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    if device.startswith("cuda"):
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)
    cfg = make_config(f"models.tiny.train.total_steps={steps}", f"models.tiny.train.save_every={save_every}")
    settings = resolve(cfg, Run("tiny", method, 0))
    train_run(settings, Path(root), verifier=SlowVerifier(float(delay)), progress=False, device=device)


if __name__ == "__main__":
    main()
