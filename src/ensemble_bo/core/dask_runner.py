"""Trials on a Dask cluster: `DaskRunner`, and the client a run connects with.

Trials are tasks of a `distributed.Client`, the data sent to the cluster once
(`hold_on_cluster`), each trial to a worker with a free thread. Dask has no
per-task time limit, so the runner fails a trial past its limit and ends the
worker process running it (its nanny starts a fresh one); a worker that dies
is retried by Dask on another, and a trial whose retries are spent
(KilledWorker) is a failed trial. The benchmark sends its cells to the same
clusters (`dask_client`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ensemble_bo.core.evaluation import evaluate_configuration
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.threads import trial_threads
from ensemble_bo.core.time_budget import (
    TrialLimit,
    cut_before_start,
    cut_trial,
    trial_limit,
)
from ensemble_bo.core.trials import TrialRequest, TrialResult
from ensemble_bo.core.workers import WorkerEvaluator

# Where a run finds an existing Dask scheduler when `parallel.address` is null.
ADDRESS_VARIABLE = "DASK_SCHEDULER_ADDRESS"

# Seconds a Dask trial may take beyond its limit for sending the task and its
# result, before the runner cancels it.
DASK_TRANSFER_SLACK = 2.0
# Seconds a run waits for a first worker to join the scheduler it connects to.
DASK_WORKER_WAIT = 120.0


@dataclass(frozen=True)
class _DaskTrial:
    request: TrialRequest
    # Set when it is sent to the cluster, so that a trial queued behind busy
    # workers gets the time the budget has left then.
    limit: TrialLimit = TrialLimit(None, "")
    started: float = math.nan  # when it was sent to the cluster
    worker: str | None = None  # the worker it was sent to

    @property
    def ticket(self) -> int:
        return self.request.ticket

    @property
    def gives_up_at(self) -> float:
        """When the runner gives up on it: its limit plus the transfers' slack."""
        if self.limit.seconds is None:
            return float("inf")
        return self.started + self.limit.seconds + DASK_TRANSFER_SLACK


def _held_on_the_cluster(value: Any) -> Any:
    return value


def hold_on_cluster(client: Any, value: Any) -> Any:
    """A future of `value` on the cluster that outlives the worker holding it.

    A task, not scattered data: the scheduler keeps its argument and computes
    it again when the worker holding it dies or is restarted (scattered data
    would be lost for good, and Dask's memory manager keeps one replica of
    broadcast data). Workers fetch it from each other as tasks need it.
    """
    with warnings.catch_warnings():
        # The data are meant to be in this task's argument.
        warnings.filterwarnings("ignore", "Sending large graph")
        return client.submit(_held_on_the_cluster, value, pure=False)


async def _end_worker_process() -> None:
    # A coroutine: Dask runs only those without waiting for an answer.
    os._exit(1)


