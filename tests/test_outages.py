"""End to end: a `kedro run` whose real `mlflow server` dies mid-run, and runs
stopped by Ctrl-C.

The server is killed (SIGKILL to its process group) once the run has logged
two iterations, with the run paused (SIGSTOP) around the kill and the restart
so that each happens mid-search whatever the machine's speed. A server back
mid-run gets everything the run logged while it was away, in order; one gone
for good leaves a run that ends with a message naming its buffer and the
command that uploads it, and that command works once the server is back.
Ctrl-C (SIGINT to the run's process group) stops a run within seconds during
an outage, and a benchmark run, whose node hears Ctrl-C directly, ends KILLED.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.mlflow_server import MlflowServer
from tests.support import (
    CHEAP_SEGOR,
    ENSEMBLE_BO,
    KEDRO,
    copy_project,
    default_ctrl_c,
    kedro,
    kedro_env,
    kill_group,
    parent_ctrl_c_state,
    wait_until,
)
from tests.test_benchmark_run import kedro_command, make_project, stored_cells

pytestmark = pytest.mark.slow

BUDGET = 12
TINY = "ensemble.size=3,segor.optimizer.n_initial=3,segor.optimizer.gp_restarts=1"
BUFFERS = Path("data") / "07_model_output" / "mlflow_buffer"
UPLOAD = re.compile(r"ensemble-bo upload-run (\S+)")


class ServedRun:
    """`kedro run --pipelines=segor` in its own process group, tracked on `server`."""

    def __init__(self, project: Path, server: MlflowServer, budget: int) -> None:
        self.project = project
        self.server = server
        self.client = MlflowClient(server.uri)
        self.process = subprocess.Popen(
            [*KEDRO, "run", "--pipelines=segor", "--params"]
            + [f"budget={budget},{TINY},{CHEAP_SEGOR}"],
            cwd=project,
            env=kedro_env(server.uri),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=default_ctrl_c,  # noqa: PLW1509 - resets a signal, no locks
        )

    def run(self):
        experiment = self.client.get_experiment_by_name("ensemble_bo")
        (run,) = self.client.search_runs([experiment.experiment_id])
        return run

    def steps(self) -> list[int]:
        history = self.client.get_metric_history(
            self.run().info.run_id, "cv_loss_ensemble"
        )
        return sorted(metric.step for metric in history)

    def logged_steps(self) -> int:
        try:
            return len(self.steps())
        except Exception:  # noqa: BLE001 - no run (or no server) yet
            return 0

    def signal(self, number: int) -> None:
        os.killpg(self.process.pid, number)

    def kill_server_after(self, steps: int) -> None:
        """Once `steps` iterations are on the server, kill it under the paused run."""
        assert wait_until(lambda: self.logged_steps() >= steps, 300, 0.05), (
            self.server.output()
        )
        self.signal(signal.SIGSTOP)
        os.killpg(self.server.pid, signal.SIGKILL)
        self.server.stop()
        self.signal(signal.SIGCONT)

    def wait_for_buffer(self) -> None:
        assert wait_until(lambda: (self.project / BUFFERS).is_dir(), 120, 0.05)

    def finish(self, timeout: float = 300) -> str:
        try:
            output, _ = self.process.communicate(timeout=timeout)
        finally:
            kill_group(self.process)
        return output


def upload(project: Path, output: str) -> subprocess.CompletedProcess:
    """The upload command the run's output names, run in the project."""
    (folder,) = UPLOAD.findall(output)
    assert (project / folder).is_dir()
    return kedro(
        project,
        "upload-run",
        folder,
        tracking_uri=None,
        timeout=300,
        command=ENSEMBLE_BO,
    )


def assert_all_logged(served: ServedRun) -> None:
    run = served.run()
    # no step missing, none twice but the last: logged again with the
    # ensemble the bagged weighting ships
    assert served.steps() == [*range(BUDGET), BUDGET - 1]
    assert {"test_mse_ensemble", "trials", "search_seconds"} <= set(run.data.metrics)
    tables = {a.path for a in served.client.list_artifacts(run.info.run_id, "tables")}
    assert "tables/segor_trial_history.csv" in tables
    models = served.client.search_logged_models([run.info.experiment_id])
    assert [model.name for model in models] == ["segor_model"]


