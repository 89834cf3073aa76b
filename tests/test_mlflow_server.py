"""A team's server: `kedro run`, `ensemble-bo rerun` and `make scheduled`
against a real `mlflow server` with proxied artifacts.

The run is recorded on the server, its artifacts land in the server's
`--artifacts-destination` (nothing in the project), and its logged model loads
back through `runs:/` and predicts as the model the run pickled.
`ensemble-bo rerun` of it with changed predictions exits 1 with the table;
`make scheduled` runs its job and reruns that run (the job's previous run)
from its commit: reproduced. The server is stopped by PID, with every process
it started (the fixture checks). A server that is down is covered by
tests/test_tracking_store.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.models import Model
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from ensemble_bo.api import default_parameters
from ensemble_bo.core.preparation import split_dataset
from ensemble_bo.tracking.model_integrity import verify_model
from tests.mlflow_server import MlflowServer, mlflow_server  # noqa: F401 - fixture
from tests.support import CHEAP_MODEL, KEDRO, TINY_SEGOR, git_project, kedro_env

pytestmark = pytest.mark.slow

MODEL = "segor_model"  # conf/base/mlflow.yml: "*_model" is logged as a model
SCHEDULE = "conf/scheduled/tiny.yml"
SCHEDULE_TEXT = f"""
jobs:
  tiny_segor:
    pipeline: segor
    params:
      budget: 3
      ensemble: {{size: 2}}
      segor: {{model: {CHEAP_MODEL}, optimizer: {{n_initial: 3, gp_restarts: 1}}}}
"""


class ServedRun(NamedTuple):
    server: MlflowServer
    project: Path
    run_id: str
    stdout: str  # the run's console output: its summary


@pytest.fixture(scope="module")
def served_run(mlflow_server, tmp_path_factory) -> ServedRun:  # noqa: F811
    """One `kedro run --pipelines=segor` in a project repository, tracked on the
    server and tagged as the schedule's job `tiny_segor` would be."""
    project = git_project(
        tmp_path_factory.mktemp("served") / "project",
        ("concrete",),
        files={SCHEDULE: SCHEDULE_TEXT},
    )
    completed = subprocess.run(
        [*KEDRO, "run", "--pipelines=segor", "--params", TINY_SEGOR],
        cwd=project,
        env=kedro_env(
            mlflow_server.uri, ENSEMBLE_BO_RUN_TAGS='{"scheduled.job": "tiny_segor"}'
        ),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    client = MlflowClient(mlflow_server.uri)
    experiment = client.get_experiment_by_name("ensemble_bo")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["scheduled.job"] == "tiny_segor"
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
    assert "View run" not in stdout  # MLflow's own copy of that link is off
    # the server's proxy: mlflow-artifacts:/<experiment id>/<run id>/artifacts
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/")
    stored = server.artifacts / run.info.experiment_id / run_id / "artifacts"
    assert {
        "tables/segor_trial_history.csv",
        "convergence_plot.png",
        "pools/segor_search_result/result.json",
        "pools/segor_search_result/arrays.npz",
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


def test_the_logged_model_loads_through_runs_and_scores_as_the_run_did(
    served_run, tmp_path
):
    server, project, run_id, _ = served_run
    with _use_tracking_uri(server.uri):
        check = verify_model(f"runs:/{run_id}/{MODEL}")
        assert check.matches, check.report()
        loaded = mlflow.sklearn.load_model(f"runs:/{run_id}/{MODEL}")
        local = mlflow.artifacts.download_artifacts(
            f"runs:/{run_id}/{MODEL}", dst_path=str(tmp_path)
        )
        run = mlflow.get_run(run_id)
    example = Model.load(local).load_input_example(local)
    assert len(example) == 5
    # the model the run scored: its test MSE on the run's own test split
    split = split_dataset(
        pd.read_csv(project / "data" / "01_raw" / "concrete.csv"),
        "concrete",
        default_parameters()["data_processing"],
        int(run.data.params["seed"]),
    )
    scale = split.train_target.std(ddof=0)
    residuals = (loaded.predict(split.test_features) - split.test_target) / scale
    assert np.mean(residuals**2) == pytest.approx(
        run.data.metrics["test_mse_ensemble"], rel=1e-9
    )


def run_against(server, project, command, **env):
    """`command` in the project, tracked on the server."""
    return subprocess.run(
        command,
        cwd=project,
        env=kedro_env(server.uri, **env),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_a_rerun_whose_predictions_change_exits_1_with_the_differences(
    served_run, tmp_path
):
    server, project, run_id, _ = served_run
    # every process of the rerun imports this: the trees predict 0.01 higher
    (tmp_path / "sitecustomize.py").write_text(
        "import sklearn.tree\n"
        "_predict = sklearn.tree.DecisionTreeRegressor.predict\n"
        "def predict(self, X, check_input=True):\n"
        "    return _predict(self, X, check_input) + 0.01\n"
        "sklearn.tree.DecisionTreeRegressor.predict = predict\n"
    )
    completed = run_against(
        server,
        project,
        [sys.executable, "-m", "ensemble_bo", "rerun", run_id],
        PYTHONPATH=str(tmp_path),
    )
    assert completed.returncode == 1, (
        completed.stdout[-3000:] + completed.stderr[-3000:]
    )
    assert f"Rerunning {run_id} from {server.uri}" in completed.stdout
    assert f"(rerun of {run_id}) differs" in completed.stdout
    table = completed.stdout[completed.stdout.index("difference  ") :]
    original = MlflowClient(server.uri).get_run(run_id)
    assert "metric test_mse_ensemble" in table
    assert str(original.data.metrics["test_mse_ensemble"]) in table
    assert "tables/segor_trial_history.csv" in table  # the pool's losses too
    client = MlflowClient(server.uri)
    (rerun,) = client.search_runs(
        [original.info.experiment_id], filter_string=f"tags.rerun_of = '{run_id}'"
    )
    assert rerun.info.status == "FINISHED"
    assert rerun.info.artifact_uri.startswith("mlflow-artifacts:/")


def test_make_scheduled_runs_its_job_and_verifies_the_previous_scheduled_run(
    served_run,
):
    server, project, run_id, _ = served_run
    completed = run_against(
        server,
        project,
        # the suite's venv (already synced), not one built in the project
        ["make", "--no-print-directory", f"VENV={sys.prefix}"]
        + ["-o", f"{sys.prefix}/.installed", "scheduled"]
        + [f"ARGS=--schedule {SCHEDULE}"],
    )
    assert completed.returncode == 0, (
        completed.stdout[-3000:] + completed.stderr[-3000:]
    )
    assert f"-> {server.uri}" in completed.stdout
    assert f"== job tiny_segor: rerunning the previous run {run_id}" in completed.stdout
    assert f"(rerun of {run_id}) has the same" in completed.stdout
    client = MlflowClient(server.uri)
    experiment = client.get_run(run_id).info.experiment_id
    runs = client.search_runs(
        [experiment], filter_string="tags.`scheduled.job` = 'tiny_segor'"
    )
    assert len(runs) == 2 and {run.info.status for run in runs} == {"FINISHED"}
