"""The local trainer (single process, CPU or one GPU): Algorithm 1 of the paper in one small loop.

Entry point :func:`train_run`; ``acerl train`` for manual use. See docs/training.md.
"""

from acerl.train.algorithm import train_step
from acerl.train.run import train_run
from acerl.train.signals import PREEMPTED_EXIT_CODE, TrainingPreempted

__all__ = [
    "PREEMPTED_EXIT_CODE",
    "TrainingPreempted",
    "train_run",
    "train_step",
]
