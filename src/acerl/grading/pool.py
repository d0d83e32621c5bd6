"""A pool of grader worker processes with a hard per-item wall-clock limit.

Each worker is a ``multiprocessing`` process (forkserver or spawn context, never fork) connected by a pipe;
it runs math-verify in its main thread, one ``(extracted, gold)`` pair at a time. One dispatcher thread in
the parent owns all workers: it hands pairs to idle workers, waits on their pipes with
``multiprocessing.connection.wait`` and, when a worker passes its item's deadline (``timeout_s`` after the
item was sent), kills it (SIGKILL), records ``timeout`` for that item, starts a replacement and carries
on. A worker that dies by itself (e.g. killed by the OOM killer) is replaced the same way and its item
retried once on the new worker, then given ``error``. ``concurrent.futures.ProcessPoolExecutor`` is not used: it cannot kill one stuck
worker without breaking the whole pool.

Callers (any thread) :meth:`WorkerPool.submit` a batch of distinct pairs and wait on the returned
:class:`Job`; pairs already queued or running for another job are shared, not graded twice. Pending pairs
are grouped by gold and a worker keeps to the gold it graded last, so each worker parses a gold once.

With the default ``forkserver`` context the fork server preloads math-verify (sympy), so a worker,
including the replacement of a killed one, is ready without importing sympy itself (the times both ways:
docs/grading.md, "Time limits and the worker pool"). The fork server is one helper process per parent process,
shared by all pools, which exits with the parent.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Literal, cast

from acerl.grading.backend import Outcome

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

logger = logging.getLogger(__name__)

Pair = tuple[str, str]
"""``(extracted answer, gold)``."""

MAX_START_FAILURES = 3
PRELOAD = ["math_verify", "acerl.grading.backend", "acerl.grading.fork_server_signals"]
"""Modules the fork server imports once, so that forked workers start with them loaded (the last makes the
fork server and its workers ignore SIGTERM)."""
POOL_ERROR = "grader pool: "
"""Prefix of the error of an item the pool could not grade for reasons of its own (not cached)."""
START_RETRY_S = 0.1
"""Pause before starting a worker again after a start that raised (the fork server died under it)."""
MAX_ATTEMPTS = 2
"""A pair whose worker dies under it is retried once on a new worker (the death may have another cause)."""


def worker_main(conn: Connection, mv_timeout_s: int) -> None:
    """Worker process: grade pairs received on ``conn`` until ``None`` or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it then kills us
    # A scheduler's preemption (SLURM's scancel --signal=TERM) signals every process of the job: the trainer
    # finishes its step and checkpoints, which needs its grader; the pool stops workers by message or SIGKILL.
    # (Forked workers inherit this from the fork server already, acerl.grading.fork_server_signals; spawned
    # ones need it here.)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        logging.getLogger("math_verify").propagate = False  # its timeout warnings echo whole responses
        from acerl.grading.backend import grade_answer, warm_up

        warm_up()
    except BaseException:
        conn.send(("start_failed", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        task_id, extracted, gold = message
        conn.send((task_id, grade_answer(extracted, gold, mv_timeout_s)))
    conn.close()
    os._exit(0)  # skip interpreter finalisation: tearing down sympy's caches takes seconds under load


@dataclass
class Job:
    """One caller's batch of distinct pairs; :attr:`outcomes` fills in as workers report."""

    pairs: list[Pair]
    outcomes: dict[Pair, Outcome] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None
    """Why the pool stopped before grading every pair (the dispatcher's traceback); :meth:`wait` raises it."""

    def resolve(self, pair: Pair, outcome: Outcome) -> None:
        self.outcomes[pair] = outcome
        if len(self.outcomes) == len(self.pairs):
            self.done.set()

    def fail(self, failure: str) -> None:
        self.failure = failure
        self.done.set()

    def wait(
        self, on_progress: Callable[[int], None] | None = None, poll_s: float = 0.2
    ) -> dict[Pair, Outcome]:
        """Block until every pair has an outcome; ``on_progress(n_done)`` is called while waiting. Raises
        ``RuntimeError`` if the pool's dispatcher failed (workers that cannot start, say) before it finished."""
        while not self.done.wait(poll_s if on_progress else None):
            on_progress(len(self.outcomes))  # type: ignore[misc]  # set: a None one waits until done
        if on_progress:
            on_progress(len(self.outcomes))
        if self.failure is not None:
            raise RuntimeError(f"grader workers failed: {self.failure}")
        return self.outcomes


@dataclass
class _Task:
    task_id: int
    pair: Pair
    jobs: list[Job]
    attempts: int = 0


@dataclass
class _Worker:
    process: Any
    conn: Connection
    started_at: float
    ready: bool = False
    task: _Task | None = None
    deadline: float = 0.0
    last_gold: str | None = None


class WorkerPool:
    """``n_workers`` grader processes with a hard ``timeout_s`` per item (see the module docstring)."""

    def __init__(
        self,
        n_workers: int,
        timeout_s: float,
        mv_timeout_s: int,
        mp_context: Literal["forkserver", "spawn"] = "forkserver",
        start_timeout_s: float = 300.0,
    ) -> None:
        if n_workers < 1:
            raise ValueError(f"WorkerPool needs n_workers >= 1, got {n_workers}")
        if mp_context not in ("spawn", "forkserver"):
            raise ValueError(
                f"mp_context must be 'spawn' or 'forkserver' (fork is unsafe here), got {mp_context!r}"
            )
        self.n_workers = n_workers
        self.timeout_s = float(timeout_s)
        self.mv_timeout_s = mv_timeout_s
        self.start_timeout_s = start_timeout_s
        # get_context's typing names the context class for a literal method only
        self._ctx = cast("ForkServerContext | SpawnContext", multiprocessing.get_context(mp_context))
        self._lock = threading.Lock()
        self._submissions: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._wake_r: Connection | None = None
        self._wake_w: Connection | None = None
        self._closed = False
        self._stopped = False
        self._failure: str | None = None
        # Dispatcher-thread state (touched only by that thread once it runs).
        self._workers: list[_Worker] = []
        self._pending: OrderedDict[str, deque[_Task]] = OrderedDict()
        self._tasks: dict[Pair, _Task] = {}
        self._next_task_id = 0
        self._start_failures = 0

    # ------------------------------------------------------------------ caller side
    def submit(self, pairs: list[Pair]) -> Job:
        """Queue distinct ``pairs`` for grading; returns at once with the :class:`Job` to wait on."""
        job = Job(list(dict.fromkeys(pairs)))
        if not job.pairs:
            job.done.set()
            return job
        with self._lock:
            if self._closed:
                raise RuntimeError("this grader is closed")
            if self._stopped and self._failure is not None:
                raise RuntimeError(f"grader workers failed: {self._failure}")
            if self._thread is None:
                self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
                self._thread = threading.Thread(target=self._run, name="acerl-grader-dispatch", daemon=True)
                self._thread.start()
            self._submissions.put(job)
            self._wake_w.send_bytes(b"j")  # type: ignore[union-attr]  # made with the thread, above
        return job

    def worker_pids(self) -> list[int]:
        """PIDs of the worker processes alive now (for tests and diagnostics)."""
        return [w.process.pid for w in list(self._workers) if w.process.is_alive()]

    def close(self) -> None:
        """Stop the dispatcher and every worker (idempotent); pairs still queued get status ``error``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._submissions.put(None)
                try:
                    self._wake_w.send_bytes(b"q")  # type: ignore[union-attr]  # made with the thread
                except OSError:
                    pass
        if thread is not None:
            thread.join()
            for conn in (self._wake_r, self._wake_w):
                conn.close()  # type: ignore[union-attr]  # made with the thread

    # ------------------------------------------------------------------ dispatcher thread
    def _run(self) -> None:
        try:
            while self._take_submissions():
                self._maintain_workers()
                self._dispatch()
                self._wait_and_collect()
                self._enforce_deadlines()
        except BaseException:
            self._failure = traceback.format_exc()
            logger.error("grader dispatcher crashed:\n%s", self._failure)
        finally:
            self._shutdown_workers()
            reason = POOL_ERROR + (self._failure or "closed before this item was graded")
            with self._lock:
                self._stopped = True
                self._take_submissions()
            for task in list(self._tasks.values()):
                if self._failure is None:
                    self._finish(task, (False, "error", reason))
                else:  # the pool broke, not the item: the waiting caller fails rather than score it wrong
                    for job in task.jobs:
                        job.fail(self._failure)

    def _take_submissions(self) -> bool:
        """Move submitted jobs into the pending queue; False once close() was called."""
        while True:
            try:
                job = self._submissions.get_nowait()
            except queue.Empty:
                return True
            if job is None:
                return False
            for pair in job.pairs:
                task = self._tasks.get(pair)
                if task is None:
                    task = _Task(self._next_task_id, pair, [])
                    self._next_task_id += 1
                    self._tasks[pair] = task
                    self._pending.setdefault(pair[1], deque()).append(task)
                task.jobs.append(job)

    def _maintain_workers(self) -> None:
        if self._tasks and len(self._workers) < self.n_workers:
            for _ in range(self.n_workers - len(self._workers)):
                self._start_worker()

    def _start_worker(self) -> None:
        if self._ctx.get_start_method() == "forkserver":
            # Takes effect if the fork server is not running yet (it starts with the first worker).
            self._ctx.set_forkserver_preload(PRELOAD)
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=worker_main, args=(child_conn, self.mv_timeout_s), name="acerl-grader", daemon=True
        )
        try:
            process.start()
        except (OSError, EOFError) as exc:  # the fork server died under the request (SIGKILL, OOM killer)
            parent_conn.close()
            child_conn.close()
            if self._failed_start():
                raise RuntimeError(
                    f"grader worker could not be started, {self._start_failures} times: {exc!r}"
                ) from exc
            logger.warning("grader worker could not be started, retrying: %r", exc)
            return  # _maintain_workers starts one again; the next start makes a new fork server
        child_conn.close()
        self._workers.append(_Worker(process, parent_conn, time.monotonic()))

    def _dispatch(self) -> None:
        for worker in list(self._workers):
            if worker.ready and worker.task is None and self._pending:
                if not worker.process.is_alive():
                    self._on_worker_death(worker)
                    continue
                task = self._next_task_for(worker)
                worker.task = task
                worker.deadline = time.monotonic() + self.timeout_s
                worker.last_gold = task.pair[1]
                task.attempts += 1
                try:
                    worker.conn.send((task.task_id, *task.pair))
                except OSError:  # died since its last message; the task is retried
                    self._on_worker_death(worker)

    def _next_task_for(self, worker: _Worker) -> _Task:
        """A pending task, preferring this worker's last gold, then a gold no other worker is on."""
        gold = worker.last_gold
        if gold is None or gold not in self._pending:
            taken = {w.last_gold for w in self._workers if w is not worker and w.task is not None}
            gold = next((g for g in self._pending if g not in taken), next(iter(self._pending)))
        tasks = self._pending[gold]
        task = tasks.popleft()
        if not tasks:
            del self._pending[gold]
        return task

    def _wait_and_collect(self) -> None:
        now = time.monotonic()
        deadlines = [w.deadline for w in self._workers if w.task is not None]
        deadlines += [w.started_at + self.start_timeout_s for w in self._workers if not w.ready]
        if self._tasks and len(self._workers) < self.n_workers:  # a start failed: try again shortly
            deadlines.append(now + START_RETRY_S)
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        conns: list[Any] = [self._wake_r] + [w.conn for w in self._workers]
        for conn in wait(conns, timeout):
            if conn is self._wake_r:
                self._wake_r.recv_bytes()
                continue
            worker = next(w for w in self._workers if w.conn is conn)
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                self._on_worker_death(worker)
                continue
            self._on_message(worker, message)

    def _on_message(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        if message[0] == "ready":
            worker.ready = True
            self._start_failures = 0
        elif message[0] == "start_failed":
            broken = self._failed_start()
            self._replace(worker, kill=True)
            if broken:
                raise RuntimeError(
                    f"grader worker failed to start {self._start_failures} times:\n{message[1]}"
                )
            logger.warning("grader worker failed to start, retrying:\n%s", message[1])
        else:
            task_id, outcome = message
            task = worker.task
            if task is None or task.task_id != task_id:
                raise RuntimeError(
                    f"grader worker {worker.process.pid} answered task {task_id}, which it was not given"
                )
            worker.task = None
            self._finish(task, outcome)

    def _on_worker_death(self, worker: _Worker) -> None:
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        task = worker.task
        if task is not None:
            logger.warning("grader worker %s died (exit code %s) on %r", worker.process.pid, code, task.pair)
            if task.attempts < MAX_ATTEMPTS:
                self._requeue(task)
            else:
                message = (
                    f"{POOL_ERROR}worker process died (exit code {code}), {task.attempts} times on this item"
                )
                self._finish(task, (False, "error", message))
        elif not worker.ready and self._failed_start():
            raise RuntimeError(
                f"grader worker died while starting (exit code {code}), {self._start_failures} times; "
                "its own message, if any, is in this process's stderr above"
            )
        self._replace(worker, kill=True)

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.task is not None and now >= worker.deadline:
                task = worker.task
                logger.warning(
                    "grading %r took over %.1f s: killing worker %s",
                    task.pair[0][:200],
                    self.timeout_s,
                    worker.process.pid,
                )
                self._finish(
                    task, (False, "timeout", f"no verdict within {self.timeout_s:g} s: worker killed")
                )
                self._replace(worker, kill=True)
            elif not worker.ready and now >= worker.started_at + self.start_timeout_s:
                raise RuntimeError(f"grader worker did not start within {self.start_timeout_s:g} s")

    def _failed_start(self) -> bool:
        """Count a worker start that failed (raised, reported ``start_failed`` or died before ready); True once
        ``MAX_START_FAILURES`` have failed in a row (a worker that says it is ready resets the count)."""
        self._start_failures += 1
        return self._start_failures >= MAX_START_FAILURES

    def _replace(self, worker: _Worker, kill: bool) -> None:
        """Remove ``worker`` (killing and reaping it); a new one is started when work is pending."""
        self._stop_worker(worker, kill=kill)
        self._workers.remove(worker)
        if self._tasks:
            self._start_worker()

    def _requeue(self, task: _Task) -> None:
        self._pending.setdefault(task.pair[1], deque()).appendleft(task)
        self._pending.move_to_end(task.pair[1], last=False)

    def _finish(self, task: _Task, outcome: Outcome) -> None:
        self._tasks.pop(task.pair, None)
        for job in task.jobs:
            job.resolve(task.pair, outcome)

    def _shutdown_workers(self) -> None:
        for worker in self._workers:
            self._stop_worker(worker, kill=worker.task is not None or not worker.ready)
        self._workers.clear()

    @staticmethod
    def _stop_worker(worker: _Worker, kill: bool) -> None:
        process = worker.process
        if not kill:
            try:
                worker.conn.send(None)
            except OSError:
                kill = True
            process.join(timeout=2.0)
        if process.is_alive():
            process.kill()
        process.join()
        worker.conn.close()
