"""A team's server: `kedro run`, `ensemble-bo rerun` and `make scheduled`
against a real `mlflow server` with proxied artifacts.

The run is recorded on the server, its artifacts land in the server's
`--artifacts-destination` (nothing in the project), and its logged model loads
back through `runs:/` and predicts as the model the run pickled. The run is
rerun from its commit and reproduced; `make scheduled` run twice verifies its
first run the second time. The server is stopped by PID, with every process
it started (the fixture checks). A server that is down is covered by
tests/test_tracking_store.py.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import mlflow
import numpy as np
import pytest
from mlflow.models import Model
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from tests.mlflow_server import MlflowServer, mlflow_server  # noqa: F401 - fixture
from tests.support import git_project, kedro, kedro_env

pytestmark = pytest.mark.slow

# As small as tests/test_tracking_store.py's runs.
TINY = (
    "budget=3,ensemble.size=2,segor.optimizer.n_initial=3,segor.optimizer.gp_restarts=1"
)
MODEL = "segor_model"  # conf/base/mlflow.yml: "*_model" is logged as a model
SCHEDULE = "conf/scheduled/tiny.yml"
SCHEDULE_TEXT = """
jobs:
  tiny_segor:
    pipeline: segor
    params: {budget: 3, ensemble: {size: 2}, segor: {optimizer: {n_initial: 3}}}
"""


class ServedRun(NamedTuple):
    server: MlflowServer
    project: Path
    run_id: str
    stdout: str  # the run's console output: its summary


@pytest.fixture(scope="module")
def served_run(mlflow_server, tmp_path_factory) -> ServedRun:  # noqa: F811
    """One `kedro run --pipelines=segor` in a project repository, tracked on the server."""
    project = git_project(
        tmp_path_factory.mktemp("served") / "project",
        ("concrete",),
        files={SCHEDULE: SCHEDULE_TEXT},
    )
    completed = kedro(
        project,
        "run",
        "--pipelines=segor",
        "--params",
        TINY,
        tracking_uri=mlflow_server.uri,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    client = MlflowClient(mlflow_server.uri)
    experiment = client.get_experiment_by_name("ensemble_bo")
    (run,) = client.search_runs([experiment.experiment_id])
    return ServedRun(mlflow_server, project, run.info.run_id, completed.stdout)


def files_under(folder: Path) -> set[str]:
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file()
    }


def test_the_run_is_finished_on_the_server_and_its_artifacts_went_through_it(
    served_run,
):
    server, project, run_id, stdout = served_run
    client = MlflowClient(server.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["kedro.pipeline"] == "segor"
    assert "test_mse_ensemble" in run.data.metrics
    # the summary links to the run on the server itself
    link = f"{server.uri}/#/experiments/{run.info.experiment_id}/runs/{run_id}"
    assert f"Open {link}" in stdout
    # the server's proxy: mlflow-artifacts:/<experiment id>/<run id>/artifacts
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/")
    stored = server.artifacts / run.info.experiment_id / run_id / "artifacts"
    assert {
        "tables/segor_trial_history.csv",
        "plots/segor_convergence_plot.png",
        "pools/segor_search_result.pkl",
    } <= files_under(stored)
    # MLflow 3 keeps the logged model beside the runs, under models/
    (model,) = (server.artifacts / run.info.experiment_id).glob(
        "models/*/artifacts/MLmodel"
    )
    assert run_id in model.read_text()
    # nothing was written beside a local store: not in the project, not here
    for folder in (project, server.root, Path.cwd()):
        for name in ("mlruns", "mlartifacts"):
            assert not list(folder.glob(f"{name}/{run_id}")), folder / name
            assert not list(folder.glob(f"{name}/*/{run_id}")), folder / name
    assert not (project / "mlruns").exists() and not (project / "mlartifacts").exists()
    assert not (project / "mlflow.db").exists()
    assert sorted(path.name for path in server.root.iterdir()) == [
        "artifacts",
        "mlflow.db",
        "server.log",
    ]


def test_the_logged_model_loads_through_runs_and_predicts_as_the_pickled_one(
    served_run, tmp_path
):
    server, project, run_id, _ = served_run
    with _use_tracking_uri(server.uri):
        loaded = mlflow.sklearn.load_model(f"runs:/{run_id}/{MODEL}")
        local = mlflow.artifacts.download_artifacts(
            f"runs:/{run_id}/{MODEL}", dst_path=str(tmp_path)
        )
    example = Model.load(local).load_input_example(local)
    assert len(example) == 5
    (pickled_path,) = [
        path
        for path in project.glob(f"data/06_models/**/{MODEL}.pkl")
        if path.is_file()
    ]
    with pickled_path.open("rb") as file:
        pickled = pickle.load(file)  # noqa: S301 - written by this test's run
    np.testing.assert_array_equal(loaded.predict(example), pickled.predict(example))


def test_ensemble_bo_rerun_reproduces_the_run_on_the_server(served_run):
    server, project, run_id, _ = served_run
    completed = subprocess.run(
        [sys.executable, "-m", "ensemble_bo", "rerun", run_id],
        cwd=project,
        env=kedro_env(server.uri),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, (
        completed.stdout[-3000:] + completed.stderr[-3000:]
    )
    assert f"Rerunning {run_id} from {server.uri}" in completed.stdout
    assert "Reproduced" in completed.stdout
    client = MlflowClient(server.uri)
    (rerun,) = client.search_runs(
        [client.get_run(run_id).info.experiment_id],
        filter_string=f"tags.rerun_of = '{run_id}'",
    )
    assert rerun.info.status == "FINISHED"
    assert rerun.info.artifact_uri.startswith("mlflow-artifacts:/")


def make_scheduled(server, project):
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            f"VENV={sys.prefix}",
            "-o",
            f"{sys.prefix}/.installed",
            "scheduled",
            f"ARGS=--schedule {SCHEDULE}",
        ],
        cwd=project,
        env=kedro_env(server.uri),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_make_scheduled_twice_verifies_the_first_scheduled_run(served_run):
    server, project, _, _ = served_run
    first = make_scheduled(server, project)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "== job tiny_segor: no earlier scheduled run to verify" in first.stdout
    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name("ensemble_bo").experiment_id
    (scheduled,) = client.search_runs(
        [experiment], filter_string="tags.`scheduled.job` = 'tiny_segor'"
    )
    second = make_scheduled(server, project)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"rerunning the previous run {scheduled.info.run_id}" in second.stdout
    assert f"(rerun of {scheduled.info.run_id}) has the same" in second.stdout
    runs = client.search_runs(
        [experiment], filter_string="tags.`scheduled.job` = 'tiny_segor'"
    )
    assert len(runs) == 2 and {run.info.status for run in runs} == {"FINISHED"}
    (rerun,) = client.search_runs(
        [experiment], filter_string=f"tags.rerun_of = '{scheduled.info.run_id}'"
    )
    assert (
        rerun.data.metrics["test_mse_ensemble"]
        == (scheduled.data.metrics["test_mse_ensemble"])
    )
