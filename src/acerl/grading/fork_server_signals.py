"""Imported only by the grader's fork server (:data:`acerl.grading.pool.PRELOAD`): it ignores SIGTERM, and so
does every worker it forks.

A scheduler's preemption signals every process of a job (SLURM's ``scancel --signal=TERM``, the SIGTERM before
a time limit). The trainer then finishes its step and checkpoints, for which it needs its grader. A fork
server killed by that signal broke the next worker start (``EOFError`` reading the new worker's pid) and with
it the pool, under load (the SLURM preemption test). The fork server still exits with its parent (its alive
pipe closes), SIGKILL still ends it, and the pool stops its workers by message or SIGKILL.

Never import this module in any other process: the importing process stops reacting to SIGTERM.
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
