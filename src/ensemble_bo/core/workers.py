"""Worker processes: evaluations under a time limit, and workers that end with their parent.

An evaluation past its time limit must be stoppable, and a fit in C code can
only be stopped by ending its process: `WorkerEvaluator` runs a
CrossValidation's evaluations in a worker process of its own, kills it (with
any processes it started) at the limit, and keeps it otherwise, so that the
data are sent and scikit-learn is imported once. A finished search leaves its
idle worker to the next search of the process (`release`), and every worker
exits when the process that started it dies, even by SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# loky (vendored by joblib, already a scikit-learn dependency) rather than
# hand-written process management: it reports a worker that dies as
# TerminatedWorkerError instead of hanging, and kills a worker's whole process
# tree on shutdown(kill_workers=True). A private executor is used, not joblib's
# process-wide reusable one, so that killing a stuck fit never touches workers
# that other code (a joblib.Parallel elsewhere) is using.
from joblib.externals.loky import ProcessPoolExecutor
from joblib.externals.loky.process_executor import BrokenProcessPool

from ensemble_bo.core.evaluation import (
    CrossValidation,
    ModelFactory,
    evaluate_configuration,
)
from ensemble_bo.core.threads import data_cells, limit_threads, trial_threads
from ensemble_bo.core.time_budget import (
    cut_before_start,
    cut_trial,
    is_seconds,
    trial_limit,
)
from ensemble_bo.core.trials import TrialRequest, TrialResult

# How often a worker checks that the process that started it is still alive.
PARENT_POLL_SECONDS = 0.5
# The process whose parent is watched (a forked child has no watch thread).
_watching_pid: int | None = None


def _child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc; elsewhere none are known)."""
    children = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = entry.read_text()
        except OSError:  # gone meanwhile
            continue
        # field 2 (the command name) may hold spaces and parentheses
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            children.append(int(entry.parent.name))
    return children


def _kill_descendants() -> None:
    """SIGKILL every process this one started, and theirs (a fit's own workers)."""
    pending, seen = [os.getpid()], set()
    while pending:
        for child in _child_pids(pending.pop()):
            if child not in seen:
                seen.add(child)
                pending.append(child)
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass


def exit_when_parent_dies(
    parent_pid: int, poll_seconds: float = PARENT_POLL_SECONDS
) -> None:
    """Make this worker process exit, with its own children, once `parent_pid` dies.

    A pool worker waits on its task queue forever, so a parent killed with
    SIGKILL or by the out-of-memory killer (which runs no cleanup) would leave it
    running, holding its data and any fit in progress. A daemon thread compares
    the parent's id with `parent_pid` every `poll_seconds`; when the worker has
    been re-parented (to init or a subreaper), the thread kills the worker's
    child processes and ends the worker with os._exit. Polling rather than
    PR_SET_PDEATHSIG: that signal follows the parent *thread* that forked the
    worker (loky starts replacements from its manager thread), and is Linux only.

    Meant as a pool's initializer (`initargs=(os.getpid(),)` in the parent);
    one watch per process, later calls do nothing.
    """
    global _watching_pid  # noqa: PLW0603 - one watch per process
    if _watching_pid == os.getpid():
        return
    _watching_pid = os.getpid()

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        _kill_descendants()
        os._exit(1)

    threading.Thread(target=watch, name="exit-when-parent-dies", daemon=True).start()


# Data of the evaluator a worker process serves now, and that evaluator's key;
# replaced when the worker passes to another evaluator.
_worker_data: dict[str, np.ndarray] = {}
_worker_data_key: list[str] = []


def _load_worker_data(
    key: str,
    X: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    model_factory: ModelFactory,
    threads: int | None,
) -> bool:
    # Receiving the factory imports its module here, in the start-up, rather
    # than in the first evaluation, whose time limit it would eat into.
    _drop_worker_data()
    _worker_data.update(X=X, y=y, fold_ids=fold_ids)
    _worker_data_key.append(key)
    limit_threads(threads)
    return True


def _holds_data(key: str) -> bool:
    return _worker_data_key == [key]


def _drop_worker_data() -> None:
    _worker_data.clear()
    _worker_data_key.clear()


# One idle worker process per process, left by a finished search for the next
# one: starting a worker (a fresh interpreter that imports scikit-learn) took
# 3-6 s, half the wall time of a decision-tree benchmark cell, and a benchmark
# process runs its cells' searches one after another. Keyed by the process id,
# so that a forked child never takes its parent's worker.
_parked_workers: dict[int, ProcessPoolExecutor] = {}
# How long an idle worker may take to drop its data before it is parked.
PARK_SECONDS = 10.0
_parked_lock = threading.Lock()


_exit_stop_registered: set[int] = set()


