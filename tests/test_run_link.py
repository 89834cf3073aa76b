"""A run's calls to MLflow while its server goes away and comes back, in process.

The "server" is a SQLite store whose requests fail, as a stopped server's do
(an error raised from `ConnectionRefusedError`), while the test says it is
down; tests/test_outages.py does the same with a real `mlflow server`, killed
and started again under a `kedro run`. Also: what counts as the server being
away, the upload of a buffer (whole, cut short and started again, of a run
whose process died) and the statuses a run ends with on an error and on Ctrl-C.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import requests
from click.testing import CliRunner
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sklearn.tree import DecisionTreeRegressor

import ensemble_bo.cli
from ensemble_bo import events
from ensemble_bo.cli import cli
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import EnsembleSearchResult, SearchInterrupted
from ensemble_bo.tracking import run_link
from ensemble_bo.tracking.artifacts import log_model
from ensemble_bo.tracking.benchmark_runs import log_benchmark_cell
from ensemble_bo.tracking.liveness import KILLED_TAG
from ensemble_bo.tracking.run_buffer import STATE_FILE, RunBuffer
from ensemble_bo.tracking.run_link import RunLink
from ensemble_bo.tracking.store import server_unreachable
from tests.support import start_hook_run
from tests.test_tracking import cell_record


class Server:
    """A SQLite store standing in for a tracking server that can go away."""

    def __init__(self, root: Path) -> None:
        self.uri = f"sqlite:///{root / 'server.db'}"
        self.client = MlflowClient(self.uri)
        self.experiment_id = self.client.create_experiment(
            "runs", artifact_location=(root / "server-artifacts").as_uri()
        )
        self.up = True

    def answering(self, action):
        """`action`, failing as a request to a stopped server does while it is down."""

        def call(*args, **kwargs):
            if not self.up and mlflow.get_tracking_uri() == self.uri:
                raise MlflowException(
                    "API request to /api/2.0/mlflow/runs/log-batch failed with "
                    "exception ... [Errno 111] Connection refused"
                ) from ConnectionRefusedError(111, "Connection refused")
            return action(*args, **kwargs)

        return call


@pytest.fixture
def server(tmp_path, monkeypatch):
    server = Server(tmp_path)
    mlflow.set_tracking_uri(server.uri)
    # the link asks "are you back?" at every call, and hears the test's answer
    monkeypatch.setattr(run_link, "PROBE_INTERVAL", 0.0)
    monkeypatch.setattr(RunLink, "_server_answers", lambda link: server.up)
    yield server
    while mlflow.active_run():
        mlflow.end_run()


def open_link(server: Server, buffer: Path) -> RunLink:
    link = RunLink(server.uri, buffer)
    link.start_run(experiment_id=server.experiment_id, run_name="segor-concrete-0")
    return link


def log_step(step: int) -> None:
    mlflow.log_metrics({"cv_loss_ensemble": 1.0 / (step + 1)}, step=step)


def fitted_tree() -> tuple[DecisionTreeRegressor, pd.DataFrame]:
    features = pd.DataFrame({"a": np.arange(20.0), "b": np.arange(20.0) % 3})
    return DecisionTreeRegressor(random_state=0).fit(features, features.a), features


def steps(server: Server, run_id: str) -> list[int]:
    history = server.client.get_metric_history(run_id, "cv_loss_ensemble")
    return sorted(metric.step for metric in history)


def test_a_run_buffers_while_its_server_is_away_and_uploads_when_it_is_back(
    server, tmp_path, caplog
):
    link = open_link(server, tmp_path / "buffer")
    run_id = link.run_id
    tree, features = fitted_tree()
    link.call(server.answering(log_step), 0)
    server.up = False
    link.call(server.answering(log_step), 1)
    link.call(server.answering(log_step), 2)
    link.call(server.answering(mlflow.log_text), "trial table", "tables/history.csv")
    link.call(server.answering(log_model), "segor_model", tree, features)
    link.call(server.answering(log_benchmark_cell), cell_record(), False)
    # kept on disk, in order, while the server is away
    assert (tmp_path / "buffer" / STATE_FILE).is_file()
    assert steps(server, run_id) == [0]
    assert "does not answer ([Errno 111] Connection refused)" in caplog.text
    server.up = True
    link.call(server.answering(log_step), 3)  # uploads first, then logs
    assert "answers again" in caplog.text
    ended = link.end("FINISHED")

    assert ended.buffer is None and not (tmp_path / "buffer").exists()
    run = server.client.get_run(run_id)
    assert run.info.status == "FINISHED" and mlflow.active_run() is None
    assert steps(server, run_id) == [0, 1, 2, 3]
    assert ended.metrics["cv_loss_ensemble"] == 0.25
    assert [a.path for a in server.client.list_artifacts(run_id, "tables")] == [
        "tables/history.csv"
    ]
    loaded = mlflow.sklearn.load_model(f"runs:/{run_id}/segor_model")
    np.testing.assert_array_equal(loaded.predict(features), tree.predict(features))
    (child,) = server.client.search_runs(
        [server.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'"
    )
    assert (
        child.info.status == "FINISHED" and child.data.params["method"] == "segor:f-m"
    )
    # the buffer's own tags (its run's name, user, parent) are not the run's
    assert run.data.tags.get("mlflow.parentRunId") is None


def test_a_run_that_ends_while_its_server_is_away_is_uploaded_by_the_command(
    server, tmp_path, monkeypatch
):
    link = open_link(server, tmp_path / "buffer")
    run_id = link.run_id
    link.call(server.answering(log_step), 0)
    server.up = False
    link.call(server.answering(log_step), 1)
    link.call(server.answering(mlflow.log_metrics), {"test_mse_ensemble": 0.147})
    ended = link.end("FINISHED")

    assert ended.buffer == tmp_path / "buffer" and mlflow.active_run() is None
    assert ended.metrics["test_mse_ensemble"] == 0.147
    message = link.kept_message(ended)
    assert message.startswith(f"The MLflow server {server.uri} did not answer")
    assert message.endswith(f"ensemble-bo upload-run {tmp_path / 'buffer'}")
    assert server.client.get_run(run_id).info.status == "RUNNING"
    assert steps(server, run_id) == [0]

    server.up = True
    monkeypatch.chdir(tmp_path)
    uploaded = CliRunner().invoke(cli, ["upload-run", "buffer"])
    assert uploaded.exit_code == 0, uploaded.output
    assert f"MLflow run {run_id} uploaded to {server.uri} (finished)" in uploaded.output
    run = server.client.get_run(run_id)
    assert run.info.status == "FINISHED" and steps(server, run_id) == [0, 1]
    assert run.data.metrics["test_mse_ensemble"] == 0.147
    assert not (tmp_path / "buffer").exists()


def test_an_upload_cut_short_goes_on_without_making_anything_twice(
    server, tmp_path, monkeypatch
):
    link = open_link(server, tmp_path / "buffer")
    run_id = link.run_id
    tree, features = fitted_tree()
    server.up = False
    link.call(server.answering(log_step), 0)
    link.call(server.answering(log_model), "segor_model", tree, features)
    link.call(server.answering(log_benchmark_cell), cell_record(), False)
    link.end("FAILED")
    # the server goes away again just after the model's files were uploaded
    upload_files = MlflowClient.log_model_artifacts

    def cut(client, *args, **kwargs):
        upload_files(client, *args, **kwargs)
        raise requests.exceptions.ConnectionError("connection reset")

    monkeypatch.setattr(MlflowClient, "log_model_artifacts", cut)
    with pytest.raises(requests.exceptions.ConnectionError):
        RunBuffer.open(tmp_path / "buffer").upload(server.client)
    monkeypatch.setattr(MlflowClient, "log_model_artifacts", upload_files)
    RunBuffer.open(tmp_path / "buffer").upload(server.client)
    RunBuffer.open(tmp_path / "buffer").upload(server.client)  # nothing left to do

    models = server.client.search_logged_models([server.experiment_id])
    assert [model.name for model in models] == ["segor_model"]
    children = server.client.search_runs(
        [server.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'"
    )
    assert len(children) == 1 and steps(server, run_id) == [0]
    assert server.client.get_run(run_id).info.status == "FAILED"


def test_a_step_the_server_took_as_it_went_away_is_uploaded_once(server, tmp_path):
    link = open_link(server, tmp_path / "buffer")
    run_id = link.run_id
    server.up = False
    link.call(server.answering(log_step), 0)  # no answer: buffered
    link.call(server.answering(log_step), 1)
    link.end("FAILED")
    # ...though step 0 had reached the server before it went away
    server.up = True
    server.client.log_metric(run_id, "cv_loss_ensemble", 1.0, step=0, timestamp=1)
    RunBuffer.open(tmp_path / "buffer").upload(server.client)
    assert steps(server, run_id) == [0, 1]


def buffer_a_step_then_die(server: Server, buffer: Path, connection) -> None:
    """A run's process that buffers a step, then dies without ending its run."""
    link = open_link(server, buffer)
    server.up = False
    link.call(server.answering(log_step), 0)
    connection.send(link.run_id)
    connection.recv()
    os._exit(0)  # as SIGKILL would: the run never ends


