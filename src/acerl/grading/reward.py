"""verl reward function on the project grader: the same verdicts for training rewards as for evaluation.

verl (0.9.x reward loop) loads it with::

    reward.custom_reward_function.path=pkg://acerl.grading.reward
    reward.custom_reward_function.name=compute_score

(a file path to this module works too) and calls it from a thread pool, once per response. Extra
keywords come from ``+reward.custom_reward_function.reward_kwargs.<key>=<value>``:

- ``incorrect_score`` (default 0.0): the score of a wrong, unanswered or timed-out response; ``-1.0``
  gives DAPO's +1/-1 rewards (verl's ``dapo`` reward manager adds its overlong penalty on top).
- ``correct_score`` (default 1.0).
- ``grader_workers`` (default 2; 0 is taken as 1) and ``grader_timeout_s`` (default 10.0): the per-process
  :class:`~acerl.grading.Grader`, created on the first call; later calls reuse it (a different value is
  ignored with a warning). verl runs ``reward.num_workers`` reward processes, each with its own grader.

``correct_score`` and ``incorrect_score`` may also come per sample from ``extra_info`` (e.g.
``extra_info["incorrect_score"]``), which takes precedence over the keyword.
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

from acerl.grading.grader import Grader

logger = logging.getLogger(__name__)

_grader: Grader | None = None
_grader_lock = threading.Lock()


def get_grader(workers: int = 2, timeout_s: float = 10.0) -> Grader:
    """This process's shared grader, created on first use (thread-safe) and closed at exit.

    ``workers=0`` (in-process grading) needs the main thread, which verl's thread-pool calls are not: one
    worker process is used instead, with a warning.
    """
    global _grader
    if workers < 1:
        logger.warning(
            "acerl reward: grader_workers=%d cannot run in verl's reward threads; using 1", workers
        )
        workers = 1
    with _grader_lock:
        if _grader is None:
            _grader = Grader(timeout_s=timeout_s, workers=workers)
            atexit.register(_grader.close)
        elif (_grader.workers, _grader.timeout_s) != (workers, float(timeout_s)):
            logger.warning(
                "acerl reward grader already running with workers=%d timeout_s=%g; ignoring workers=%d timeout_s=%g",
                _grader.workers,
                _grader.timeout_s,
                workers,
                timeout_s,
            )
        return _grader


def close_grader() -> None:
    """Close this process's shared grader, if any (the next :func:`compute_score` starts a new one)."""
    global _grader
    with _grader_lock:
        if _grader is not None:
            _grader.close()
            atexit.unregister(_grader.close)
            _grader = None


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    *,
    correct_score: float = 1.0,
    incorrect_score: float = 0.0,
    grader_workers: int = 2,
    grader_timeout_s: float = 10.0,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's reward-function signature: ``{"score": float, "acc": bool, "pred": str}`` for one response.

    ``data_source`` is not used (every source is graded the same way); ``ground_truth`` is the reference
    answer (``reward_model.ground_truth``), not a solution. ``pred`` is the extracted answer ("" if none).
    Unknown keywords from verl (e.g. ``reward_router_address``) are ignored.
    """
    info = extra_info if isinstance(extra_info, dict) else {}
    correct_score = float(info.get("correct_score", correct_score))
    incorrect_score = float(info.get("incorrect_score", incorrect_score))
    verdict = get_grader(grader_workers, grader_timeout_s).grade(solution_str, str(ground_truth))
    return {
        "score": correct_score if verdict.correct else incorrect_score,
        "acc": verdict.correct,
        "pred": verdict.extracted or "",
    }
