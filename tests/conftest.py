"""Settings for the whole suite."""

import os
import shutil
from pathlib import Path

# One OpenMP thread per process: the suite runs on two workers (pytest -n 2), and
# histogram boosting's threads would contend with the other worker's process
# (ten times slower on two cores). Set before anything loads OpenMP, and
# inherited by the evaluation workers and the `kedro run` subprocesses; the
# predictions do not depend on it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The tests' temporary folders (tmp_path: their projects, MLflow stores and
# search journals) in memory where there is room for them (~0.3 GB a suite):
# SQLite syncs every commit and the journal every trial to disk, and on a VM's
# disk a fresh MLflow store took 5.8 s instead of 1.2 s, 100 logged metrics 2 s
# instead of 0.2 s. Read by pytest when it makes its base folder; a root set in
# the environment is kept.
SHM = Path("/dev/shm")
if (
    "PYTEST_DEBUG_TEMPROOT" not in os.environ
    and SHM.is_dir()
    and os.access(SHM, os.W_OK)
    and shutil.disk_usage(SHM).free > 4 * 2**30
):
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(SHM)


def pytest_collection_modifyitems(items):
    # Files with slow end-to-end tests first: pytest-xdist hands out whole files
    # (make test: --dist loadfile), and a long file handed out last keeps one
    # worker busy while the other has nothing left to do.
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