class DaskRunner:
    """Trials as tasks on a Dask cluster, the cross-validation's data sent once
    (`hold_on_cluster`), each trial under the evaluator's time limit.

    A trial is sent to the cluster when one of its worker threads is free,
    so its time limit counts from when it starts (n_workers above the
    cluster's threads: the rest wait here, in the order submitted). Dask
    cannot stop a running task: a trial past its limit is a failed trial at
    once, and the worker running it is ended so that its nanny starts a
    fresh one.
    """

    def __init__(self, client: Any, evaluator: WorkerEvaluator, n_workers: int) -> None:
        self.client = client
        self.n_workers = n_workers
        self._cross_validation = evaluator.cross_validation
        self._time_limit = evaluator.time_limit
        cv = self._cross_validation
        self._data = [
            hold_on_cluster(client, array) for array in (cv.X, cv.y, cv.fold_ids)
        ]
        self._waiting: deque[_DaskTrial] = deque()
        self._running: dict[Any, _DaskTrial] = {}
        self._cut_unsent: deque[tuple[int, TrialResult]] = deque()

    def submit(self, request: TrialRequest) -> None:
        self._waiting.append(_DaskTrial(request))
        self._send()

    def _send(self) -> None:
        """Send waiting trials to the cluster's free worker threads, each to a
        worker with a free thread: Dask's own placement, drawn to the worker
        holding the data, put 4 trials proposed together on one worker while
        others idled."""
        if not self._waiting:
            return
        threads = self.client.nthreads()
        if not self._running and not threads:  # every worker gone: wait for one
            self.client.wait_for_workers(1, timeout=DASK_WORKER_WAIT)
            threads = self.client.nthreads()
        free = Counter(threads)
        free.subtract(
            trial.worker for trial in self._running.values() if trial.worker in threads
        )
        cv = self._cross_validation
        while self._waiting and len(self._running) < max(sum(threads.values()), 1):
            # the most free threads; among equals, the first address
            trial = self._waiting.popleft()
            request = trial.request
            cut = cut_before_start(self._time_limit, request.deadline)
            if cut is not None:  # unsent: sent, it would end its worker
                self._cut_unsent.append((trial.ticket, cut))
                continue
            limit = trial_limit(self._time_limit, request.deadline)
            worker = max(sorted(free), key=free.__getitem__, default=None)
            future = self.client.submit(
                evaluate_configuration,
                cv.model_factory,
                cv.model_name,
                dict(request.config),
                cv.random_state,
                *self._data,
                folds=None if request.folds is None else list(request.folds),
                train_fraction=request.train_fraction,
                pure=False,
                # a preference: if it dies, the trial goes to another worker
                workers=None if worker is None else [worker],
                allow_other_workers=True,
            )
            if worker is not None:
                free[worker] -= 1
            self._running[future] = replace(
                trial,
                limit=limit,
                started=time.monotonic(),
                worker=worker,
            )

    def next_finished(self) -> tuple[int, TrialResult]:
        # distributed takes seconds to import: only Dask runs pay for it.
        from distributed import wait as wait_for  # noqa: PLC0415

        if self._cut_unsent:
            return self._cut_unsent.popleft()
        while True:
            first_deadline = min(trial.gives_up_at for trial in self._running.values())
            try:
                wait_for(
                    list(self._running),
                    timeout=None
                    if first_deadline == float("inf")
                    else max(0.0, first_deadline - time.monotonic()),
                    return_when="FIRST_COMPLETED",
                )
            except Exception:  # noqa: BLE001, S110 - the timeout, or a future the cluster cancelled: both read below
                pass
            done = [future for future in self._running if future.done()]
            if done:
                # Of trials ending together, the earliest proposed first.
                future = min(done, key=lambda f: self._running[f].ticket)
                trial = self._running.pop(future)
                outcome = self._result(future, trial)
                break
            future = min(self._running, key=lambda f: self._running[f].gives_up_at)
            if not self._restarted_elsewhere(future):
                trial = self._running.pop(future)
                outcome = cut_trial(
                    trial.limit,
                    trial.request.deadline,
                    time.monotonic() - trial.started,
                )
                self._stop(future)
                break
        self._send()
        return trial.ticket, outcome

    def _restarted_elsewhere(self, future: Any) -> bool:
        """Whether an overdue trial's worker died, so that Dask started it again
        on another: its clock then starts again, where it runs now."""
        trial = self._running[future]
        if trial.worker is None or trial.worker in self.client.nthreads():
            return False
        where = self._workers_running(future)
        self._running[future] = replace(
            trial, started=time.monotonic(), worker=where[0] if where else None
        )
        return True

    def _workers_running(self, future: Any) -> list[str]:
        """The workers the scheduler has a trial's task on now."""
        return [
            worker
            for worker, keys in self.client.processing().items()
            if future.key in keys
        ]

    @staticmethod
    def _result(future: Any, trial: _DaskTrial) -> TrialResult:
        try:
            return future.result()
        except (Exception, asyncio.CancelledError) as error:  # noqa: BLE001 - KilledWorker, lost data
            return TrialResult(
                None,
                time.monotonic() - trial.started,
                f"{type(error).__name__}: {error}",
            )

    def _stop(self, future: Any) -> None:
        """Cancel a trial past its limit and end the worker process running it."""
        try:
            workers = self._workers_running(future)
            future.cancel()
            if workers:
                # Ended at once, not closed: the fit would hold a graceful close
                # for seconds. Its nanny starts a new worker; without a nanny
                # the cluster goes on with one worker fewer.
                self.client.run(_end_worker_process, workers=workers, wait=False)
                # Until the scheduler has seen it go, it would take the next trial.
                deadline = time.monotonic() + DASK_TRANSFER_SLACK
                while set(workers) & set(self.client.nthreads()):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
        except Exception:  # noqa: BLE001, S110 - a worker already gone; the trial is failed either way
            pass

    def recorded_trials(self) -> list[tuple[TrialRequest, TrialResult]]:
        return []

    def close(self) -> None:
        for future in [*self._running, *self._data]:
            future.cancel()
        self._running.clear()
        self._waiting.clear()