def _stop_parked_worker_at_exit() -> None:
    # At exit, before multiprocessing joins a process's children (finalizers of
    # priority >= 0 run first): a parked worker waits for work forever, so a
    # process that left one, e.g. a process-pool worker that ran a serial
    # search, would never end (seen in the multi-fidelity benchmark).
    # Registered per process at its first park: a forked child starts with its
    # parent's finalizers cleared.
    with _parked_lock:
        if os.getpid() in _exit_stop_registered:
            return
        _exit_stop_registered.add(os.getpid())
    multiprocessing.util.Finalize(None, stop_parked_worker, exitpriority=0)


def _elapsed(start: float) -> float:
    """Seconds since `start` (a time.perf_counter() reading)."""
    return time.perf_counter() - start


def _park_worker(executor: ProcessPoolExecutor) -> None:
    _stop_parked_worker_at_exit()
    try:
        # waited for: loky's manager thread raised KeyError (a traceback on
        # stderr) when the worker was killed with this call still queued
        executor.submit(_drop_worker_data).result(timeout=PARK_SECONDS)
    except Exception:  # noqa: BLE001 - a broken or stuck worker is not kept
        executor.shutdown(wait=True, kill_workers=True)
        return
    with _parked_lock:
        replaced = _parked_workers.pop(os.getpid(), None)
        _parked_workers[os.getpid()] = executor
    if replaced is not None:
        replaced.shutdown(wait=True, kill_workers=True)


def _take_parked_worker() -> ProcessPoolExecutor | None:
    with _parked_lock:
        return _parked_workers.pop(os.getpid(), None)


def stop_parked_worker() -> None:
    """Stop the idle worker a finished search left to the next one (release),
    if any: for a process that runs no other search, so that the worker's
    memory (a few hundred MB after a large-data search) is not held while
    the final model is refit and logged."""
    executor = _take_parked_worker()
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)


def _evaluate_in_worker(
    key: str,
    model_factory: ModelFactory,
    model_name: str,
    config: dict[str, Any],
    random_state: int,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
) -> TrialResult | None:
    """The trial's result, or None when this worker does not hold the data of
    the evaluator `key`: loky ends a worker whose memory grew by more than
    300 MB over a task (its leak check) and starts a bare one in its place,
    which on large data happened between two trials."""
    if not _holds_data(key):
        return None
    return evaluate_configuration(
        model_factory,
        model_name,
        config,
        random_state,
        **_worker_data,
        folds=folds,
        train_fraction=train_fraction,
    )


# Where a time limit's worker cannot start: inside a daemonic process, such as a
# Dask worker that a nanny started with its defaults.
_DAEMON_HINT = (
    " (this process is daemonic: for a Dask cluster, start its workers with "
    "DASK_DISTRIBUTED__WORKER__DAEMON=False, or set time_limit: null)"
)


def check_time_limit(time_limit: object) -> float | None:
    """`time_limit` as seconds > 0, or None (no limit)."""
    if time_limit is not None and not is_seconds(time_limit):
        raise ValueError(
            "time_limit must be a positive finite number of seconds or None, "
            f"got {time_limit!r}"
        )
    return None if time_limit is None else float(time_limit)


