"""The tracking hook on its own, against a temporary MLflow store."""

import pickle

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from ensemble_bo.core.pool import Pool, TrialResult
from ensemble_bo.core.strategies import EnsembleSearchResult, SearchInterrupted
from ensemble_bo.tracking import MlflowTrackingHook, flatten, resolve_tracking_uri


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment(
        "hook", artifact_location=(tmp_path / "art").as_uri()
    )
    yield MlflowClient(uri), experiment
    if mlflow.active_run():
        mlflow.end_run()


def test_an_interrupted_search_leaves_its_models_in_the_run(store):
    client, experiment = store
    pool = Pool(3)
    pool.add({"max_depth": 2}, np.zeros(1), TrialResult(np.array([1.0, 2.0, 3.0]), 0.1))
    pool.add({"max_depth": 9}, np.zeros(1), TrialResult(None, 0.2, "ValueError: boom"))
    partial = EnsembleSearchResult(pool, [0], np.array([0.5, np.nan]))
    error = SearchInterrupted(partial, budget=50, cause=KeyboardInterrupt())

    with mlflow.start_run(experiment_id=experiment) as run:
        MlflowTrackingHook().on_node_error(error)

    paths = {a.path for a in client.list_artifacts(run.info.run_id, "partial")}
    assert paths == {
        "partial/partial_trial_history.csv",
        "partial/partial_search_result.pkl",
    }
    restored = pickle.loads(
        open(
            client.download_artifacts(
                run.info.run_id, "partial/partial_search_result.pkl"
            ),
            "rb",
        ).read()
    )
    np.testing.assert_array_equal(restored.pool.predictions[0], [1.0, 2.0, 3.0])
    assert restored.pool.errors[1] == "ValueError: boom"
    assert client.get_run(run.info.run_id).data.metrics["iterations_completed"] == 0


def test_other_node_errors_log_nothing(store):
    client, experiment = store
    with mlflow.start_run(experiment_id=experiment) as run:
        MlflowTrackingHook().on_node_error(ValueError("bad dataset"))
    assert client.list_artifacts(run.info.run_id) == []


def test_parameters_are_flattened_with_dotted_names():
    nested = {
        "segor": {"search_space": {"max_depth": {"low": 1, "high": 30}}},
        "seed": 0,
    }
    assert dict(flatten(nested)) == {
        "segor.search_space.max_depth.low": 1,
        "segor.search_space.max_depth.high": 30,
        "seed": 0,
    }


def test_a_relative_sqlite_store_lives_in_the_project(tmp_path):
    assert (
        resolve_tracking_uri("sqlite:///mlflow.db", tmp_path)
        == f"sqlite:///{tmp_path / 'mlflow.db'}"
    )
    assert (
        resolve_tracking_uri("http://mlflow.internal:5000", tmp_path)
        == "http://mlflow.internal:5000"
    )