# What a LocalCluster's workers read their OpenMP and BLAS threads from.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# Where Dask reads the level of its `distributed` loggers, when it is imported.
DASK_LOG_LEVEL_VARIABLE = "DASK_LOGGING__DISTRIBUTED"


def _quiet_dask_logs() -> None:
    """Dask's warnings only, unless the user set its level.

    Dask logs every worker's and connection's start and stop at INFO, on
    handlers of its own (a run's console shows warnings and the run's own
    lines). The worker processes a LocalCluster spawns read the variable.
    """
    if DASK_LOG_LEVEL_VARIABLE not in os.environ:
        os.environ[DASK_LOG_LEVEL_VARIABLE] = "warning"
        logging.getLogger("distributed").setLevel(logging.WARNING)


def scheduler_address(parallel: ParallelSettings) -> str | None:
    """The scheduler a Dask run connects to; None: it starts a LocalCluster."""
    return parallel.address or os.environ.get(ADDRESS_VARIABLE) or None


@contextmanager
def dask_client(parallel: ParallelSettings) -> Iterator[Any]:
    """A client of the scheduler `parallel` names, or of a LocalCluster it starts
    (its workers each with their share of the cores for OpenMP and BLAS threads;
    an existing cluster's workers have the threads their own settings give)."""
    # distributed takes seconds to import: only Dask runs pay for it.
    import dask  # noqa: PLC0415
    from distributed import Client, LocalCluster  # noqa: PLC0415

    address = scheduler_address(parallel)
    _quiet_dask_logs()
    if address is not None:
        with Client(address) as client:
            yield client
        return
    n_workers = parallel.n_workers or 1
    # Workers that may start processes: a benchmark cell's serial search keeps
    # its time-limit worker process (daemonic processes may have no children).
    config: dict[str, Any] = {"distributed.worker.daemon": False}
    threads = trial_threads(n_workers)
    if threads is not None:
        # Each worker its share of the cores (Dask's default: one thread), set
        # before the worker process starts, as OpenMP and BLAS read it then.
        config.update(
            {
                f"distributed.nanny.pre-spawn-environ.{variable}": threads
                for variable in THREAD_VARIABLES
            }
        )
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@contextmanager
def dask_trial_runner(
    parallel: ParallelSettings, evaluator: WorkerEvaluator
) -> Iterator[DaskRunner]:
    """A DaskRunner on the cluster `parallel` names (or a LocalCluster it
    starts), once a first worker has joined; closed on exit."""
    with dask_client(parallel) as client:
        try:
            client.wait_for_workers(1, timeout=DASK_WORKER_WAIT)
        except TimeoutError:
            raise RuntimeError(
                f"no Dask worker joined the scheduler at {client.scheduler.address} "
                f"within {DASK_WORKER_WAIT:g} s: start workers with "
                f"`dask worker {client.scheduler.address}`"
            ) from None
        n_workers = parallel.n_workers or sum(client.nthreads().values())
        runner = DaskRunner(client, evaluator, n_workers)
        try:
            yield runner
        finally:
            runner.close()
