"""The math-verify call behind every verdict: runs in a grader worker process (or in-process for workers=0).

Gold and prediction go through math-verify 0.9.0 exactly as verl's ``utils/reward_score/math_verify.py``
calls it: gold ``parse("\\boxed{gold}", [LatexExtractionConfig()])``, prediction
``parse(text, [ExprExtractionConfig(), LatexExtractionConfig()])`` and ``verify(gold, pred)`` over both
parse lists (sympy objects and math-verify's fallback strings). The prediction text is
``\\boxed{extracted}``: extraction is done by :func:`acerl.grading.extract.extract_answer` beforehand.

One repair (:func:`parse_boxed`): the LaTeX parser that ``antlr4 4.9.3`` loads (pinned for hydra) raises on
every percent sign, so ``\\boxed{28\\%}`` parsed to a string only. A trailing percent is cut off, the number
is parsed, and it becomes math-verify's own percentage object (``convert_to_pct``), exactly what the parser
built for ``antlr4 4.13`` returns (docs/grading.md, "Percentages").

math-verify's own timeouts use ``signal.alarm``: these functions must run in a process's main thread and
take whole seconds. They cannot stop a computation stuck in C code (grading.md lists inputs that hang
for good): the pool in :mod:`acerl.grading.pool` kills such a worker from outside.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

Status = Literal["ok", "timeout", "no_answer", "error"]
Outcome = tuple[bool, Status, str | None]
"""``(correct, status, error message)`` for one ``(extracted, gold)`` pair."""

GOLD_CACHE_SIZE = 65536
# A percent sign at the end of an answer, in the forms math-verify's normalisation turns into ``\\%``.
_PERCENT_SUFFIX = re.compile(
    r"\s*(?:\\?%|\\text\{\s*(?:\\?%|percent|percentage|pct)\s*\}|\b(?:percent|percentage|pct))\s*$"
)
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


def parse_boxed(text: str, configs: list[Any], mv_timeout_s: int) -> list[Any]:
    """math-verify's ``parse("\\boxed{text}", configs)``, with a trailing percent read as math-verify means it.

    ``28\\%`` is parsed as ``28`` and returned as ``28 * (1/100)`` (unevaluated), the object latex2sympy
    builds for a percent number, with the fallback string ``28\\%``. A percent on anything but a number stays
    unparsed (a string only), as it is for math-verify.
    """
    from math_verify import parse

    suffix = _PERCENT_SUFFIX.search(text)
    number = text[: suffix.start()] if suffix is not None else ""
    if suffix is None or not number.strip():
        parsed: list[Any] = parse(boxed(text), configs, parsing_timeout=mv_timeout_s)
        return parsed
    from latex2sympy2_extended.latex2sympy2 import convert_to_pct
    from sympy import Number

    parsed = parse(boxed(number), configs, parsing_timeout=mv_timeout_s)
    return [
        convert_to_pct(item) if isinstance(item, Number) else item + "\\%"
        for item in parsed
        if isinstance(item, (Number, str))
    ]


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
    from math_verify import LatexExtractionConfig

    with _count_math_verify_timeouts() as timeouts:
        parsed = parse_boxed(gold, [LatexExtractionConfig()], mv_timeout_s)
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
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, verify
    from math_verify.errors import TimeoutException

    try:
        gold_parsed, gold_timed_out = parse_gold(gold, mv_timeout_s)
        if gold_timed_out:
            return False, "timeout", f"math-verify timed out parsing gold {gold!r}"
        if not gold_parsed:
            return False, "error", f"math-verify could not parse gold {gold!r}"
        with _count_math_verify_timeouts() as timeouts:
            pred_parsed = parse_boxed(
                extracted, [ExprExtractionConfig(), LatexExtractionConfig()], mv_timeout_s
            )
            correct = bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=mv_timeout_s)
    except (Exception, TimeoutException) as exc:  # TimeoutException is a BaseException
        return False, "error", f"{type(exc).__name__}: {exc}"
    if not correct and timeouts.count:
        return False, "timeout", "math-verify's own timeout fired"
    return correct, "ok", None


def warm_up() -> None:
    """Import math-verify and load its LaTeX parser, which the first parse does (its time: docs/grading.md,
    "Time limits and the worker pool")."""
    grade_answer("1", "1", 5)
