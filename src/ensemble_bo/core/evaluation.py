"""Evaluating a configuration: k-fold out-of-fold predictions, failures recorded."""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, replace
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
from sklearn.base import BaseEstimator, clone, is_classifier

from ensemble_bo.core.pool import TrialResult
from ensemble_bo.core.time_budget import TimeBudget, is_seconds
from ensemble_bo.core.zoo import MODEL_FACTORIES, make_model, quiet_iteration_caps

ModelFactory = Callable[[str, dict[str, Any], int], BaseEstimator]


def _evaluate(
    model_factory: ModelFactory,
    model_name: str,
    config: dict[str, Any],
    random_state: int,
    X: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
) -> TrialResult:
    """The evaluation itself, the same in-process and in a worker."""
    start = time.perf_counter()
    try:
        model = model_factory(model_name, config, random_state)
        with quiet_iteration_caps():
            predictions, probabilities = out_of_fold_predictions(
                model, X, y, fold_ids, folds, train_fraction, random_state
            )
        evaluated = np.isin(fold_ids, _folds_or_all(fold_ids, folds))
        if not np.all(np.isfinite(predictions[evaluated])) or (
            probabilities is not None
            and not np.all(np.isfinite(probabilities[evaluated]))
        ):
            raise ValueError("the model predicted NaN or infinite values")
    except Exception as error:  # noqa: BLE001 - any training failure is a failed trial
        return TrialResult(
            None, time.perf_counter() - start, f"{type(error).__name__}: {error}"
        )
    return TrialResult(
        np.asarray(predictions, dtype=float),
        time.perf_counter() - start,
        oof_probabilities=probabilities,
    )


def _folds_or_all(fold_ids: np.ndarray, folds: Sequence[int] | None) -> np.ndarray:
    all_folds = np.unique(fold_ids)
    if folds is None:
        return all_folds
    unknown = sorted(set(folds) - set(all_folds.tolist()))
    if unknown:
        raise ValueError(
            f"folds {unknown} are not among the folds {all_folds.tolist()}"
        )
    return np.asarray(sorted(set(folds)))


