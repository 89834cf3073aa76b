"""Settings for the whole suite."""

import os

# One OpenMP thread per process: the suite runs on two workers (pytest -n 2), and
# histogram boosting's threads would contend with the other worker's process
# (ten times slower on two cores). Set before anything loads OpenMP, and
# inherited by the evaluation workers and the `kedro run` subprocesses; the
# predictions do not depend on it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(items):
    # Files with slow end-to-end tests first: pytest-xdist hands out whole files
    # (make test: --dist loadfile), and a long file handed out last keeps one
    # worker busy while the other has nothing left to do.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