@dataclass
class WorkerEvaluator:
    """Evaluates a CrossValidation's trials under a time limit: request -> TrialResult.

    time_limit: None runs an evaluation in this process, with no overhead and
    no limit. A positive number of seconds runs it in a worker process
    instead, and caps the whole evaluation of one configuration: building the
    model, the k fits and predictions, and sending the predictions back. It
    does not cover starting the worker (which receives X, y and fold_ids once,
    when it starts, imports the model factory's module, and is reused from
    call to call). When the limit is passed the worker is killed (with any
    processes it started) and replaced on the next call, and the trial fails
    with a TimeoutError text and fit_seconds = the time waited. A worker that
    dies (a crash in C code, os._exit) is a failed trial as well. A finished
    evaluation reports the fit time measured in the worker, like the
    in-process path, and the same predictions.

    A request's deadline (the search's time budget) caps its limit at what
    the budget has left (core.time_budget.trial_limit), so a budget alone
    also runs evaluations in the worker; the limit is taken once the worker
    is up, so that its start-up, which the budget counts, does not also make
    a trial overshoot.

    One evaluation runs at a time per evaluator; `close()` stops the worker
    early (it also stops when the evaluator is garbage-collected or the
    interpreter exits), `release()` at the end of a search leaves it to the
    next evaluator of this process, which then sends its own data instead of
    starting a worker. worker_process: run every evaluation in the worker
    process, even with no limit (several evaluators then train side by side:
    core.runners.LocalProcessRunner). threads: the OpenMP and BLAS threads
    the worker process may use (None: a lone worker's, every core or
    OMP_NUM_THREADS, core.threads.trial_threads); an evaluation in this
    process leaves the process's threads alone.
    """

    cross_validation: CrossValidation
    time_limit: float | None = None
    worker_process: bool = False
    threads: int | None = None

    def __post_init__(self) -> None:
        self.time_limit = check_time_limit(self.time_limit)
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._data_key = uuid.uuid4().hex

    # The worker and its lock are not part of the state: a copy, or an unpickled
    # evaluator, starts its own worker when it first needs one.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_executor", None)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._executor = None
        self._lock = threading.Lock()
        self._data_key = uuid.uuid4().hex

    def __call__(self, request: TrialRequest) -> TrialResult:
        limit = trial_limit(self.time_limit, request.deadline).seconds
        if limit is None and not self.worker_process:
            return self.cross_validation(request)
        with self._lock:
            return self._evaluate_in_worker_process(request)

    def close(self) -> None:
        """Stop the worker process, if any, at once (an evaluation still running
        fails); a later call starts a new one."""
        self._kill_worker()

    def release(self) -> None:
        """Leave the worker process, idle, to the next evaluator of this process,
        which sends it its own data instead of starting one; call it only when
        no evaluation is running (a search that has ended)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            _park_worker(executor)

    def _evaluate_in_worker_process(self, request: TrialRequest) -> TrialResult:
        # Twice at most: loky may end the worker after any task (its leak
        # check), the last one included, and put a bare one in its place.
        for _ in range(2):
            cut = cut_before_start(self.time_limit, request.deadline)
            if cut is not None:
                return cut
            start = time.perf_counter()
            try:
                executor = self._worker_with_data()
            except Exception as error:  # noqa: BLE001 - e.g. data that cannot be sent
                self._kill_worker()
                return TrialResult(
                    None,
                    time.perf_counter() - start,
                    f"{type(error).__name__}: the worker process could not start: "
                    f"{error}{_DAEMON_HINT if multiprocessing.current_process().daemon else ''}",
                    never_ran=True,
                )
            except BaseException:  # KeyboardInterrupt: no half-started worker left
                self._kill_worker()
                raise
            result = self._run_in_worker(executor, request)
            if result is not None:
                return result
        self._kill_worker()
        return TrialResult(
            None,
            0.0,
            "RuntimeError: the worker process was replaced twice before the trial",
            never_ran=True,
        )

    def _worker_with_data(self) -> ProcessPoolExecutor:
        """The worker, holding this evaluator's data: sent again (outside the
        limit, as to a new worker) where loky replaced the one that held them."""
        executor = self._ready_worker()
        if not executor.submit(_holds_data, self._data_key).result():
            self._send_data(executor)
        return executor

    def _run_in_worker(
        self, executor: ProcessPoolExecutor, request: TrialRequest
    ) -> TrialResult | None:
        start = time.perf_counter()
        limit = trial_limit(self.time_limit, request.deadline)
        cv = self.cross_validation
        try:
            future = executor.submit(
                _evaluate_in_worker,
                self._data_key,
                cv.model_factory,
                cv.model_name,
                dict(request.config),
                cv.random_state,
                None if request.folds is None else list(request.folds),
                request.train_fraction,
            )
            result = future.result(
                timeout=None
                if limit.seconds is None
                else max(0.0, limit.seconds - _elapsed(start))
            )
        except FutureTimeoutError:
            self._kill_worker()
            return cut_trial(limit, request.deadline, _elapsed(start))
        except Exception as error:  # noqa: BLE001 - a dead worker, an unpicklable config
            if isinstance(error, BrokenProcessPool):
                self._kill_worker()
            return TrialResult(
                None, time.perf_counter() - start, f"{type(error).__name__}: {error}"
            )
        except BaseException:  # KeyboardInterrupt: do not leave the fit running
            self._kill_worker()
            raise
        # A loaded machine can hold this thread between submit and result while
        # the fit ends in the worker: the limit is on the trial's wall time.
        if limit.seconds is not None and _elapsed(start) > limit.seconds:
            return cut_trial(limit, request.deadline, _elapsed(start))
        return result

    def _ready_worker(self) -> ProcessPoolExecutor:
        """The worker holding this evaluator's data: a parked one, or a new one.

        The data are sent here, so that sending them does not count in the limit.
        """
        if self._executor is None:
            parked = _take_parked_worker()
            if parked is not None:
                try:
                    return self._send_data(parked)
                except Exception:  # noqa: BLE001 - it died while parked: start anew
                    parked.shutdown(wait=True, kill_workers=True)
            self._executor = ProcessPoolExecutor(
                max_workers=1,
                # The worker exits when this process dies, even by SIGKILL.
                initializer=exit_when_parent_dies,
                initargs=(os.getpid(),),
            )
            self._send_data(self._executor)
        return self._executor

    def _send_data(self, executor: ProcessPoolExecutor) -> ProcessPoolExecutor:
        self._executor = executor
        cv = self.cross_validation
        threads = (
            trial_threads(1, data_cells(cv.X)) if self.threads is None else self.threads
        )
        loaded = executor.submit(
            _load_worker_data,
            self._data_key,
            cv.X,
            cv.y,
            cv.fold_ids,
            cv.model_factory,
            threads,
        )
        if not loaded.result():
            raise RuntimeError("the worker did not receive its data")
        return executor

    def _kill_worker(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, kill_workers=True)