def test_upload_waits_for_a_live_run_and_ends_a_dead_ones_run_killed(
    server, tmp_path, monkeypatch
):
    here, there = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(
        target=buffer_a_step_then_die, args=(server, tmp_path / "buffer", there)
    )
    process.start()
    run_id = here.recv()
    monkeypatch.chdir(tmp_path)
    # its process goes on: it uploads the buffer itself
    refused = CliRunner().invoke(cli, ["upload-run", "buffer"])
    assert refused.exit_code == 1 and "is still going on" in refused.output
    here.send("die")
    process.join(timeout=60)
    uploaded = CliRunner().invoke(cli, ["upload-run", "buffer"])
    assert uploaded.exit_code == 0, uploaded.output
    assert f"MLflow run {run_id} uploaded to {server.uri} (killed)" in uploaded.output
    run = server.client.get_run(run_id)
    assert run.info.status == "KILLED" and KILLED_TAG in run.data.tags
    assert steps(server, run_id) == [0]


def test_upload_names_a_folder_that_is_no_buffer_and_a_server_that_is_down(tmp_path):
    (tmp_path / "other").mkdir()
    result = CliRunner().invoke(cli, ["upload-run", str(tmp_path / "other")])
    assert result.exit_code == 1
    assert "is not a run's buffer (it has no run.json)" in result.output
    run = mlflow.entities.Run(
        mlflow.entities.RunInfo(
            "r1", "1", "u", "RUNNING", 0, None, "active", run_name="x"
        ),
        mlflow.entities.RunData(),
    )
    RunBuffer.create(tmp_path / "buffer", "http://127.0.0.1:9", run).record_end(
        "FAILED"
    )
    result = CliRunner().invoke(cli, ["upload-run", str(tmp_path / "buffer")])
    assert result.exit_code == 1
    assert "the MLflow server http://127.0.0.1:9 cannot be reached" in result.output
    assert "Traceback" not in result.output and (tmp_path / "buffer").is_dir()
    elsewhere = f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"
    result = CliRunner().invoke(
        cli, ["upload-run", str(tmp_path / "buffer"), "--tracking-uri", elsewhere]
    )
    assert result.exit_code == 1
    assert f"to MLflow run r1 on {elsewhere} failed: Run with id=r1 not found" in (
        result.output
    )


