"""Where a search's trials run: one at a time, on local worker processes, or on Dask.

A search hands each configuration it proposes to a `TrialRunner` with a
ticket (its proposal number) and takes back finished trials one by one, in
whatever order they end. The strategy never trains a model itself, so the same
loop runs serially, on `n_workers` local processes or on a Dask cluster
(`parallel` block of conf/base/parameters.yml):

- `SerialRunner`: today's path, one evaluation at a time in the search's
  process (or its time-limit worker);
- `LocalProcessRunner`: `n_workers` evaluators, each with its own worker
  process, so a trial past its time limit is killed without touching the
  others (loky cannot kill one worker of a shared pool);
- `DaskRunner`: trials as tasks of a `distributed.Client`, the data sent to
  the cluster once (`hold_on_cluster`), each trial to a worker with a free
  thread. Dask has no per-task time limit, so the runner fails a trial past
  its limit and ends the worker process running it (its nanny starts a fresh
  one); a worker that dies is retried by Dask on another, and a trial whose
  retries are spent (KilledWorker) is a failed trial.

`ReplayingRunner` wraps any of them with the search's journal, so a stopped
search resumes without training its finished trials again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ensemble_bo.core.evaluation import (
    CrossValidationEvaluator,
    _evaluate,
    cut_before_start,
    trial_limit,
)
from ensemble_bo.core.journal import TrialJournal
from ensemble_bo.core.pool import TrialResult
from ensemble_bo.core.time_budget import TimeBudget

BACKENDS = ("local", "dask")
MODES = ("sync", "async")
# How a journal is replayed: by proposal (serial, sync) or by completion (async).
REPLAYS = ("proposals", "completions")
# A trial's share of the evaluation (CrossValidationEvaluator's keyword
# arguments `folds` and `train_fraction`): a multi-fidelity rung's.
Scope = Mapping[str, Any]
# Where a journal keeps a scoped trial's share, beside its configuration, so
# that a resumed search replays a rung's evaluation only for the same share.
SCOPE_KEY = "__scope__"
# Where a run finds an existing Dask scheduler when `parallel.address` is null.
ADDRESS_VARIABLE = "DASK_SCHEDULER_ADDRESS"


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
    """Runs proposed configurations; `next_finished` returns them as they end."""

    n_workers: int

    def submit(
        self, ticket: int, config: dict[str, Any], scope: Scope | None = None
    ) -> None:
        """Train `config`; `scope`: the evaluator's `folds` and `train_fraction`
        (a multi-fidelity rung's share), None: every fold on every row."""
        ...

    def next_finished(self) -> tuple[int, TrialResult]:
        """(ticket, result) of a submitted trial; blocks until one has ended."""
        ...

    def recorded_trials(self) -> list[tuple[dict[str, Any], TrialResult]]:
        """Trials of an earlier run to take as finished before proposing any."""
        ...


class SerialRunner:
    """One trial at a time, trained when its result is asked for."""

    n_workers = 1

    def __init__(self, evaluate: Callable[..., TrialResult]) -> None:
        self.evaluate = evaluate
        self._submitted: deque[tuple[int, dict[str, Any], Scope | None]] = deque()

    def submit(
        self, ticket: int, config: dict[str, Any], scope: Scope | None = None
    ) -> None:
        self._submitted.append((ticket, config, scope))

    def next_finished(self) -> tuple[int, TrialResult]:
        ticket, config, scope = self._submitted.popleft()
        return ticket, self.evaluate(config, **(scope or {}))

    def recorded_trials(self) -> list[tuple[dict[str, Any], TrialResult]]:
        return []


class LocalProcessRunner:
    """`n_workers` trials at once, each evaluator in its own worker process.

    Threads only wait on the workers: each thread takes an idle evaluator,
    which trains in its process (time limit and all, as when serial).
    """

    def __init__(self, evaluator: CrossValidationEvaluator, n_workers: int) -> None:
        self.n_workers = n_workers
        self._evaluators = [
            replace(evaluator, worker_process=True) for _ in range(n_workers)
        ]
        self._idle: queue.SimpleQueue[CrossValidationEvaluator] = queue.SimpleQueue()
        for each in self._evaluators:
            self._idle.put(each)
        self._threads = ThreadPoolExecutor(n_workers, thread_name_prefix="trial")
        self._running: dict[Any, int] = {}

    def _evaluate(self, config: dict[str, Any], scope: Scope | None) -> TrialResult:
        evaluator = self._idle.get()
        try:
            return evaluator(config, **(scope or {}))
        finally:
            self._idle.put(evaluator)

    def submit(
        self, ticket: int, config: dict[str, Any], scope: Scope | None = None
    ) -> None:
        self._running[self._threads.submit(self._evaluate, config, scope)] = ticket

    def next_finished(self) -> tuple[int, TrialResult]:
        done, _ = wait(self._running, return_when=FIRST_COMPLETED)
        # Of trials ending together, the earliest proposed first.
        future = min(done, key=self._running.__getitem__)
        return self._running.pop(future), future.result()

    def recorded_trials(self) -> list[tuple[dict[str, Any], TrialResult]]:
        return []

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        for each in self._evaluators:
            each.close()  # at once: a fit still running is killed


# Seconds a Dask trial may take beyond its limit for sending the task and its
# result, before the runner cancels it.
DASK_TRANSFER_SLACK = 2.0
# Seconds a run waits for a first worker to join the scheduler it connects to.
DASK_WORKER_WAIT = 120.0


@dataclass(frozen=True)
class _DaskTrial:
    ticket: int
    config: dict[str, Any]
    first: bool  # the search's first trial, never cut by its time budget
    scope: Scope | None = None  # folds and train_fraction; None: all of them
    # Set when it is sent to the cluster, so that a trial queued behind busy
    # workers gets the time the budget has left then.
    limit: float | None = None  # seconds; None: none
    cut_by: str = ""  # what the error of a trial cut at its limit says
    started: float = math.nan  # when it was sent to the cluster
    worker: str | None = None  # the worker it was sent to

    @property
    def deadline(self) -> float:
        """When the runner gives up on it: its limit plus the transfers' slack."""
        if self.limit is None:
            return float("inf")
        return self.started + self.limit + DASK_TRANSFER_SLACK


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
    """Trials as tasks on a Dask cluster, the evaluator's data sent once
    (`hold_on_cluster`).

    A trial is sent to the cluster when one of its worker threads is free,
    so its time limit counts from when it starts (n_workers above the
    cluster's threads: the rest wait here, in the order submitted). Dask
    cannot stop a running task: a trial past its limit is a failed trial at
    once, and the worker running it is ended so that its nanny starts a
    fresh one.
    """

    def __init__(
        self, client: Any, evaluator: CrossValidationEvaluator, n_workers: int
    ) -> None:
        self.client = client
        self.n_workers = n_workers
        self._evaluator = evaluator
        self._data = [
            hold_on_cluster(client, array)
            for array in (evaluator.X, evaluator.y, evaluator.fold_ids)
        ]
        self._waiting: deque[_DaskTrial] = deque()
        self._running: dict[Any, _DaskTrial] = {}
        self._cut_unsent: deque[tuple[int, TrialResult]] = deque()
        self._submitted = 0

    def submit(
        self, ticket: int, config: dict[str, Any], scope: Scope | None = None
    ) -> None:
        first = not self._submitted
        self._submitted += 1
        self._waiting.append(_DaskTrial(ticket, dict(config), first, scope))
        self._send()

    def _send(self) -> None:
        """Send waiting trials to the cluster's free worker threads, each to a
        worker with a free thread: Dask's own placement, drawn to the worker
        holding the data, put 4 trials of a sync batch on one worker while
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
        evaluator = self._evaluator
        while self._waiting and len(self._running) < max(sum(threads.values()), 1):
            # the most free threads; among equals, the first address
            trial = self._waiting.popleft()
            cut = cut_before_start(
                evaluator.time_limit, evaluator.time_budget, trial.first
            )
            if cut is not None:  # unsent: sent, it would end its worker
                self._cut_unsent.append((trial.ticket, cut))
                continue
            limit, cut_by = trial_limit(
                evaluator.time_limit, evaluator.time_budget, trial.first
            )
            worker = max(sorted(free), key=free.__getitem__, default=None)
            future = self.client.submit(
                _evaluate,
                evaluator.model_factory,
                evaluator.model_name,
                trial.config,
                evaluator.random_state,
                *self._data,
                **(trial.scope or {}),
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
                cut_by=cut_by,
                started=time.monotonic(),
                worker=worker,
            )

    def next_finished(self) -> tuple[int, TrialResult]:
        # distributed takes seconds to import: only Dask runs pay for it.
        from distributed import wait as wait_for  # noqa: PLC0415

        if self._cut_unsent:
            return self._cut_unsent.popleft()
        while True:
            first_deadline = min(trial.deadline for trial in self._running.values())
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
            future = min(self._running, key=lambda f: self._running[f].deadline)
            if not self._restarted_elsewhere(future):
                trial = self._running.pop(future)
                outcome = TrialResult(
                    None,
                    time.monotonic() - trial.started,
                    f"TimeoutError: fit {trial.cut_by}",
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

    def recorded_trials(self) -> list[tuple[dict[str, Any], TrialResult]]:
        return []

    def close(self) -> None:
        for future in [*self._running, *self._data]:
            future.cancel()
        self._running.clear()
        self._waiting.clear()


class ReplayingRunner:
    """A runner that answers recorded trials from the journal and records new ones.

    replay="proposals" (serial and sync searches, whose proposals a seed
    decides): trial t is answered from the journal when the search proposes
    the configuration recorded at t; otherwise the journal from t on no longer
    applies and is dropped. replay="completions" (async searches, whose
    proposals depend on which trial ended first): the recorded trials are
    given back once, in their order, for the search to take as finished
    (`recorded_trials`), and new ones are recorded after them as they end.
    A replayed trial is charged to `time_budget` at the seconds it took over
    `n_workers`, the trials that trained side by side.
    """

    def __init__(
        self,
        runner: TrialRunner,
        journal: TrialJournal,
        time_budget: TimeBudget | None = None,
        replay: str = "proposals",
    ) -> None:
        if replay not in REPLAYS:
            raise ValueError(f"replay={replay!r} is not one of {list(REPLAYS)}")
        self.runner = runner
        self.n_workers = runner.n_workers
        self.journal = journal
        self.time_budget = time_budget
        self.replay = replay
        # proposals: by ticket, gaps and all (a sync batch stopped mid-way
        # leaves the trials that had ended); completions: in the order they ended.
        self._recorded = journal.recorded() if replay == "proposals" else {}
        self._completions = journal.entries() if replay == "completions" else []
        self._replayed: deque[tuple[int, TrialResult]] = deque()
        self._configs: dict[int, dict[str, Any]] = {}
        self._finished = 0
        self.reused = 0
        self.trained = 0

    def recorded_trials(self) -> list[tuple[dict[str, Any], TrialResult]]:
        completions, self._completions = self._completions, []
        if self.replay == "completions":
            # whatever lies past the first gap was never taken as finished
            self.journal.truncate(len(completions))
        for entry in completions:
            self._charge(entry.result)
        self.reused = self._finished = len(completions)
        return [(entry.config, entry.result) for entry in completions]

    def _charge(self, result: TrialResult) -> None:
        # Trials that trained side by side took about 1/n_workers of their sum.
        if self.time_budget is not None:
            self.time_budget.charge(result.fit_seconds / self.n_workers)

    def submit(
        self, ticket: int, config: dict[str, Any], scope: Scope | None = None
    ) -> None:
        recorded_as = config if scope is None else {**config, SCOPE_KEY: dict(scope)}
        entry = self._recorded.get(ticket)
        if entry is not None:
            if entry.config == recorded_as:
                self.reused += 1
                self._charge(entry.result)
                self._replayed.append((ticket, entry.result))
                return
            # The search went another way here: the rest no longer applies.
            self._recorded = {i: e for i, e in self._recorded.items() if i < ticket}
            self.journal.truncate(ticket)
        self._configs[ticket] = recorded_as
        self.runner.submit(ticket, config, scope)

    def next_finished(self) -> tuple[int, TrialResult]:
        if self._replayed:
            return self._replayed.popleft()
        ticket, result = self.runner.next_finished()
        index = ticket if self.replay == "proposals" else self._finished
        config = self._configs.pop(ticket)
        # A trial that never ran (its worker did not start) is left out, as a
        # gap: a resumed search trains it, where a replay would fail it again.
        if not result.never_ran:
            self.journal.record(index, config, result)
        self._finished += 1
        self.trained += 1
        return ticket, result


@contextmanager
def trial_runner(
    parallel: ParallelSettings, evaluator: CrossValidationEvaluator
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
    """A client of the scheduler `parallel` names, or of a LocalCluster it starts."""
    # distributed takes seconds to import: only Dask runs pay for it.
    import dask  # noqa: PLC0415
    from distributed import Client, LocalCluster  # noqa: PLC0415

    address = scheduler_address(parallel)
    _quiet_dask_logs()
    if address is not None:
        with Client(address) as client:
            yield client
        return
    # Workers that may start processes: a benchmark cell's serial search keeps
    # its time-limit worker process (daemonic processes may have no children).
    with (
        dask.config.set({"distributed.worker.daemon": False}),
        LocalCluster(
            n_workers=parallel.n_workers or 1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
