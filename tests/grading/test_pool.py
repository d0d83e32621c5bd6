"""The worker pool: hard per-item time limit, killed and dead workers replaced, threads, clean shutdown."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from types import SimpleNamespace

import pytest

from acerl.grading import Grader
from acerl.grading.pool import MAX_ATTEMPTS, MAX_START_FAILURES, POOL_ERROR, WorkerPool

# Inputs from grading.md that take math-verify seconds (or, on some versions, forever).
HANGING_DFRAC = "\\boxed{\\dfrac{5^{\\left(5^{\\left(5^{\\left(5^5\\right)}\\right)} - 4\\right)} - 5}{16}}"
SLOW = [HANGING_DFRAC, "\\boxed{9^{9^{9^9}}}", "\\boxed{2^{2^{30}}}"]
MORE_SLOW = [
    "\\boxed{10^{10^{10}}}",
    "\\boxed{1000000!}",
    "\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}",
    "\\boxed{\\int_0^1 \\frac{\\ln(1+x^{7})\\sin(x^3)}{\\sqrt{1+x^{11}}}\\,dx}",
]
# Cheap items that still go through math-verify (not the fast path), with their expected verdicts.
NORMAL = [
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt 2}", True),
    ("\\boxed{x+1}", "1+x", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{(1, 2]}", "(1,2]", True),
    ("\\boxed{[1, 2]}", "(1,2]", False),
]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# Small limits, with headroom for a shared 2-core machine under heavy load.
@pytest.fixture(scope="module")
def pool():
    """Two workers, 4 s hard limit, math-verify's own timeouts 2 s."""
    with Grader(timeout_s=4, workers=2, mv_timeout_s=2) as g:
        yield g


@pytest.fixture(scope="module")
def one_worker():
    """One worker, 3 s hard limit, math-verify's own timeouts longer than it: slow items need a kill."""
    with Grader(timeout_s=3, workers=1, mv_timeout_s=30) as g:
        yield g


def _check_adversarial(grader: Grader, slow: list[str]) -> None:
    many_distinct = " ".join(f"\\boxed{{{i}}}" for i in range(5000))
    many_same = " ".join(["\\boxed{3}"] * 5000)
    items = [(s, "3") for s in slow] + [(many_distinct, "3"), (many_same, "3")]
    items += [(r, g) for r, g, _ in NORMAL]
    verdicts = grader.grade_many(items)
    got = [(v.correct, v.status) for v in verdicts]
    expected = [(False, "timeout")] * len(slow)
    expected += [(False, "ok"), (True, "ok")]  # a 64-element set; 5,000 identical boxes collapse to one
    expected += [(ok, "ok") for _, _, ok in NORMAL]
    assert got == expected, verdicts


def test_adversarial_inputs_time_out_and_later_items_are_graded(pool):
    _check_adversarial(pool, SLOW)


@pytest.mark.slow
def test_more_adversarial_inputs(pool):
    _check_adversarial(pool, MORE_SLOW)


def test_threads_share_the_pool(pool):
    items = [(r, g) for r, g, _ in NORMAL] * 8 + [("\\boxed{7}", "7"), ("nothing", "7")]
    expected = [ok for _, _, ok in NORMAL] * 8 + [True, False]
    with ThreadPoolExecutor(max_workers=8) as executor:
        verdicts = list(executor.map(lambda item: pool.grade(*item), items))
    assert [v.correct for v in verdicts] == expected


_WARM_UP = itertools.count(100)  # distinct warm-up items: a cached pair would not reach a worker


def _a_live_worker(grader: Grader, attempts: int = 20) -> int:
    """The PID of the main pool's one worker once it has graded an item itself. Under load a warm-up item can
    time out at a test's short limit (its worker is then killed and the retry pool grades it), so distinct
    warm-up items are graded until one leaves a live worker behind; ``attempts`` of them bound a stuck pool."""
    for _ in range(attempts):
        n = next(_WARM_UP)
        assert grader.grade(f"\\boxed{{x+{n}}}", f"{n}+x").correct
        pids = grader.worker_pids()
        if pids:
            (pid,) = pids
            return pid
    raise AssertionError(f"no grading worker stayed up over {attempts} warm-up items")


