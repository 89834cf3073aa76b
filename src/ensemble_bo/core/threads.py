"""OpenMP and BLAS threads of the processes that train trials: each its share.

Histogram gradient boosting (OpenMP) and BLAS start one thread per core in
every process that uses them: n trial workers on c cores would start n x c
threads, whose spinning waits slow every fit many times over. Each trial
worker is limited to its share of the cores, max(1, c // n) threads, and to
one thread per CELLS_PER_THREAD cells of the searched data, so a search with
one worker keeps every core where its data is large enough to use them. Cores
are those this process may run on: loky's cpu_count, which counts the CPU
affinity (`taskset`), a cgroup's CPU quota (containers) and
LOKY_MAX_CPU_COUNT, so two searches started with disjoint affinities, or
each with LOKY_MAX_CPU_COUNT set to its part, divide the machine between
them. A user's OMP_NUM_THREADS is the threads of every worker, as of every
OpenMP program (one process each): the user's word.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from joblib.externals.loky import cpu_count
from threadpoolctl import threadpool_limits

# Set by a user (or by joblib in its workers) for every OpenMP program: where
# set, every worker gets the threads it gives.
USER_THREADS_VARIABLE = "OMP_NUM_THREADS"
# Caps the cores loky's cpu_count counts, so the cores a search divides.
CORES_VARIABLE = "LOKY_MAX_CPU_COUNT"


def usable_cores() -> int:
    """The cores this process may use (affinity, cgroup quota, LOKY_MAX_CPU_COUNT)."""
    value = os.environ.get(CORES_VARIABLE)
    if value is not None:
        try:
            cores = int(value)
        except ValueError:
            cores = 0
        if cores < 1:
            raise ValueError(
                f"{CORES_VARIABLE}={value!r} must be a positive integer (the cores "
                f"a search may use): set it to e.g. 1, or unset it to use every "
                "core this process may run on"
            )
    return cpu_count()


# Cells (rows x features of the searched data) each further thread needs: on 2
# cores, histogram boosting fitted faster on one thread than on two in 8 of 9
# cases up to 64,000 cells (by up to 1.7x), and faster on two in 6 of 7 from
# 114,000 (benchmarks/hgb_threads.py). On small data OpenMP's thread start-up and
# barriers cost more than the work they share (scikit-learn issue 30662), the
# more so the more threads.
CELLS_PER_THREAD = 50_000


def trial_threads(n_workers: int, cells: int | None = None) -> int | None:
    """Threads each of `n_workers` trial workers may use: OMP_NUM_THREADS where
    set (None, left to the environment, where it is not one number, such as
    OpenMP's nested "4,2"), else the usable cores // n_workers, at most one per
    CELLS_PER_THREAD of `cells` (the searched data's rows x features; None:
    no cap), at least 1.

    The user's number is set explicitly, not only inherited: a worker started
    before it was set, then passed to a later search, follows it too.
    """
    user = _user_setting()
    if user:
        return _user_threads(user)
    share = usable_cores() // n_workers
    if cells is not None:
        share = min(share, cells // CELLS_PER_THREAD)
    return max(1, share)


def data_cells(X: Any) -> int:
    """Rows x features of `X` (an array, a data frame or a sparse matrix)."""
    shape = np.shape(X)
    return int(np.prod(shape)) if len(shape) > 1 else len(X)


def _user_setting() -> str:
    return os.environ.get(USER_THREADS_VARIABLE, "").strip()


def _user_threads(user: str) -> int | None:
    """The user's OMP_NUM_THREADS as one positive number; None where it is not."""
    return int(user) if user.isdigit() and int(user) > 0 else None


# The limits this process set last, undone before others are set: a worker
# passes from search to search (core.workers), each with its own share.
_limits: threadpool_limits | None = None
_threads: int | None = None


def model_threads() -> int | None:
    """Threads a learner with a thread pool of its own (CatBoost's) or an
    OpenMP runtime loaded after the limits were set (LightGBM's) should take:
    this process's limit (limit_threads), else the user's OMP_NUM_THREADS
    number, else None (every core)."""
    return _threads if _threads is not None else _user_threads(_user_setting())


def limit_threads(threads: int | None) -> None:
    """Limit this process's OpenMP and BLAS thread pools to `threads` each, until
    the next call; None: back to what they were."""
    global _limits, _threads  # noqa: PLW0603 - one set of limits per process
    if _limits is not None:
        _limits.restore_original_limits()
        _limits = None
    _threads = threads
    if threads is None:
        return
    # threadpoolctl limits the libraries loaded so far: load scikit-learn's
    # OpenMP runtime now, not at the first fit of histogram boosting.
    import sklearn.utils._openmp_helpers  # noqa: F401, PLC0415

    _limits = threadpool_limits(limits=threads)
