"""The grader: response + gold -> :class:`Verdict`, used for training rewards, evaluation and reports.

Per item, in order (all but the last step run in the calling thread and cost microseconds):

1. :func:`~acerl.grading.extract.extract_answer`; no anchor -> ``no_answer``.
2. The verdict cache, keyed by ``(extracted, gold)``: repeats are free.
3. The exact fast path for plain integers and simple fractions (:mod:`acerl.grading.fastpath`).
4. math-verify (:mod:`acerl.grading.backend`) in a pool of worker processes with a hard per-item
   wall-clock limit (:mod:`acerl.grading.pool`), or in-process when ``workers=0``.
5. An item that timed out is graded once more, with ``retry_factor`` times both limits, in a worker of a
   second pool (:meth:`Grader._retry_timeouts`): on a loaded machine a correct answer's first parse can
   miss a limit it meets on a quiet one, and a timeout must not decide a grade that more time would. What
   still times out stays ``timeout`` and is counted (:attr:`GraderStats.timeouts`, and per run in the scored
   file's ``status`` column and the Pass@k record).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, cast

from acerl.grading.backend import Outcome, Status, grade_answer
from acerl.grading.extract import extract_answer
from acerl.grading.fastpath import fast_verdict
from acerl.grading.pool import POOL_ERROR, Pair, WorkerPool

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """The grade of one response.

    ``status``: ``ok`` (math-verify or the fast path decided), ``no_answer`` (no ``\\boxed{}`` and no
    ``Answer:`` line), ``timeout`` (the hard limit killed the worker, or math-verify's own timeout fired) or
    ``error`` (the gold does not parse, math-verify raised, or a worker died); ``correct`` is False unless
    ``status == "ok"``. ``extracted`` is the answer that was graded; ``error`` says what went wrong.
    """

    correct: bool
    status: Status
    extracted: str | None
    error: str | None = None


@dataclass
class GraderStats:
    """Where the items of a grader's lifetime were decided (counts)."""

    items: int = 0
    no_answer: int = 0
    cache_hits: int = 0
    fast_path: int = 0
    math_verify: int = 0
    timeouts: int = 0  # items still ``timeout`` after their retry
    retried: int = 0  # distinct items that timed out once and were graded again with longer limits
    errors: int = 0


class Grader:
    """math-verify grading with extraction policy, caches, a fast path and hard timeouts.

    Use as a context manager (or call :meth:`close`); worker processes start on the first item that
    needs math-verify and stay up until closed. :meth:`grade` and :meth:`grade_many` may be called from
    several threads at once (workers >= 1); items in flight for one call are shared with the others.

    Args:
        timeout_s: hard wall-clock limit per item sent to a worker, from hand-over to verdict; past it the
            worker is killed, the item is ``timeout`` and a new worker is started. Not enforced with
            ``workers=0``, where only math-verify's own timeouts apply.
        workers: worker processes; 0 grades in the calling thread, which must be the main thread.
        mv_timeout_s: math-verify's own timeouts (parse, and each verify comparison), whole seconds;
            default ``max(1, int(timeout_s) // 2)``. They end most slow items without a kill.
        retry_factor: an item that timed out is graded once more with both limits this many times longer, in
            another worker (a second pool of the same size; in-process with ``workers=0``); 0 turns it off.
        cache_size: verdicts kept (LRU) keyed by ``(extracted, gold)``.
        mp_context: ``"forkserver"`` (default: workers fork from a server that has math-verify loaded,
            so a replacement is ready at once) or ``"spawn"`` (each worker imports sympy itself).
        progress: show a tqdm bar in :meth:`grade_many` by default.
    """

    def __init__(
        self,
        timeout_s: float = 10.0,
        workers: int = 2,
        *,
        mv_timeout_s: int | None = None,
        retry_factor: int = 2,
        cache_size: int = 1 << 17,
        mp_context: Literal["forkserver", "spawn"] = "forkserver",
        progress: bool = False,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if mv_timeout_s is None:
            mv_timeout_s = max(1, int(timeout_s) // 2)
        if not isinstance(mv_timeout_s, int) or mv_timeout_s < 1:
            raise ValueError(
                f"mv_timeout_s must be an int >= 1 (signal.alarm takes whole seconds), got {mv_timeout_s!r}"
            )
        if not isinstance(retry_factor, int) or retry_factor < 0 or retry_factor == 1:
            raise ValueError(
                f"retry_factor must be 0 (no retry) or a whole number >= 2, got {retry_factor!r}"
            )
        self.timeout_s = float(timeout_s)
        self.workers = workers
        self.mv_timeout_s = mv_timeout_s
        self.retry_factor = retry_factor
        self._mp_context: Literal["forkserver", "spawn"] = mp_context
        self._retry_pool: WorkerPool | None = None
        self._retry_finalizer: weakref.finalize[[], Grader] | None = None
        self.progress = progress
        self.stats = GraderStats()
        self._cache_size = cache_size
        self._cache: OrderedDict[Pair, Outcome] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = WorkerPool(workers, self.timeout_s, mv_timeout_s, mp_context) if workers > 0 else None
        self._finalizer = weakref.finalize(self, self._pool.close) if self._pool is not None else None

    def __enter__(self) -> Grader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (idempotent). The grader cannot grade with workers after this."""
        for finalizer in (self._finalizer, self._retry_finalizer):
            if finalizer is not None:
                finalizer()

    def clear_cache(self) -> None:
        """Forget the cached verdicts (the workers keep their parsed golds)."""
        with self._lock:
            self._cache.clear()

    def worker_pids(self) -> list[int]:
        """PIDs of the live worker processes (empty before the first math-verify item and after close)."""
        return self._pool.worker_pids() if self._pool is not None else []

    def grade(self, response: str, gold: str) -> Verdict:
        """The verdict on one ``response`` against ``gold`` (the reference answer, not a solution)."""
        return self.grade_many([(response, gold)], progress=False)[0]

    def grade_many(self, items: Sequence[tuple[str, str]], *, progress: bool | None = None) -> list[Verdict]:
        """Verdicts for ``items`` (``(response, gold)`` pairs), in order; a tqdm bar if ``progress``."""
        extracted: list[str | None] = []
        outcomes: list[Outcome | None] = []
        todo: dict[Pair, list[int]] = {}
        n_cached = n_fast = 0
        for index, (response, gold) in enumerate(items):
            if not isinstance(response, str) or not isinstance(gold, str):
                raise TypeError(
                    f"item {index}: expected (response: str, gold: str), got "
                    f"({type(response).__name__}, {type(gold).__name__})"
                )
            answer = extract_answer(response)
            extracted.append(answer)
            outcome: Outcome | None = None
            if answer is None:
                outcome = (False, "no_answer", None)
            else:
                pair = (answer, gold.strip())
                outcome = self._cache_get(pair)
                if outcome is not None:
                    n_cached += 1
                else:
                    fast = fast_verdict(*pair)
                    if fast is not None:
                        outcome = (fast, "ok", None)
                        n_fast += 1
                    else:
                        todo.setdefault(pair, []).append(index)
            outcomes.append(outcome)

        if todo:
            results = self._retry_timeouts(self._grade_pairs(list(todo), len(items) - len(todo), progress))
            for pair, outcome in results.items():
                self._cache_put(pair, outcome)
                for index in todo[pair]:
                    outcomes[index] = outcome

        graded = cast("list[Outcome]", outcomes)  # every item has its outcome now
        verdicts = [Verdict(o[0], o[1], x, o[2]) for o, x in zip(graded, extracted, strict=True)]
        self._count(verdicts, n_cached, n_fast, len(todo))
        return verdicts

    def _grade_pairs(self, pairs: list[Pair], n_done: int, progress: bool | None) -> dict[Pair, Outcome]:
        """math-verify outcomes for distinct pairs, from the pool or in-process."""
        show = self.progress if progress is None else progress
        bar = None
        if show:
            from tqdm.auto import tqdm

            bar = tqdm(total=n_done + len(pairs), initial=n_done, desc="grading", unit="item")
        try:
            if self._pool is None:
                results = {}
                for pair in pairs:
                    results[pair] = grade_answer(*pair, self.mv_timeout_s)
                    if bar is not None:
                        bar.update(1)
                return results

            def on_progress(n: int) -> None:
                if bar is not None:
                    bar.update(n_done + n - bar.n)

            return self._pool.submit(pairs).wait(on_progress if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()

    def _retry_timeouts(self, results: dict[Pair, Outcome]) -> dict[Pair, Outcome]:
        """Grade the pairs that timed out once more with ``retry_factor`` times both limits, in a worker of a
        second pool (started on the first retry), or in-process with ``workers=0``. A pair still timed out
        keeps ``timeout``, its error giving both attempts."""
        timed_out = [pair for pair, outcome in results.items() if outcome[1] == "timeout"]
        if not timed_out or self.retry_factor == 0:
            return results
        factor = self.retry_factor
        logger.info(
            "grader: %d item(s) timed out; grading them again with %dx the limits", len(timed_out), factor
        )
        if self._pool is None:
            again = {pair: grade_answer(*pair, self.mv_timeout_s * factor) for pair in timed_out}
        else:
            with self._lock:
                if self._retry_pool is None:
                    self._retry_pool = WorkerPool(
                        self.workers, self.timeout_s * factor, self.mv_timeout_s * factor, self._mp_context
                    )
                    self._retry_finalizer = weakref.finalize(self, self._retry_pool.close)
                pool = self._retry_pool
            again = pool.submit(timed_out).wait(None)
        with self._lock:
            self.stats.retried += len(timed_out)
        out = dict(results)
        for pair, (correct, status, error) in again.items():
            if status == "timeout":
                error = f"{results[pair][2]}; graded again with {factor}x the limits: {error}"
            out[pair] = (correct, status, error)
        return out

    def _cache_get(self, pair: Pair) -> Outcome | None:
        with self._lock:
            outcome = self._cache.get(pair)
            if outcome is not None:
                self._cache.move_to_end(pair)
            return outcome

    def _cache_put(self, pair: Pair, outcome: Outcome) -> None:
        if outcome[1] == "error" and (outcome[2] or "").startswith(POOL_ERROR):
            return  # a dead worker or a closed grader: not a property of the pair
        with self._lock:
            self._cache[pair] = outcome
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _count(self, verdicts: list[Verdict], n_cached: int, n_fast: int, n_math_verify: int) -> None:
        with self._lock:
            stats = self.stats
            stats.items += len(verdicts)
            stats.cache_hits += n_cached
            stats.fast_path += n_fast
            stats.math_verify += n_math_verify
            for verdict in verdicts:
                stats.no_answer += verdict.status == "no_answer"
                stats.timeouts += verdict.status == "timeout"
                stats.errors += verdict.status == "error"