def test_stuck_worker_is_killed_and_replaced(one_worker, caplog):
    first_pid = _a_live_worker(one_worker)
    retried, timeouts = one_worker.stats.retried, one_worker.stats.timeouts
    items = [("\\boxed{9^{9^{9^9}}}", "3")] + [(r, g) for r, g, _ in NORMAL]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="acerl.grading.pool"):
        verdicts = one_worker.grade_many(items)
    timed_out = verdicts[0]
    assert (timed_out.correct, timed_out.status) == (False, "timeout")
    # graded once more with twice the limits in a worker of the retry pool, which timed out too
    assert timed_out.error == (
        "no verdict within 3 s: worker killed; graded again with 2x the limits: no verdict within 6 s: worker killed"
    )
    assert (one_worker.stats.retried - retried, one_worker.stats.timeouts - timeouts) == (1, 1)
    kills = [r.getMessage() for r in caplog.records if "killing" in r.getMessage()]
    assert kills[0] == f"grading '9^{{9^{{9^9}}}}' took over 3.0 s: killing worker {first_pid}"
    assert kills[1].startswith("grading '9^{9^{9^9}}' took over 6.0 s: killing worker ") and len(kills) == 2
    assert [(v.correct, v.status) for v in verdicts[1:]] == [(ok, "ok") for _, _, ok in NORMAL]
    (second_pid,) = one_worker.worker_pids()
    assert second_pid != first_pid and _gone(first_pid)  # killed and reaped: no zombie
    # the timeout is cached: the same pair again costs nothing and gives the same verdict
    assert one_worker.grade("\\boxed{9^{9^{9^9}}}", "3") == verdicts[0]
    assert one_worker.worker_pids() == [second_pid]


def test_worker_that_dies_is_replaced(one_worker, caplog):
    idle_pid = _a_live_worker(one_worker)
    os.kill(idle_pid, signal.SIGKILL)  # dies while idle
    busy_pid = _a_live_worker(one_worker)
    assert busy_pid != idle_pid and _gone(idle_pid)

    result = {}
    thread = threading.Thread(target=lambda: result.update(v=one_worker.grade("\\boxed{10^{10^{10}}}", "7")))
    caplog.clear()  # the idle worker's death may be seen only when the next item reaches it, and logged then
    with caplog.at_level(logging.WARNING, logger="acerl.grading.pool"):
        thread.start()
        time.sleep(0.5)
        os.kill(busy_pid, signal.SIGKILL)  # dies while grading: the item is retried on a new worker ...
        thread.join()
    assert result["v"].status == "timeout" and "killed" in result["v"].error  # ... which the hard limit kills
    deaths = [r.getMessage() for r in caplog.records if "died" in r.getMessage()]
    assert deaths == [f"grader worker {busy_pid} died (exit code -9) on ('10^{{10^{{10}}}}', '7')"]
    assert one_worker.grade("\\boxed{x+5}", "5+x").correct
    assert _gone(busy_pid) and busy_pid not in one_worker.worker_pids()


def test_close_leaves_no_processes():
    """Workers start lazily and ``close`` ends them all. They are daemonic and named: should the grader's own
    finalizer not run, multiprocessing's exit handler terminates them instead of waiting for them; a worker's
    log records carry its name (logging's ``processName``)."""
    with Grader(timeout_s=5, workers=2) as g:
        assert g.worker_pids() == []  # workers start lazily
        assert g.grade("\\boxed{7}", "7").correct  # fast path: still no workers
        assert g.worker_pids() == []
        assert g.grade("\\boxed{x+1}", "1+x").correct
        pids = g.worker_pids()
        assert 1 <= len(pids) <= 2
        assert {(w.process.name, w.process.daemon) for w in g._pool._workers} == {("acerl-grader", True)}
        ready = [w.process for w in g._pool._workers if w.ready]  # the second may still be starting
        assert ready
    assert g.worker_pids() == []
    # idle workers are asked to stop, not killed (one still starting is killed)
    assert [process.exitcode for process in ready] == [0] * len(ready)
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        g.grade("\\boxed{x+1}", "2+x")


