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

core.journal.ReplayingRunner wraps any of them with the search's journal, so
a stopped search resumes without training its finished trials again.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ensemble_bo.core.trials import TrialRequest, TrialResult
from ensemble_bo.core.workers import WorkerEvaluator

BACKENDS = ("local", "dask")
MODES = ("sync", "async")
# What evaluates one request where the search runs (SerialRunner's `evaluate`).
Evaluator = Callable[[TrialRequest], TrialResult]


@dataclass(frozen=True)
class ParallelSettings:
    """The `parallel` block: where and how many trials run at once.

    backend: local (processes on this machine) | dask (a Dask cluster);
    n_workers: trials at once (local: worker processes; dask without an
    address: the LocalCluster's size; dask with an address: null takes the
    cluster's worker threads); address: an existing scheduler
    (tcp://host:8786), else $DASK_SCHEDULER_ADDRESS, else a LocalCluster is
    started; mode: sync (batches of n_workers, results identical for a seed
    and n_workers) | async (a worker that finishes gets the next proposal).
    """

    backend: str = "local"
    n_workers: int | None = 1
    address: str | None = None
    mode: str = "sync"

    @classmethod
    def from_block(cls, block: Mapping[str, Any] | None) -> ParallelSettings:
        """The settings of a `parallel` block, checked; None: serial."""
        if block is None:
            return cls()
        if not isinstance(block, Mapping):
            raise ValueError(f"parallel must be a mapping, got {block!r}")
        unknown = sorted(set(block) - {"backend", "n_workers", "address", "mode"})
        if unknown:
            raise ValueError(
                f"parallel has unknown keys {unknown}; known: backend, n_workers, "
                "address, mode"
            )
        settings = cls(**block)
        if settings.backend not in BACKENDS:
            raise ValueError(
                f"parallel.backend={settings.backend!r} is not one of {list(BACKENDS)}"
            )
        if settings.mode not in MODES:
            raise ValueError(
                f"parallel.mode={settings.mode!r} is not one of {list(MODES)}"
            )
        workers = settings.n_workers
        if workers is None:
            if settings.backend == "local":
                raise ValueError("parallel.n_workers=null needs backend: dask")
        elif isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(
                f"parallel.n_workers must be a positive integer or null, got {workers!r}"
            )
        if settings.address is not None and (
            settings.backend != "dask" or not isinstance(settings.address, str)
        ):
            raise ValueError(
                f"parallel.address={settings.address!r} needs backend: dask and a "
                "scheduler address such as tcp://10.0.0.5:8786"
            )
        return settings

    @property
    def serial(self) -> bool:
        return self.backend == "local" and self.n_workers == 1


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
    which trains in its process (time limit and all, as when serial).
    """

    def __init__(self, evaluator: WorkerEvaluator, n_workers: int) -> None:
        self.n_workers = n_workers
        self._evaluators = [
            replace(evaluator, worker_process=True) for _ in range(n_workers)
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