def test_only_requests_without_an_answer_count_as_the_server_being_away():
    def raised_from(error, cause):
        try:
            raise cause
        except BaseException:
            try:
                raise error  # noqa: B904 - as MLflow raises it: context only
            except BaseException as raised:
                return raised

    away = [
        raised_from(MlflowException("API request failed"), ConnectionRefusedError()),
        raised_from(MlflowException("timed out"), requests.exceptions.ReadTimeout()),
        raised_from(MlflowException("5xx"), requests.exceptions.RetryError()),
        requests.exceptions.ConnectionError("reset"),
        # a server killed in the middle of its answer
        raised_from(
            MlflowException("API request failed"),
            requests.exceptions.ChunkedEncodingError("Connection broken"),
        ),
    ]
    answered = [
        MlflowException("INVALID_PARAMETER_VALUE: changing param values"),
        raised_from(MlflowException("no such file"), FileNotFoundError()),
        ValueError("bad"),
    ]
    assert [server_unreachable(error) for error in away] == [True] * 5
    assert [server_unreachable(error) for error in answered] == [False] * 3


def test_ctrl_c_during_a_write_to_a_sqlite_store_takes_effect_after_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    link = RunLink(uri, tmp_path / "buffers")
    link.start_run()
    written = []

    def log_while_ctrl_c_is_pressed():
        signal.raise_signal(signal.SIGINT)  # pressed mid-write
        mlflow.log_metric("trials", 3.0)
        written.append(True)

    # Python's own Ctrl-C handler, whatever the test runner installed
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            link.call(log_while_ctrl_c_is_pressed)
        assert written  # the write was not cut short...
        ended = link.end("KILLED")  # ...so the database is not left locked
    finally:
        signal.signal(signal.SIGINT, runner_handler)
        mlflow.end_run()
    assert ended.status == "KILLED"
    run = MlflowClient(uri).get_run(link.run_id)
    assert run.info.status == "KILLED" and run.data.metrics["trials"] == 3.0


def test_a_run_ends_failed_on_an_error_and_killed_on_ctrl_c(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    try:  # as the search raises it
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ctrl_c:
            partial = EnsembleSearchResult(Pool(3), [], np.empty(0))
            raise SearchInterrupted(partial, 10, ctrl_c) from ctrl_c
    except SearchInterrupted as raised:
        stopped = raised
    statuses = {}
    for name, error in (("error", ValueError("bad")), ("ctrl-c", stopped)):
        hook = start_hook_run(uri)
        run_id = mlflow.active_run().info.run_id
        hook.on_pipeline_error(error)
        statuses[name] = client.get_run(run_id).info.status
    assert statuses == {"error": "FAILED", "ctrl-c": "KILLED"}


def test_ctrl_c_where_kedro_calls_no_hook_ends_the_run_killed(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    started = []

    def kedro_run(**options):
        start_hook_run(uri)
        started.append(mlflow.active_run().info.run_id)
        raise KeyboardInterrupt  # e.g. in the benchmark's node, between its cells

    monkeypatch.setattr(
        ensemble_bo.cli, "kedro_run", type("Run", (), {"callback": kedro_run})
    )
    result = CliRunner().invoke(ensemble_bo.cli.run, ["--pipelines=segor"])
    assert (result.exit_code, result.stderr) == (130, "Interrupted.\n")
    assert MlflowClient(uri).get_run(started[0]).info.status == "KILLED"
    assert mlflow.active_run() is None and events._listeners == []