def test_a_broken_dispatcher_fails_the_waiting_caller_instead_of_grading_it_wrong(monkeypatch, caplog):
    """When the pool itself breaks (here its worker start, as when every worker dies while starting), the batch
    being graded raises in the caller; scoring its items ``error`` would train on, or report, zero rewards."""

    def broken_start(self):
        raise RuntimeError("grader worker died while starting (exit code 1), 3 times")

    monkeypatch.setattr(WorkerPool, "_maintain_workers", broken_start)
    with Grader(timeout_s=5, workers=1) as g:
        with pytest.raises(RuntimeError, match="(?s)grader workers failed: .*died while starting"):
            g.grade_many([("\\boxed{x+1}", "1+x"), ("\\boxed{x+2}", "2+x")])
        with pytest.raises(RuntimeError, match="grader workers failed"):  # and every later batch
            g.grade("\\boxed{x+3}", "3+x")
        assert g.grade("\\boxed{7}", "7").correct  # the fast path needs no worker
        assert g._cache == {}  # nothing of the failure was cached as a verdict
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith("grader dispatcher crashed:\nTraceback (most recent call last):")
    assert record.getMessage().endswith(
        "RuntimeError: grader worker died while starting (exit code 1), 3 times\n"
    )


def test_pool_settings_and_their_checks():
    """The fork server by default, 300 s to start a worker; one worker at least, and never ``fork``."""
    p = WorkerPool(1, 5, 2)
    try:
        assert p._ctx.get_start_method() == "forkserver" and p.start_timeout_s == 300.0
        assert (p.n_workers, p.timeout_s, p.mv_timeout_s) == (1, 5.0, 2)
    finally:
        p.close()
    with pytest.raises(ValueError, match=r"^WorkerPool needs n_workers >= 1, got 0$"):
        WorkerPool(0, 5, 2)
    with pytest.raises(
        ValueError, match=r"^mp_context must be 'spawn' or 'forkserver' \(fork is unsafe here\), got 'fork'$"
    ):
        WorkerPool(1, 5, 2, mp_context="fork")  # type: ignore[arg-type]


def test_progress_is_reported_while_a_batch_waits(one_worker):
    """``Job.wait(on_progress)`` polls every 0.2 s: a batch held up by a slow item reports many times, from 0
    done to all done (the progress bar of a long grading job moves)."""
    calls: list[int] = []
    job = one_worker._pool.submit([("\\boxed{10^{10^{10}}}", "8"), ("\\boxed{x+6}", "6+x")])
    outcomes = job.wait(calls.append)
    assert len(outcomes) == 2 and calls[-1] == 2
    assert len(calls) >= 6 and calls == sorted(calls)  # the hard limit (3 s) ends the slow item


def test_closing_with_items_in_flight_scores_them_error_and_says_why():
    """A grader closed while a caller waits (an interrupted job's cleanup): the caller gets ``error`` verdicts
    that say so, not a hang; a pool failure is not cached as the pair's verdict."""
    g = Grader(timeout_s=60, workers=1, mv_timeout_s=30)
    assert g.grade("\\boxed{x+1}", "1+x").correct  # the worker is up
    result = {}
    thread = threading.Thread(target=lambda: result.update(v=g.grade_many([("\\boxed{10^{10^{10}}}", "9")])))
    thread.start()
    time.sleep(1.0)
    g.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    (verdict,) = result["v"]
    assert (verdict.correct, verdict.status) == (False, "error")
    assert verdict.error == POOL_ERROR + "closed before this item was graded"


