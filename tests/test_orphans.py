"""Nothing is left behind by a dead run.

Worker processes exit when the process that started them dies, even by
SIGKILL; a run whose process is gone is marked KILLED when the store is next
opened on the same host.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from ensemble_bo.tracking.liveness import (
    HOST_TAG,
    KILLED_TAG,
    PID_TAG,
    START_TAG,
    mark_dead_runs_killed,
    process_is_gone,
    process_tags,
)
from ensemble_bo.tracking.store import open_experiment
from tests.support import (
    CHEAP_SEGOR,
    KEDRO,
    command_line,
    copy_project,
    descendants,
    is_running,
    kedro,
    kedro_env,
    kill_group,
    wait_until,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads process trees from /proc"
)

# A parent that starts a worker (which starts a process of its own), then waits.
_PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(__import__("os").getpid())])
time.sleep(600)
"""
_WORKER = """
import subprocess, sys, time
from ensemble_bo.core.workers import exit_when_parent_dies
exit_when_parent_dies(int(sys.argv[1]), poll_seconds=0.1)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
time.sleep(600)
"""


def test_a_worker_and_its_children_exit_when_its_parent_is_killed():
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, _WORKER], start_new_session=True
    )
    try:
        # the worker, and the process the worker started
        assert wait_until(lambda: len(descendants(parent.pid)) == 2, timeout=60)
        below = descendants(parent.pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_until(
            lambda: not any(is_running(pid, t) for pid, t in below.items()), timeout=5
        ), {pid: command_line(pid) for pid in below}
    finally:
        kill_group(parent)


def test_only_runs_whose_process_is_gone_are_marked_killed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = open_experiment(uri, "ensemble_bo")
    client = MlflowClient(uri)
    finished = subprocess.Popen(["true"])  # a PID whose process has ended
    finished.wait()
    here, alive = socket.gethostname(), process_tags()
    cases = {
        "gone": {HOST_TAG: here, PID_TAG: str(finished.pid), START_TAG: "1"},
        # this PID, but a process that started at another time: the PID was reused
        "pid reused": {**alive, START_TAG: "1"},
        "alive": alive,
        "other host": {HOST_TAG: "elsewhere", PID_TAG: str(finished.pid)},
        "no process tags": {},
    }
    runs = {
        name: client.create_run(experiment, tags=tags, run_name=name).info.run_id
        for name, tags in cases.items()
    }
    finished_run = client.create_run(experiment, tags=cases["gone"]).info.run_id
    client.set_terminated(finished_run, "FINISHED")

    killed = mark_dead_runs_killed(client, experiment)

    assert sorted(killed) == sorted([runs["gone"], runs["pid reused"]])
    status = {name: client.get_run(run).info.status for name, run in runs.items()}
    assert status == {
        "gone": "KILLED",
        "pid reused": "KILLED",
        "alive": "RUNNING",
        "other host": "RUNNING",
        "no process tags": "RUNNING",
    }
    reason = client.get_run(runs["gone"]).data.tags[KILLED_TAG]
    assert f"process {finished.pid} on {here}" in reason
    assert client.get_run(finished_run).info.status == "FINISHED"
    assert not process_is_gone(alive)


@pytest.mark.slow
def test_a_killed_kedro_run_leaves_no_process_and_is_marked_killed(tmp_path):
    project = copy_project(tmp_path / "project")
    (tmp_path / "store").mkdir()
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    open_experiment(
        uri, "ensemble_bo"
    )  # the store exists before kedro and this test read it
    # Every trial runs in the time-limit worker; the budget keeps the search going.
    params = (
        f"budget=5000,segor.time_limit=600,segor.optimizer.n_initial=5,{CHEAP_SEGOR}"
    )
    with open(tmp_path / "kedro.log", "wb") as log:
        run = subprocess.Popen(
            [*KEDRO, "run", "--pipelines=segor", "--params", params],
            cwd=project,
            env=kedro_env(uri),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    client = MlflowClient(uri)

    def trials_done() -> int:
        """Trials evaluated so far, all of them in the worker."""
        try:
            (running,) = client.search_runs(
                [client.get_experiment_by_name("ensemble_bo").experiment_id]
            )
            return len(client.get_metric_history(running.info.run_id, "fit_seconds"))
        except Exception:  # noqa: BLE001 - the store or the run is not there yet
            return 0

    try:
        # A worker runs trials (its watch over the parent runs from its start-up on).
        assert wait_until(lambda: trials_done() >= 3, timeout=240, interval=0.5), (
            tmp_path / "kedro.log"
        ).read_text()[-3000:]
        below = descendants(run.pid)
        assert any("popen_loky_posix" in command_line(pid) for pid in below), below
        run.send_signal(signal.SIGKILL)
        run.wait()
        gone = wait_until(
            lambda: not any(is_running(pid, t) for pid, t in below.items()),
            timeout=10,
            interval=0.1,
        )
        assert gone, {
            pid: command_line(pid) for pid, t in below.items() if is_running(pid, t)
        }
    finally:
        kill_group(run)

    experiment = client.get_experiment_by_name("ensemble_bo").experiment_id
    (dead,) = client.search_runs([experiment])
    assert dead.info.status == "RUNNING"
    assert dead.data.tags[PID_TAG] == str(run.pid)

    # the next kedro command on this store ends it
    completed = kedro(project, "run", "--pipelines=data_processing", tracking_uri=uri)
    assert completed.returncode == 0, completed.stderr[-3000:]
    after = client.get_run(dead.info.run_id)
    assert after.info.status == "KILLED"
    assert f"process {run.pid} on {socket.gethostname()}" in after.data.tags[KILLED_TAG]