def test_a_run_outlives_its_server_and_uploads_what_it_missed_when_it_is_back(
    tmp_path,
):
    with MlflowServer(tmp_path / "server") as server:
        served = ServedRun(copy_project(tmp_path / "project"), server, BUDGET)
        served.kill_server_after(2)
        served.wait_for_buffer()
        served.signal(signal.SIGSTOP)
        server.restart()
        back = time.monotonic()
        served.signal(signal.SIGCONT)
        output = served.finish()
        assert served.process.returncode == 0, output[-3000:]
        assert time.monotonic() - back < 120
        assert "Traceback" not in output and "Retrying" not in output
        assert "does not answer ([Errno 111] Connection refused)" in output
        assert "answers again" in output
        assert served.run().info.status == "FINISHED"
        assert_all_logged(served)
        assert not (served.project / BUFFERS).exists() or not any(
            (served.project / BUFFERS).iterdir()
        )


def test_a_run_whose_server_stays_away_ends_saying_how_to_upload_it(tmp_path):
    with MlflowServer(tmp_path / "server") as server:
        served = ServedRun(copy_project(tmp_path / "project"), server, BUDGET)
        served.kill_server_after(2)
        away = time.monotonic()
        output = served.finish()
        assert served.process.returncode == 0, output[-3000:]
        assert time.monotonic() - away < 120
        assert "Traceback" not in output
        assert "did not answer" in output and "(finished) is kept in" in output
        server.restart()
        uploaded = upload(served.project, output)
        assert uploaded.returncode == 0, uploaded.stderr[-3000:]
        assert "(finished)" in uploaded.stdout
        assert served.run().info.status == "FINISHED"
        assert_all_logged(served)
        assert not any((served.project / BUFFERS).iterdir())


def test_ctrl_c_stops_a_run_within_seconds_while_its_server_is_away(tmp_path):
    with MlflowServer(tmp_path / "server") as server:
        served = ServedRun(copy_project(tmp_path / "project"), server, 500)
        served.kill_server_after(2)
        served.wait_for_buffer()
        pressed = time.monotonic()
        served.signal(signal.SIGINT)
        output = served.finish(timeout=60)
        assert time.monotonic() - pressed < 15
        assert served.process.returncode == 130, (
            f"{parent_ctrl_c_state()}\n{output[-3000:]}"
        )
        assert "Interrupted: search stopped after" in output
        assert "Traceback" not in output and "(killed) is kept in" in output
        server.restart()
        uploaded = upload(served.project, output)
        assert uploaded.returncode == 0, uploaded.stderr[-3000:]
        run = served.run()
        assert run.info.status == "KILLED"
        assert f"stopped search are saved in MLflow run {run.info.run_id}," in output
        steps = served.steps()
        assert steps == list(range(len(steps))) and len(steps) >= 2
        partial = served.client.list_artifacts(run.info.run_id, "partial")
        assert "partial/partial_trial_history.csv" in {a.path for a in partial}


def test_ctrl_c_ends_a_benchmark_run_killed(tmp_path):
    project = make_project(tmp_path)
    process = subprocess.Popen(
        **kedro_command(project),
        start_new_session=True,
        preexec_fn=default_ctrl_c,  # noqa: PLW1509 - resets a signal, no locks
    )
    try:
        assert wait_until(lambda: stored_cells(project), 240, 0.05)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        kill_group(process)
    assert process.returncode == 130 and stderr.endswith("Interrupted.\n"), (
        f"{parent_ctrl_c_state()}\n{stderr}"
    )
    client = MlflowClient(f"sqlite:///{project / 'store' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("ensemble_bo")
    (parent,) = client.search_runs(
        [experiment.experiment_id], "tags.`kedro.pipeline` = 'benchmark'"
    )
    assert parent.info.status == "KILLED"