def out_of_fold_predictions(
    model: BaseEstimator,
    X: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
    random_state: int = 0,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(predictions (n,), class probabilities (n, K) or None) of k-fold CV.

    `folds`: the folds to predict (None: all); the rows of the others are NaN,
    so that a multi-fidelity search can evaluate a configuration on some folds
    and add the rest later (`merge_fold_results`). Each fold's model is fitted
    on the rows of every other fold, whichever folds are predicted, so a fold's
    predictions are the same whether it is evaluated alone or with the rest.
    `train_fraction` < 1 fits each fold's model on that share of its training
    rows (at least 2), a prefix of one seeded shuffle per fold, so a larger
    fraction trains on a superset: the rows resource of a multi-fidelity search.

    Regression: the model's predictions, no probabilities. A classifier, y
    holding codes 0..K-1, gives both its `predict` labels and its
    `predict_proba` from one fit per fold (columns placed by its `classes_`, so
    a fold missing a class leaves that column 0). A classifier without
    predict_proba (an SVC without Platt scaling) gives the one-hot of its
    labels: its hard vote, with no calibration fits added, which the log-loss
    then prices as a sure answer.
    """
    classifier = is_classifier(model)
    targets = np.asarray(y).astype(int) if classifier else np.asarray(y)
    predictions = np.full(len(targets), np.nan)
    probabilities = None
    if classifier:
        identity = np.eye(int(targets.max()) + 1)
        probabilities = np.full((len(targets), len(identity)), np.nan)
    if not 0 < train_fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction!r}")
    for fold in _folds_or_all(fold_ids, folds):
        test = fold_ids == fold
        train = np.flatnonzero(~test)
        if train_fraction < 1:
            shuffled = np.random.default_rng([random_state, int(fold)]).permutation(
                train
            )
            kept = max(2, math.ceil(train_fraction * len(train)))
            train = np.sort(shuffled[:kept])
        fitted = clone(model).fit(X[train], targets[train])
        predictions[test] = fitted.predict(X[test])
        if not classifier:
            continue
        if hasattr(fitted, "predict_proba"):
            probabilities[test] = 0.0
            columns = np.asarray(fitted.classes_).astype(int)
            probabilities[np.ix_(test, columns)] = fitted.predict_proba(X[test])
        else:
            probabilities[test] = identity[predictions[test].astype(int)]
    return predictions, probabilities


def merge_fold_results(earlier: TrialResult, later: TrialResult) -> TrialResult:
    """One configuration's evaluations on two disjoint sets of folds as one.

    Rows the later evaluation predicted (finite) take its outputs, the others
    keep the earlier ones; fit seconds add up. A failed part fails the whole.
    """
    if not later.ok:
        return replace(later, fit_seconds=earlier.fit_seconds + later.fit_seconds)
    if not earlier.ok:
        return earlier
    new_rows = np.isfinite(later.oof_predictions)
    predictions = np.where(new_rows, later.oof_predictions, earlier.oof_predictions)
    probabilities = None
    if later.oof_probabilities is not None:
        probabilities = np.where(
            new_rows[:, None], later.oof_probabilities, earlier.oof_probabilities
        )
    return TrialResult(
        predictions,
        earlier.fit_seconds + later.fit_seconds,
        oof_probabilities=probabilities,
    )


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


# Data of the evaluator a worker process serves now; replaced when the worker
# passes to another evaluator.
_worker_data: dict[str, np.ndarray] = {}


def _load_worker_data(
    X: np.ndarray, y: np.ndarray, fold_ids: np.ndarray, model_factory: ModelFactory
) -> bool:
    # Receiving the factory imports its module here, in the start-up, rather
    # than in the first evaluation, whose time limit it would eat into.
    _worker_data.clear()
    _worker_data.update(X=X, y=y, fold_ids=fold_ids)
    return True


def _drop_worker_data() -> None:
    _worker_data.clear()


# One idle worker process per process, left by a finished search for the next
# one: starting a worker (a fresh interpreter that imports scikit-learn) took
# 3-6 s, half the wall time of a decision-tree benchmark cell, and a benchmark
# process runs its cells' searches one after another. Keyed by the process id,
# so that a forked child never takes its parent's worker.
_parked_workers: dict[int, ProcessPoolExecutor] = {}
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
    multiprocessing.util.Finalize(None, _stop_parked_worker, exitpriority=0)


def _park_worker(executor: ProcessPoolExecutor) -> None:
    _stop_parked_worker_at_exit()
    try:
        executor.submit(_drop_worker_data)  # not waited for
    except Exception:  # noqa: BLE001 - a broken worker is not kept
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


def _stop_parked_worker() -> None:
    executor = _take_parked_worker()
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)


def _evaluate_in_worker(
    model_factory: ModelFactory,
    model_name: str,
    config: dict[str, Any],
    random_state: int,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
) -> TrialResult:
    return _evaluate(
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


def _budget_cuts(time_budget: TimeBudget | None, first: bool) -> bool:
    """Whether the time budget may cut a trial (see `trial_limit`)."""
    return time_budget is not None and not first and not time_budget.cuts_held


def trial_limit(
    time_limit: float | None, time_budget: TimeBudget | None, first: bool
) -> tuple[float | None, str]:
    """One trial's limit in seconds (None: none) and what a cut trial's error says.

    The smaller of `time_limit` and what `time_budget` has left; a `first`
    trial, or one started while the budget holds its cuts, is never cut by the
    budget (the search needs a model to refit).
    """
    remaining = time_budget.remaining() if _budget_cuts(time_budget, first) else None
    if remaining is None or (time_limit is not None and time_limit <= remaining):
        if time_limit is None:
            return None, ""
        return time_limit, f"exceeded the time limit of {time_limit:g} s"
    # A trial asked for with no time left is cut at once rather than run.
    return max(remaining, 1e-3), (
        f"was cut at the end of the time budget of {time_budget.seconds:g} s"
    )


def cut_before_start(
    time_limit: float | None, time_budget: TimeBudget | None, first: bool
) -> TrialResult | None:
    """The failed trial of one asked for once `time_budget` is spent, cut before
    it starts, or None: started, it would be cut at once, and the cut ends the
    process it ran in (a new worker takes 1.5-2.5 s; a multi-fidelity rung
    asks for several such trials after the budget ends)."""
    if not (_budget_cuts(time_budget, first) and time_budget.spent()):
        return None
    _, cut_by = trial_limit(time_limit, time_budget, first)
    return TrialResult(None, 0.0, f"TimeoutError: fit {cut_by}")


def _check_time_limit(time_limit: object) -> None:
    if time_limit is not None and not is_seconds(time_limit):
        raise ValueError(
            "time_limit must be a positive finite number of seconds or None, "
            f"got {time_limit!r}"
        )


@dataclass
class CrossValidationEvaluator:
    """Callable config -> TrialResult over fixed folds.

    Strategies only see this interface, so the same loop can later run its
    evaluations elsewhere (joblib, Dask) without knowing it.

    X: (n, p) features; y: (n,) targets; fold_ids: (n,) fold index of each row.

    model_factory(model_name, config, random_state) builds the unfitted model;
    it defaults to the zoo's `make_model` (and only then is `model_name` checked
    against the zoo). With a `time_limit` it must be picklable, i.e. a
    module-level function.

    time_limit: None (the default) runs the evaluation in this process, with no
    overhead and no limit. A positive number of seconds runs it in a worker
    process instead, and caps the whole evaluation of one configuration: building
    the model, the k fits and predictions, and sending the predictions back.
    It does not cover starting the worker (which receives X, y and fold_ids once,
    when it starts, imports the model factory's module, and is reused from call
    to call). When the limit is passed
    the worker is killed (with any processes it started) and replaced on the next
    call, and the trial fails with a TimeoutError text and fit_seconds = the time
    waited. A worker that dies (a crash in C code, os._exit) is a failed trial as
    well. A finished evaluation reports the fit time measured in the worker,
    like the in-process path, and the same predictions. One evaluation runs at
    a time per evaluator; call `close()` to stop the worker early (it also
    stops when the evaluator is garbage-collected or the interpreter exits), or
    `release()` at the end of a search to leave it to the next evaluator of this
    process, which then sends its own data instead of starting a worker.

    time_budget: the search's wall-time budget, shared with the search loop.
    While it runs, each evaluation's limit is the smaller of `time_limit` and
    the seconds the budget has left (so a budget alone also runs evaluations
    in the worker), and a trial cut by the budget fails with a TimeoutError
    text saying so. The limit is taken once the worker is up, so that its
    start-up, which the budget counts, does not also make a trial overshoot.
    The first evaluation is not cut by the budget (only by `time_limit`): a
    start-up that outlasts a short budget on a busy machine must still leave
    the search a model to refit.

    worker_process: run every evaluation in the worker process, even with no
    limit (several evaluators then train in parallel: core.parallel).
    """

    model_name: str
    X: np.ndarray
    y: np.ndarray
    fold_ids: np.ndarray
    random_state: int = 0
    time_limit: float | None = None
    model_factory: ModelFactory = make_model
    time_budget: TimeBudget | None = None
    worker_process: bool = False

    def __post_init__(self) -> None:
        if self.model_factory is make_model and self.model_name not in MODEL_FACTORIES:
            raise ValueError(
                f"unknown model {self.model_name!r}; available: {sorted(MODEL_FACTORIES)}"
            )
        if not len(self.X) == len(self.y) == len(self.fold_ids):
            raise ValueError(
                f"X, y and fold_ids differ in length: {len(self.X)}, {len(self.y)}, "
                f"{len(self.fold_ids)}"
            )
        _check_time_limit(self.time_limit)
        self.evaluations = 0
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

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

    def __call__(
        self,
        config: dict[str, Any],
        folds: Sequence[int] | None = None,
        train_fraction: float = 1.0,
    ) -> TrialResult:
        """The configuration's out-of-fold outputs on `folds` (None: every fold;
        the other folds' rows NaN), each fold's model fitted on `train_fraction`
        of its training rows."""
        try:
            return self._evaluate_config(config, folds, train_fraction)
        finally:
            self.evaluations += 1

    def _evaluate_config(
        self, config: dict[str, Any], folds: Sequence[int] | None, train_fraction: float
    ) -> TrialResult:
        if self._trial_limit()[0] is None and not self.worker_process:
            return _evaluate(
                self.model_factory,
                self.model_name,
                config,
                self.random_state,
                self.X,
                self.y,
                self.fold_ids,
                folds,
                train_fraction,
            )
        with self._lock:
            return self._evaluate_in_worker_process(config, folds, train_fraction)

    def _trial_limit(self) -> tuple[float | None, str]:
        """This evaluation's limit in seconds (None: none) and what a cut says."""
        return trial_limit(
            self.time_limit, self.time_budget, first=not self.evaluations
        )

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

    def _evaluate_in_worker_process(
        self, config: dict[str, Any], folds: Sequence[int] | None, train_fraction: float
    ) -> TrialResult:
        cut = cut_before_start(
            self.time_limit, self.time_budget, first=not self.evaluations
        )
        if cut is not None:
            return cut
        start = time.perf_counter()
        try:
            executor = self._ready_worker()
        except Exception as error:  # noqa: BLE001 - e.g. data that cannot be sent
            self._kill_worker()
            return TrialResult(
                None,
                time.perf_counter() - start,
                f"{type(error).__name__}: the worker process could not start: "
                f"{error}{_DAEMON_HINT if multiprocessing.current_process().daemon else ''}",
                never_ran=True,
            )
        except BaseException:  # KeyboardInterrupt: no half-started worker left behind
            self._kill_worker()
            raise
        start = time.perf_counter()
        limit, cut_by = self._trial_limit()
        try:
            future = executor.submit(
                _evaluate_in_worker,
                self.model_factory,
                self.model_name,
                dict(config),
                self.random_state,
                None if folds is None else list(folds),
                train_fraction,
            )
            return future.result(timeout=limit)
        except FutureTimeoutError:
            self._kill_worker()
            return TrialResult(
                None, time.perf_counter() - start, f"TimeoutError: fit {cut_by}"
            )
        except Exception as error:  # noqa: BLE001 - a dead worker, an unpicklable config
            if isinstance(error, BrokenProcessPool):
                self._kill_worker()
            return TrialResult(
                None, time.perf_counter() - start, f"{type(error).__name__}: {error}"
            )
        except BaseException:  # KeyboardInterrupt: do not leave the fit running
            self._kill_worker()
            raise

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
        loaded = executor.submit(
            _load_worker_data, self.X, self.y, self.fold_ids, self.model_factory
        )
        if not loaded.result():
            raise RuntimeError("the worker did not receive its data")
        return executor

    def _kill_worker(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, kill_workers=True)
