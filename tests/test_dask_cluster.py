"""End to end on Dask: a real `dask scheduler` with two `dask worker` processes on
127.0.0.1 (searches and benchmark cells against its address, a worker killed
mid-search), and a `kedro run` that starts its own LocalCluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.benchmarking.store import CellFolder
from ensemble_bo.core.dask_runner import DaskRunner
from ensemble_bo.core.journal import JournalFolder
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.optimizer import GPEIOptimizer
from ensemble_bo.pipelines.benchmark.nodes import run_benchmark
from tests.core.test_parallel import DATA, parallel_settings
from tests.core.test_strategies import SPACE
from tests.mlflow_server import free_port
from tests.pipelines.test_benchmark import CONF, PARAMETERS
from tests.support import (
    CHEAP_SEGOR,
    copy_project,
    cross_validation_evaluator,
    kill_group,
    segor_search,
    wait_until,
)

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[1]
DASK = str(Path(sys.executable).with_name("dask"))


def evaluations_on(client) -> int:
    """How many trial evaluations the scheduler has run to the end, ever."""

    def count(dask_scheduler):
        # the key prefix of the trials' task, evaluation.evaluate_configuration
        prefix = dask_scheduler.task_prefixes.get("evaluate_configuration")
        return 0 if prefix is None else prefix.state_counts["memory"]

    return client.run_on_scheduler(count)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`dask scheduler` and two `dask worker`s, each in its own process group.

    The workers import this project's test modules (PYTHONPATH) and may start
    processes (a benchmark cell's time-limit worker), as the README says.
    """
    from distributed import Client  # noqa: PLC0415

    logs = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT),
        "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
    }
    commands = [
        [DASK, "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
         "--no-dashboard"],
        *(
            [DASK, "worker", address, "--nthreads", "1", "--no-dashboard",
             "--name", f"worker-{i}"]
            for i in range(2)
        ),
    ]  # fmt: skip
    processes = []
    try:
        for i, command in enumerate(commands):
            with open(logs / f"{i}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        command,
                        env=env,
                        cwd=PROJECT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            yield address, client
    finally:
        for process in processes:
            kill_group(process)
    for process in processes:  # stopped by PID, whole groups: nothing left running
        assert process.poll() is not None


def test_a_search_runs_its_trials_on_the_scheduler_it_is_pointed_at(cluster):
    address, client = cluster
    before = evaluations_on(client)
    block = {"backend": "dask", "n_workers": None, "address": address, "mode": "sync"}
    result = run_method("segor", DATA, parallel_settings(block, budget=8), 5)
    assert len(result.pool) == 8 and result.pool.ok.all()
    # n_workers null: a batch per the cluster's 2 threads; every trial on the cluster
    assert evaluations_on(client) - before == 8
    local = {"backend": "local", "n_workers": 2, "mode": "sync"}
    in_process = run_method("segor", DATA, parallel_settings(local, budget=8), 5)
    assert result.pool.configs == in_process.pool.configs
    assert result.members == in_process.members


class SlowTree(RegressorMixin, BaseEstimator):
    """A decision tree whose fit first sleeps (the CPU idle), for a trial that lasts."""

    def __init__(self, a=0.5, b=0.5, seconds=0.2):
        self.a, self.b, self.seconds = a, b, seconds

    def fit(self, X, y):
        time.sleep(self.seconds)
        self.tree_ = DecisionTreeRegressor(
            max_depth=1 + int(5 * self.a), min_samples_leaf=1 + int(10 * self.b)
        ).fit(X, y)
        return self

    def predict(self, X):
        return self.tree_.predict(X)


def slow_tree(model_name, config, random_state):
    return SlowTree(**config)


def test_a_worker_killed_mid_search_costs_a_retry_not_the_search(cluster):
    address, client = cluster
    evaluator = cross_validation_evaluator(
        "slow_tree", DATA.features, DATA.target, DATA.fold_ids, model_factory=slow_tree
    )
    search = segor_search(
        GPEIOptimizer(SPACE, seed=0, n_initial=4, gp_restarts=1),
        evaluator,
        DATA.target,
        DATA.fold_ids,
        ensemble_size=3,
    )
    killed = []

    def kill_a_busy_worker():
        # once a few trials have ended, SIGKILL a worker that is training one
        if not wait_until(lambda: len(search_records) >= 3, timeout=120):
            return
        processing = {}
        wait_until(
            lambda: processing.update(
                {w: k for w, k in client.processing().items() if k}
            )
            or processing,
            timeout=30,
            interval=0.01,
        )
        pids = client.run(os.getpid)
        worker = next(iter(processing))
        os.kill(pids[worker], signal.SIGKILL)
        killed.append(worker)

    search_records = []
    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    runner = DaskRunner(client, evaluator, 2)
    try:
        result = search.run(10, [search_records.append], runner=runner, mode="async")
    finally:
        runner.close()
        killer.join()
    assert killed, "no worker was busy to kill"
    # every trial is in the pool: the killed one was retried on a live worker
    assert len(result.pool) == 10
    assert result.pool.ok.all(), result.pool.errors
    client.wait_for_workers(2, timeout=120)  # its nanny started a new one


def test_benchmark_cells_run_on_the_cluster_and_equal_local_cells(cluster, tmp_path):
    address, _ = cluster
    raw = {"diabetes": lambda: pd.read_csv(PROJECT / "data/01_raw/diabetes.csv")}
    smbo = {
        **CONF["smbo"],
        # a limit: each cell's search keeps its time-limit worker process
        "time_limit": 60,
        "optimizer": {**CONF["smbo"]["optimizer"], "n_initial": 3},
    }
    benchmark = {
        "datasets": ["diabetes"],
        "models": {"regression": ["decision_tree_regressor"]},
        "methods": ["smbo"],
        "repetitions": 2,
        "budget": 4,
        "seed": 3,
        "n_jobs": 1,
    }

    def run(where, parallel):
        store = CellFolder(tmp_path / where / "cells")
        return run_benchmark(
            raw,
            store,
            JournalFolder(tmp_path / where / "journals"),
            benchmark,
            CONF["data_processing"],
            **{**PARAMETERS, "smbo": smbo, "parallel": parallel},
        )

    on_dask = run(
        "dask",
        {"backend": "dask", "n_workers": None, "address": address, "mode": "sync"},
    )
    local = run("local", PARAMETERS["parallel"])
    assert [r["status"] for r in on_dask] == ["ok", "ok"], on_dask
    for remote, here in zip(on_dask, local, strict=True):
        assert remote["key"] == here["key"]
        assert remote["test_loss"] == here["test_loss"]
        assert remote["cv_loss_curve"] == here["cv_loss_curve"]


def test_kedro_run_segor_on_a_local_cluster_of_two_workers(tmp_path):
    project = copy_project(tmp_path / "project")
    store = f"sqlite:///{project / 'mlflow.db'}"
    params = (
        f"{CHEAP_SEGOR},budget=8,ensemble.size=3,segor.optimizer.n_initial=4,"
        "segor.optimizer.gp_restarts=1,parallel.backend=dask,parallel.n_workers=2"
    )
    completed = subprocess.run(
        [sys.executable, "-m", "kedro", "run", "--pipelines=segor", "--params", params],
        cwd=project,
        env={**os.environ, "MLFLOW_TRACKING_URI": store, "DO_NOT_TRACK": "true"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    # as quiet as a serial run: Dask's start-up and shut-down lines stay out
    output = completed.stdout + completed.stderr
    assert "Start worker" not in output and "distributed." not in output, output
    from mlflow.tracking import MlflowClient  # noqa: PLC0415

    client = MlflowClient(store)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("ensemble_bo").experiment_id]
    )
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["parallel.backend"] == "dask" and params["parallel.n_workers"] == "2"
    history = client.get_metric_history(run.info.run_id, "cv_loss_ensemble")
    # 8 iterations, the last one again with the ensemble the bagged weighting ships
    assert sorted(m.step for m in history) == [*range(8), 7]
    assert np.isfinite(run.data.metrics["test_mse_ensemble"])
