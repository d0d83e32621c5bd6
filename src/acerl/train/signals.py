"""Graceful preemption: SIGTERM / SIGUSR1 / SIGINT ask the trainer to checkpoint at the next step boundary and exit.

SLURM sends SIGTERM at the time limit or on preemption (then SIGKILL after ``KillWait``, 30 s by default);
``#SBATCH --signal=USR1@120`` sends SIGUSR1 two minutes earlier. The trainer finishes the step in progress,
writes a checkpoint and raises :class:`TrainingPreempted`, a ``SystemExit`` with code
:data:`PREEMPTED_EXIT_CODE` (75, ``EX_TEMPFAIL``: "try again"), so the process exits with 75 even if no
caller catches it; rerunning the same command resumes from that checkpoint. Ctrl-C (SIGINT) does the same and
exits with 130 (an interrupt, as every ``acerl`` command); a second Ctrl-C stops at once (``KeyboardInterrupt``,
losing the steps since the last checkpoint).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType

from acerl.errors import EXIT_INTERRUPTED

logger = logging.getLogger(__name__)

__all__ = ["PREEMPTED_EXIT_CODE", "PREEMPT_SIGNALS", "PreemptionFlag", "TrainingPreempted", "exit_code_of"]

PREEMPTED_EXIT_CODE = 75
"""Exit status of a trainer that checkpointed and stopped on SIGTERM / SIGUSR1 (``EX_TEMPFAIL``)."""

PREEMPT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def exit_code_of(signum: int) -> int:
    """The trainer's exit status after the checkpoint a signal asked for: 130 for Ctrl-C (SIGINT, as any
    interrupted ``acerl`` command), :data:`PREEMPTED_EXIT_CODE` for SIGTERM / SIGUSR1."""
    return EXIT_INTERRUPTED if signum == signal.SIGINT else PREEMPTED_EXIT_CODE


class TrainingPreempted(SystemExit):
    """Raised after the preemption checkpoint is written; exits the process with :data:`PREEMPTED_EXIT_CODE`
    (130 after Ctrl-C, :func:`exit_code_of`)."""

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(exit_code_of(signum))
        self.step = step
        self.signum = signum

    def __str__(self) -> str:
        return (
            f"training preempted by {signal.Signals(self.signum).name} after step {self.step} "
            f"(checkpoint written; exit code {self.code})"
        )


class PreemptionFlag:
    """Context manager installing handlers for :data:`PREEMPT_SIGNALS` that only record the signal.

    A SIGINT after any of them (a second Ctrl-C) raises ``KeyboardInterrupt`` at once. Outside the main thread
    (where Python cannot install handlers) it does nothing. Previous handlers are restored on exit.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[signal.Signals, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum is not None:
            raise KeyboardInterrupt
        if self.signum is None:
            again = " (Ctrl-C again stops at once)" if signum == signal.SIGINT else ""
            logger.warning(
                "received %s: will checkpoint and stop after this step%s", signal.Signals(signum).name, again
            )
        self.signum = signum

    def __enter__(self) -> PreemptionFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in PREEMPT_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned for sig
        self._previous.clear()
