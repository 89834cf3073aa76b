"""Settings for the whole suite."""

import os

# One OpenMP thread per process: the suite runs on two workers (pytest -n 2), and
# histogram boosting's threads would contend with the other worker's process
# (ten times slower on two cores). Set before anything loads OpenMP, and
# inherited by the evaluation workers and the `kedro run` subprocesses; the
# predictions do not depend on it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