def _busy_worker(g: Grader, not_in: list[int], timeout_s: float = 20) -> int:
    """The pid of a live worker that holds an item (read from the dispatcher's table), once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = [w.process.pid for w in list(g._pool._workers) if w.task is not None and w.process.is_alive()]
        busy = [pid for pid in busy if pid not in not_in]
        if busy:
            return busy[0]
        time.sleep(0.02)
    raise AssertionError(f"no worker took the item within {timeout_s} s")


def test_an_item_whose_worker_dies_every_time_is_error_after_its_attempts():
    """A worker killed under the same item on each of its ``MAX_ATTEMPTS`` attempts: the item is ``error``, saying
    how the worker died and how often, and is not tried again (which the long hard limit would turn into a
    ``timeout``)."""
    g = Grader(timeout_s=30, workers=1, mv_timeout_s=60)
    try:
        assert g.grade("\\boxed{x+1}", "1+x").correct  # the worker is up
        result = {}
        thread = threading.Thread(target=lambda: result.update(v=g.grade("\\boxed{10^{10^{10}}}", "11")))
        thread.start()
        killed: list[int] = []
        for _ in range(MAX_ATTEMPTS):
            pid = _busy_worker(g, not_in=killed)  # the (new) worker that holds the item
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        thread.join(timeout=60)
        verdict = result["v"]
        assert (verdict.correct, verdict.status) == (False, "error")
        assert (
            verdict.error
            == f"{POOL_ERROR}worker process died (exit code -9), {MAX_ATTEMPTS} times on this item"
        )
    finally:
        g.close()


def test_a_preemption_signal_to_every_process_leaves_the_pool_grading():
    """Preemption signals every process of a job (SLURM's ``scancel --signal=TERM``): the workers and the fork
    server stay up, so the trainer grades the rest of its step and checkpoints. A fork server killed by the
    signal broke the next worker start, and with it the pool, in the SLURM preemption test under load."""
    handler = signal.getsignal(signal.SIGTERM)
    with Grader(timeout_s=10, workers=2) as g:
        assert all(v.correct for v in g.grade_many([(f"\\boxed{{x+{i}}}", f"{i}+x") for i in range(4)]))
        server = forkserver._forkserver._forkserver_pid
        workers = g.worker_pids()
        assert server is not None and len(workers) == 2
        for pid in (server, *workers):
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.5)
        assert not any(_gone(pid) for pid in (server, *workers))
        os.kill(workers[0], signal.SIGKILL)  # a replacement is forked by the same fork server
        verdicts = g.grade_many([(f"\\boxed{{x+{i}}}", f"{i}+x") for i in range(4, 12)])
        assert [v.status for v in verdicts] == ["ok"] * 8 and all(v.correct for v in verdicts)
        assert forkserver._forkserver._forkserver_pid == server and not _gone(server)
        assert workers[1] in g.worker_pids() and workers[0] not in g.worker_pids()
    assert signal.getsignal(signal.SIGTERM) is handler  # the parent's own handling is untouched


class _FaultyStarts:
    """The pool's ``Process`` factory with its first ``times`` workers broken, ``how``:

    - ``raise``: ``start()`` raises, as when the fork server dies under the request;
    - ``say``: the worker reports that its start failed, as ``worker_main`` does when its imports raise;
    - ``stray``: it sends a verdict for an item it was never given;
    - ``die``: it exits with code 3 before it says it is ready (as a worker whose imports crash the interpreter);
    - ``hang``: it holds its end of the pipe (or the pool would see it closed) and never says it is ready (as one
      stuck in its imports on a full file system).
    """

    def __init__(self, ctx, times: int, how: str) -> None:
        self.ctx, self.left, self.how, self.calls = ctx, times, how, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.left == 0:
            return self.ctx.Process(*args, **kwargs)
        self.left -= 1
        if self.how == "raise":
            process = self.ctx.Process(*args, **kwargs)

            def start():
                raise EOFError("unexpected EOF")

            process.start = start
            return process
        conn = kwargs["args"][0]
        target, target_args = {
            "say": (conn.send, (("start_failed", "ImportError: no module named sympy"),)),
            "stray": (conn.send, ((7, (True, "ok", None)),)),
            "die": (os._exit, (3,)),
            "hang": (wait, ([conn], 60)),
        }[self.how]
        return self.ctx.Process(target=target, args=target_args, name=kwargs.get("name"), daemon=True)


def _start_workers_with(pool: WorkerPool, factory) -> None:
    """Make ``factory`` the ``Process`` of ``pool``'s multiprocessing context (the rest of the context is kept)."""
    ctx = pool._ctx
    pool._ctx = SimpleNamespace(
        Process=factory,
        Pipe=ctx.Pipe,
        get_start_method=ctx.get_start_method,
        set_forkserver_preload=ctx.set_forkserver_preload,
    )


@contextmanager
def _broken_starts(
    times: int, how: str = "raise", workers: int = 1
) -> Iterator[tuple[Grader, _FaultyStarts]]:
    """A grader (one worker by default) whose first ``times`` worker starts are broken (see
    :class:`_FaultyStarts`), and the counter of its starts; closed on exit."""
    with Grader(timeout_s=10, workers=workers) as g:
        starts = _FaultyStarts(g._pool._ctx, times, how)
        _start_workers_with(g._pool, starts)
        yield g, starts


def _pool_failure(reason: str) -> str:
    """The message a waiting batch raises with when the pool broke for ``reason`` (a regex)."""
    return r"(?s)grader workers failed: .*" + reason


def test_a_worker_that_cannot_be_started_is_tried_again(caplog):
    """A fork server that dies under a start request (``EOFError`` reading the new pid) costs a retry, not the
    pool: the next start makes a new fork server."""
    with _broken_starts(times=2) as (g, starts):
        assert g.grade("\\boxed{x+1}", "1+x").correct
        assert starts.calls == 3
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == ["grader worker could not be started, retrying: EOFError('unexpected EOF')"] * 2


def test_a_failed_start_is_made_up_to_the_pool_s_size_and_no_more():
    """After a start that raised, the pool starts as many workers as it lacks, not more (the retry comes while
    the item still waits, so the pool's size is checked then)."""
    with _broken_starts(times=1, workers=2) as (g, starts):
        assert g.grade("\\boxed{x+1}", "1+x").correct
        assert starts.calls == 3 and len(g._pool._workers) == 2


def test_a_worker_that_never_starts_fails_the_batch(caplog):
    """Three failed starts in a row break the pool: the waiting batch raises with the reason."""
    with _broken_starts(times=3) as (g, starts):
        with pytest.raises(
            RuntimeError, match=_pool_failure("grader worker could not be started, 3 times: EOFError")
        ):
            g.grade("\\boxed{x+1}", "1+x")
        assert starts.calls == 3


def test_a_worker_that_dies_while_starting_is_started_again():
    """A worker that dies before it is ready (a crash in its imports) counts as a failed start: up to
    ``MAX_START_FAILURES - 1`` in a row cost retries, not the batch."""
    with _broken_starts(times=MAX_START_FAILURES - 1, how="die") as (g, starts):
        assert g.grade("\\boxed{x+1}", "1+x").correct
        assert starts.calls == MAX_START_FAILURES


def test_a_worker_that_dies_while_starting_every_time_fails_the_batch():
    """``MAX_START_FAILURES`` deaths before ready in a row break the pool, saying how the workers died and where
    their own messages went; the waiting batch raises rather than scoring its items."""
    with _broken_starts(times=MAX_START_FAILURES + 1, how="die") as (g, starts):
        message = (
            f"grader worker died while starting (exit code 3), {MAX_START_FAILURES} times; "
            "its own message, if any, is in this process's stderr above"
        )
        with pytest.raises(RuntimeError, match=_pool_failure(re.escape(message))):
            g.grade("\\boxed{x+1}", "1+x")
        assert starts.calls == MAX_START_FAILURES


def test_a_worker_that_never_says_it_is_ready_fails_the_batch_after_the_start_limit():
    """A worker silent past ``start_timeout_s`` breaks the pool with that reason (it is not waited on for good), is
    killed with the pool, and the waiting batch raises."""
    with _broken_starts(times=1, how="hang") as (g, _):
        g._pool.start_timeout_s = 0.5
        with pytest.raises(RuntimeError, match=_pool_failure("grader worker did not start within 0.5 s")):
            g.grade("\\boxed{x+1}", "1+x")
        assert g.worker_pids() == []


def test_a_worker_whose_start_fails_says_why_and_is_started_again(caplog):
    """A worker whose imports raise reports it (``start_failed``, with the traceback): the pool logs it and starts
    another, up to ``MAX_START_FAILURES - 1`` in a row; ``MAX_START_FAILURES`` fail the batch with the reason."""
    with _broken_starts(times=MAX_START_FAILURES - 1, how="say") as (g, starts):
        with caplog.at_level(logging.WARNING, logger="acerl.grading.pool"):
            assert g.grade("\\boxed{x+1}", "1+x").correct
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        retry = "grader worker failed to start, retrying:\nImportError: no module named sympy"
        assert warnings == [retry] * (MAX_START_FAILURES - 1) and starts.calls == MAX_START_FAILURES
    with _broken_starts(times=MAX_START_FAILURES, how="say") as (g, _):
        reason = (
            f"grader worker failed to start {MAX_START_FAILURES} times:\nImportError: no module named sympy"
        )
        with pytest.raises(RuntimeError, match=_pool_failure(re.escape(reason))):
            g.grade("\\boxed{x+1}", "1+x")


def test_a_worker_that_starts_resets_the_count_of_failed_starts():
    """Failed starts count in a row: once a worker is ready the count starts again, so a pool that recovered
    is not broken by the next few failures (here two before the first ready worker and two after)."""
    with _broken_starts(times=MAX_START_FAILURES - 1, how="die") as (g, starts):
        assert g.grade("\\boxed{x+1}", "1+x").correct
        (pid,) = g.worker_pids()
        starts.left = MAX_START_FAILURES - 1
        # dies while idle: replaced when work comes, by workers that die starting
        os.kill(pid, signal.SIGKILL)
        assert g.grade("\\boxed{x+2}", "2+x").correct
        assert starts.calls == 2 * MAX_START_FAILURES


def test_a_verdict_for_an_item_a_worker_was_not_given_breaks_the_pool():
    """The pipe protocol is checked, not trusted: a worker answering an item it does not hold (a bug on either
    side) stops the pool with that reason rather than resolving some other item with its verdict."""
    with _broken_starts(times=1, how="stray") as (g, _):
        with pytest.raises(
            RuntimeError, match=_pool_failure(r"grader worker \d+ answered task 7, which it was not given")
        ):
            g.grade("\\boxed{x+1}", "1+x")


class _Puppets:
    """The pool's ``Process`` factory with every worker a puppet: a real process that does nothing (it waits for
    the test to end it), while the test holds the worker's end of the pipe and speaks the worker's protocol
    itself: it says ready, reads the items the dispatcher sends to that worker, in order, and answers them. The
    pool under test is the real one; only what its workers say is scripted, so its choices can be read one by
    one. ``plan`` breaks the first workers:

    - ``dead``: the worker exits at once and only then (its pipe still open) says it is ready, as a worker that
      died while idle before the pool read its pipe's end;
    - ``deaf``: it says it is ready and closes its end of the pipe while it still runs, as a worker that died
      between its last message and the next item (the pool's send fails).
    """

    def __init__(self, pool: WorkerPool, plan: tuple[str, ...] = ()) -> None:
        self.ctx, self.plan = pool._ctx, list(plan)
        self.life_r, self.life_w = self.ctx.Pipe(duplex=False)
        self.ends: list[Connection] = []  # the test's end of each worker's pipe, in start order
        self.processes: list = []
        _start_workers_with(pool, self)

    def __call__(self, *args, **kwargs):
        how = self.plan.pop(0) if self.plan else "puppet"
        end = Connection(os.dup(kwargs["args"][0].fileno()))
        target, target_args = {
            "puppet": (wait, ([self.life_r], 60)),
            "dead": (os._exit, (0,)),
            "deaf": (time.sleep, (1.0,)),  # alive when the pool sends, gone soon after
        }[how]
        process = self.ctx.Process(target=target, args=target_args, name=kwargs.get("name"), daemon=True)

        def start_and_break():
            del process.start  # the class's own start, and nothing of this test's in the pickled process
            process.start()
            if how == "dead":
                process.join()
            if how != "puppet":  # said from here, before the pool waits on the pipe: nothing races it
                end.send(("ready",))
            if how == "deaf":
                end.close()

        process.start = start_and_break
        self.ends.append(end)
        self.processes.append(process)
        return process

    def started(self, worker: int) -> None:
        """Wait until the pool has started ``worker`` (in start order)."""
        _eventually(lambda: len(self.ends) > worker, f"the pool did not start worker {worker}")

    def ready(self, worker: int) -> None:
        """``worker`` says it is ready, once the pool has started it."""
        self.started(worker)
        self.ends[worker].send(("ready",))

    def given(self, worker: int) -> tuple[int, str, str]:
        """The next item the pool sent to ``worker``: ``(task id, extracted, gold)``."""
        end = self.ends[worker]
        assert end.poll(20), f"the pool sent worker {worker} nothing"
        return end.recv()

    def answer(self, worker: int, task: tuple[int, str, str], correct: bool = True) -> None:
        self.ends[worker].send((task[0], (correct, "ok", None)))

    def stop(self) -> None:
        self.life_w.close()  # the puppets exit; their pipes stay open until close_ends
        for process in self.processes:
            process.join(10)

    def close_ends(self) -> None:
        for end in self.ends:
            end.close()


@contextmanager
def _puppet_pool(n_workers: int, plan: tuple[str, ...] = ()) -> Iterator[tuple[WorkerPool, _Puppets]]:
    pool = WorkerPool(n_workers, timeout_s=60, mv_timeout_s=30)
    puppets = _Puppets(pool, plan)
    try:
        yield pool, puppets
    finally:
        puppets.stop()
        pool.close()
        puppets.close_ends()


def _until_taken(pool: WorkerPool, pairs: list[tuple[str, str]]) -> None:
    """Wait until the dispatcher has taken ``pairs`` into its table (a batch it has not read yet would not
    share an item that finishes meanwhile)."""
    _eventually(lambda: all(pair in pool._tasks for pair in pairs), f"the pool did not take {pairs}")


def _eventually(condition: Callable[[], bool], failure: str, timeout_s: float = 20) -> None:
    """Poll ``condition`` until it holds; fail with ``failure`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def _items(tasks: list[tuple[int, str, str]]) -> list[str]:
    return [extracted for _, extracted, _ in tasks]


def test_a_worker_keeps_to_its_gold_and_a_new_one_takes_a_gold_no_one_is_on():
    """The dispatch order the module docstring promises (each worker parses a gold once): an idle worker takes
    the gold it graded last when that gold is pending, else the first pending gold no *busy* worker is on, else
    the first pending gold."""
    with _puppet_pool(2) as (pool, p):
        job = pool.submit([("a1", "A"), ("a2", "A"), ("b1", "B")])
        p.ready(0)
        a1 = p.given(0)
        p.ready(1)
        b1 = p.given(1)  # not a2: worker 0 is on A
        assert _items([a1, b1]) == ["a1", "b1"]
        p.answer(0, a1)
        a2 = p.given(0)
        assert _items([a2]) == ["a2"]  # its own gold again
        p.answer(1, b1)
        p.answer(0, a2)
        assert job.wait() == dict.fromkeys([("a1", "A"), ("a2", "A"), ("b1", "B")], (True, "ok", None))
        # both idle: worker 0 (last A) and worker 1 (last B); B is queued before A
        job = pool.submit([("b2", "B"), ("a3", "A")])
        first, second = p.given(0), p.given(1)
        assert _items([first, second]) == ["a3", "b2"]  # each keeps to its gold
        p.answer(0, first)
        p.answer(1, second)
        assert job.done.wait(10)
        # both idle, neither's gold pending: worker 0 takes the first gold (worker 1 is idle: B is not taken)
        job = pool.submit([("b3", "B"), ("c1", "C")])
        first, second = p.given(0), p.given(1)
        assert _items([first, second]) == ["b3", "c1"]
        p.answer(0, first)
        p.answer(1, second)
        assert job.done.wait(10)


def test_a_worker_found_dead_when_given_an_item_is_replaced_and_the_item_graded(caplog):
    """A worker that died while idle and said ready before (its pipe not yet seen closed) is found dead when
    the dispatcher would give it an item: it is replaced, the item goes to the new worker, and since the dead
    one held nothing, no item is retried and no start counted as failed."""
    with _puppet_pool(1, plan=("dead",)) as (pool, p), caplog.at_level(logging.WARNING):
        job = pool.submit([("x1", "X")])
        p.ready(1)
        task = p.given(1)
        assert task[1:] == ("x1", "X") and pool._start_failures == 0
        p.answer(1, task)
        assert job.wait() == {("x1", "X"): (True, "ok", None)}
        assert len(p.processes) == 2 and p.processes[0].exitcode == 0
        assert [r.getMessage() for r in caplog.records] == []


def test_an_item_whose_send_fails_is_retried_on_a_new_worker(caplog):
    """A worker whose pipe broke between its last message and the next item (the send raises): the item counts
    one attempt, goes back to the front of the queue and is graded by the replacement, first."""
    with _puppet_pool(1, plan=("deaf",)) as (pool, p), caplog.at_level(logging.WARNING):
        job = pool.submit([("x1", "X"), ("x2", "X"), ("y1", "Y")])
        p.ready(1)
        given = [p.given(1)]
        assert given[0][1:] == ("x1", "X")  # the retried item first, before the others of its gold
        for _ in range(2):
            p.answer(1, given[-1], correct=given[-1][1] != "x1")
            given.append(p.given(1))
        p.answer(1, given[-1])
        assert _items(given) == ["x1", "x2", "y1"]
        assert job.wait() == {
            ("x1", "X"): (False, "ok", None),
            ("x2", "X"): (True, "ok", None),
            ("y1", "Y"): (True, "ok", None),
        }
        deaf = p.processes[0].pid
        assert [r.getMessage() for r in caplog.records] == [
            f"grader worker {deaf} died (exit code 0) on ('x1', 'X')"
        ]


def test_a_pair_two_batches_ask_for_is_graded_once_for_both():
    """Pairs queued or in flight for one batch are shared with a later batch, not graded twice; each batch
    gets its own pairs' verdicts, items keep the order they were submitted in within a gold, and each item
    sent has its own task id (which the worker's answer must name)."""
    with _puppet_pool(1) as (pool, p):
        first = pool.submit([("a1", "A"), ("a2", "A")])
        p.ready(0)
        a1 = p.given(0)
        second = pool.submit([("a2", "A"), ("a1", "A"), ("a3", "A")])  # a1 in flight, a2 queued
        _until_taken(pool, [("a3", "A")])
        given = [a1]
        for correct in (True, False):
            p.answer(0, given[-1], correct)
            given.append(p.given(0))
        p.answer(0, given[-1])
        assert _items(given) == ["a1", "a2", "a3"]
        assert len({task_id for task_id, _, _ in given}) == 3
        assert first.wait() == {("a1", "A"): (True, "ok", None), ("a2", "A"): (False, "ok", None)}
        assert second.wait() == {
            ("a2", "A"): (False, "ok", None),
            ("a1", "A"): (True, "ok", None),
            ("a3", "A"): (True, "ok", None),
        }
        assert not p.ends[0].poll(0.2)  # nothing more was sent
        # once graded, a pair asked for again is graded again: the pool keeps no verdicts (the Grader's cache does)
        third = pool.submit([("a1", "A")])
        again = p.given(0)
        assert again[1:] == ("a1", "A") and again[0] not in {task_id for task_id, _, _ in given}
        p.answer(0, again, correct=False)
        assert third.wait() == {("a1", "A"): (False, "ok", None)}


def test_the_dispatcher_sleeps_while_a_worker_starts():
    """While a worker has not said it is ready, the dispatcher blocks until the worker's start limit or a
    message, not in a busy loop: a spinning grader thread would take a core from the trainer it serves for as
    long as a worker starts (seconds, when the fork server imports sympy). Measured as this process's CPU time
    over a second of waiting, which other load on the machine does not inflate."""
    with _puppet_pool(1) as (pool, p):
        job = pool.submit([("x1", "X")])
        _until_taken(pool, [("x1", "X")])
        p.started(0)
        cpu = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - cpu < 0.3
        p.ready(0)
        task = p.given(0)
        p.answer(0, task)
        assert job.wait() == {("x1", "X"): (True, "ok", None)}


def test_a_worker_starved_past_the_limit_still_grades_a_correct_answer_correct():
    """Load, made deterministic: the worker that gets the item is stopped (SIGSTOP: what a CPU-starved
    process looks like from outside) past the hard limit, so the first attempt times out; the retry with
    twice the limits in a fresh worker grades it, and the verdict is the quiet machine's."""
    item = (
        "\\boxed{\\frac{\\sqrt{2}}{2}}",
        "\\frac{1}{\\sqrt 2}",
    )  # not on the fast path: math-verify decides
    with Grader(timeout_s=2, workers=1, mv_timeout_s=1) as grader:
        pid = _a_live_worker(grader)
        before = (grader.stats.retried, grader.stats.timeouts)
        os.kill(pid, signal.SIGSTOP)
        try:
            verdict = grader.grade(*item)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        assert (verdict.correct, verdict.status) == (True, "ok"), verdict
        assert (grader.stats.retried - before[0], grader.stats.timeouts - before[1]) == (1, 0)
    with Grader(timeout_s=2, workers=1, mv_timeout_s=1, retry_factor=0) as grader:  # the behaviour before
        pid = _a_live_worker(grader)
        os.kill(pid, signal.SIGSTOP)
        verdict = grader.grade(*item)
        assert (verdict.correct, verdict.status) == (False, "timeout")


def test_verdicts_beside_a_cpu_hog_are_the_quiet_machine_s():
    """The grading settings of the study (grading.timeout_s 5, one worker) beside four CPU-bound processes at
    the same priority on this machine's cores: every verdict as without them."""
    items = [(r, g) for r, g, _ in NORMAL] * 3
    with Grader(timeout_s=5, workers=1) as grader:
        quiet = [(v.correct, v.status) for v in grader.grade_many(items)]
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(4)
    ]
    try:
        with Grader(timeout_s=5, workers=1) as grader:
            loaded = [(v.correct, v.status) for v in grader.grade_many(items)]
            assert grader.stats.timeouts == 0, grader.stats
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert loaded == quiet == [(ok, "ok") for _, _, ok in NORMAL] * 3
