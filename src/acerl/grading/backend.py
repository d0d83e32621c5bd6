"""The math-verify call behind every verdict: runs in a grader worker process (or in-process for workers=0).

Gold and prediction go through math-verify 0.9.0 exactly as verl's ``utils/reward_score/math_verify.py``
calls it: gold ``parse("\\boxed{gold}", [LatexExtractionConfig()])``, prediction
``parse(text, [ExprExtractionConfig(), LatexExtractionConfig()])`` and ``verify(gold, pred)`` over both
parse lists (sympy objects and math-verify's fallback strings). The prediction text is
``\\boxed{extracted}``: extraction is done by :func:`acerl.grading.extract.extract_answer` beforehand.

math-verify's own timeouts use ``signal.alarm``: these functions must run in a process's main thread and
take whole seconds. They cannot stop a computation stuck in C code (grading.md lists inputs that hang
for good): the pool in :mod:`acerl.grading.pool` kills such a worker from outside.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

Status = Literal["ok", "timeout", "no_answer", "error"]
Outcome = tuple[bool, Status, str | None]
"""``(correct, status, error message)`` for one ``(extracted, gold)`` pair."""

GOLD_CACHE_SIZE = 65536
_gold_cache: OrderedDict[str, list[Any]] = OrderedDict()


def boxed(text: str) -> str:
    """``\\boxed{text}``: how golds and extracted answers are wrapped before math-verify parses them."""
    return "\\boxed{" + text + "}"


class _TimeoutCounter(logging.Handler):
    """Counts math-verify's "Timeout during parsing/comparison" warnings (its timeouts do not raise)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Timeout during"):
            self.count += 1


@contextmanager
def _count_math_verify_timeouts() -> Iterator[_TimeoutCounter]:
    logger = logging.getLogger("math_verify")
    counter = _TimeoutCounter()
    logger.addHandler(counter)
    try:
        yield counter
    finally:
        logger.removeHandler(counter)


def _check_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "math-verify's timeouts use signal.alarm, which only works in the main thread; grade in-process "
            "(Grader(workers=0)) only from the main thread, or use workers >= 1"
        )


def parse_gold(gold: str, mv_timeout_s: int) -> tuple[list[Any], bool]:
    """``(parsed gold, timed_out)`` for ``\\boxed{gold}``, parsed once per gold string (LRU cache).

    A parse that timed out is not cached: it is retried the next time that gold comes up.
    """
    cached = _gold_cache.get(gold)
    if cached is not None:
        _gold_cache.move_to_end(gold)
        return cached, False
    from math_verify import LatexExtractionConfig, parse

    with _count_math_verify_timeouts() as timeouts:
        parsed = parse(boxed(gold), [LatexExtractionConfig()], parsing_timeout=mv_timeout_s)
    if timeouts.count:
        return parsed, True
    _gold_cache[gold] = parsed
    if len(_gold_cache) > GOLD_CACHE_SIZE:
        _gold_cache.popitem(last=False)
    return parsed, False


def grade_answer(extracted: str, gold: str, mv_timeout_s: int) -> Outcome:
    """math-verify's verdict on ``\\boxed{extracted}`` against ``\\boxed{gold}``; never raises.

    Status ``timeout`` if a math-verify timeout fired and the answer was not found correct; ``error`` if
    the gold does not parse or math-verify raised.
    """
    _check_main_thread()
    if not isinstance(mv_timeout_s, int) or mv_timeout_s < 1:
        raise ValueError(f"mv_timeout_s must be a whole number of seconds >= 1, got {mv_timeout_s!r}")
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    from math_verify.errors import TimeoutException

    try:
        gold_parsed, gold_timed_out = parse_gold(gold, mv_timeout_s)
        if gold_timed_out:
            return False, "timeout", f"math-verify timed out parsing gold {gold!r}"
        if not gold_parsed:
            return False, "error", f"math-verify could not parse gold {gold!r}"
        with _count_math_verify_timeouts() as timeouts:
            pred_parsed = parse(
                boxed(extracted),
                [ExprExtractionConfig(), LatexExtractionConfig()],
                parsing_timeout=mv_timeout_s,
            )
            correct = bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=mv_timeout_s)
    except (Exception, TimeoutException) as exc:  # TimeoutException is a BaseException
        return False, "error", f"{type(exc).__name__}: {exc}"
    if not correct and timeouts.count:
        return False, "timeout", "math-verify's own timeout fired"
    return correct, "ok", None


def warm_up() -> None:
    """Import math-verify and load its LaTeX parser (the first parse takes about 0.1 s)."""
    grade_answer("1", "1", 5)
