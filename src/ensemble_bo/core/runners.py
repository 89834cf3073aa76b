"""Where a search's trials run: one at a time, or on local worker processes.

A search hands each `TrialRequest` to a `TrialRunner` and takes back finished
trials one by one, in whatever order they end. The strategy never trains a
model itself, so the same loop runs serially, on `n_workers` local processes
or on a Dask cluster (`parallel` block of conf/base/parameters.yml):

- `SerialRunner`: one evaluation at a time, in the search's process (or its
  time-limit worker, core.workers);
- `LocalProcessRunner`: `n_workers` evaluators, each with its own worker
  process, so a trial past its time limit is killed without touching the
  others (loky cannot kill one worker of a shared pool);
- `DaskRunner` (core.dask_runner): trials as tasks of a Dask cluster.

Each worker process gets its share of the cores for its OpenMP and BLAS
threads (core.threads): all of them for a serial search's time-limit worker,
one n-th each for n local workers or the n workers of a LocalCluster.

core.journal.ReplayingRunner wraps any of them with the search's journal, so
a stopped search resumes without training its finished trials again.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol

from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.threads import data_cells, trial_threads
from ensemble_bo.core.trials import TrialRequest, TrialResult
from ensemble_bo.core.workers import WorkerEvaluator

# What evaluates one request where the search runs (SerialRunner's `evaluate`).
Evaluator = Callable[[TrialRequest], TrialResult]


class TrialRunner(Protocol):
    """Runs requested trials; `next_finished` returns them as they end."""

    n_workers: int

    def submit(self, request: TrialRequest) -> None:
        """Start (or queue) the evaluation `request` asks for."""
        ...

    def next_finished(self) -> tuple[int, TrialResult]:
        """(ticket, result) of a submitted trial; blocks until one has ended."""
        ...

    def recorded_trials(self) -> list[tuple[TrialRequest, TrialResult]]:
        """Trials of an earlier run to take as finished before proposing any."""
        ...


class SerialRunner:
    """One trial at a time, trained when its result is asked for."""

    n_workers = 1

    def __init__(self, evaluate: Evaluator) -> None:
        self.evaluate = evaluate
        self._submitted: deque[TrialRequest] = deque()

    def submit(self, request: TrialRequest) -> None:
        self._submitted.append(request)

    def next_finished(self) -> tuple[int, TrialResult]:
        request = self._submitted.popleft()
        return request.ticket, self.evaluate(request)

    def recorded_trials(self) -> list[tuple[TrialRequest, TrialResult]]:
        return []


class LocalProcessRunner:
    """`n_workers` trials at once, each evaluator in its own worker process.

    Threads only wait on the workers: each thread takes an idle evaluator,
    which trains in its process (time limit and all, as when serial), with
    its share of the cores for OpenMP and BLAS threads (core.threads).
    """

    def __init__(self, evaluator: WorkerEvaluator, n_workers: int) -> None:
        self.n_workers = n_workers
        threads = trial_threads(n_workers, data_cells(evaluator.cross_validation.X))
        self._evaluators = [
            replace(evaluator, worker_process=True, threads=threads)
            for _ in range(n_workers)
        ]
        self._idle: queue.SimpleQueue[WorkerEvaluator] = queue.SimpleQueue()
        for each in self._evaluators:
            self._idle.put(each)
        self._threads = ThreadPoolExecutor(n_workers, thread_name_prefix="trial")
        self._running: dict[Any, int] = {}

    def _evaluate(self, request: TrialRequest) -> TrialResult:
        evaluator = self._idle.get()
        try:
            return evaluator(request)
        finally:
            self._idle.put(evaluator)

    def submit(self, request: TrialRequest) -> None:
        self._running[self._threads.submit(self._evaluate, request)] = request.ticket

    def next_finished(self) -> tuple[int, TrialResult]:
        done, _ = wait(self._running, return_when=FIRST_COMPLETED)
        # Of trials ending together, the earliest proposed first.
        future = min(done, key=self._running.__getitem__)
        return self._running.pop(future), future.result()

    def recorded_trials(self) -> list[tuple[TrialRequest, TrialResult]]:
        return []

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        for each in self._evaluators:
            each.close()  # at once: a fit still running is killed


@contextmanager
def trial_runner(
    parallel: ParallelSettings, evaluator: WorkerEvaluator
) -> Iterator[TrialRunner]:
    """The runner `parallel` asks for, closed (workers stopped) on exit.

    Serial and local runners are started here; for Dask, a client of the
    scheduler at `parallel.address` (or $DASK_SCHEDULER_ADDRESS), or of a
    LocalCluster of `n_workers` single-threaded worker processes.
    """
    if parallel.serial:
        try:
            yield SerialRunner(evaluator)
        finally:
            # No evaluation runs here any more: a serial runner's end in the
            # middle of one (an interrupt) has killed its worker already.
            evaluator.release()
        return
    if parallel.backend == "local":
        runner = LocalProcessRunner(evaluator, parallel.n_workers)
        try:
            yield runner
        finally:
            runner.close()
        return
    # Imported here: only Dask runs import distributed (seconds).
    from ensemble_bo.core.dask_runner import dask_trial_runner  # noqa: PLC0415

    with dask_trial_runner(parallel, evaluator) as runner:
        yield runner
