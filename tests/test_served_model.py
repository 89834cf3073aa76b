"""The logged model serves what a CSV gives it: an integer column as 28, 28.0 or
empty, like any numeric column (its signature types integer columns Any); and,
asked with params={"coverage": c}, its conformal intervals or sets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from ensemble_bo.core.conformal import cross_conformal
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model
from ensemble_bo.tracking.artifacts import log_model
from tests.support import PROJECT, serve_csv

CONCRETE = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv")
FEATURES = CONCRETE.drop(columns="target")


WINE = pd.read_csv(PROJECT / "data" / "01_raw" / "wine.csv")


def _trees(task: str, tree) -> object:
    members = [tree(max_depth=depth, random_state=0) for depth in (3, 6)]
    return build_ensemble_model(task, members, [0.5, 0.5], FeatureEncoding())


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A SQLite store of the module's own, and its experiment."""
    folder = tmp_path_factory.mktemp("store")
    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = mlflow.create_experiment(
        "served", artifact_location=(folder / "artifacts").as_uri()
    )
    yield folder, experiment
    mlflow.set_tracking_uri(None)


def _logged(store, model, features, name: str) -> str:
    _, experiment = store
    with mlflow.start_run(experiment_id=experiment) as run:
        log_model(name, model, features)
    return f"runs:/{run.info.run_id}/{name}"


@pytest.fixture(scope="module")
def model_uri(store):
    """The ensemble of two trees on concrete (`age` is an integer column), logged
    as a run logs it."""
    assert FEATURES["age"].dtype == np.int64
    model = _trees("regression", DecisionTreeRegressor).fit(
        FEATURES, CONCRETE["target"]
    )
    return _logged(store, model, FEATURES, "segor_model"), store[0]


@pytest.fixture(scope="module")
def conformal_uris(store):
    """The same trees with CV+ fold models on concrete, and a classifier's on
    wine, logged as a run with `conformal: true` logs them."""
    regressor = cross_conformal(
        _trees("regression", DecisionTreeRegressor),
        np.arange(len(CONCRETE)) % 5,
        "regression",
    ).fit(FEATURES, CONCRETE["target"])
    wine = WINE.drop(columns="target")
    classifier = cross_conformal(
        _trees("classification", DecisionTreeClassifier),
        np.arange(len(WINE)) % 5,
        "classification",
    ).fit(wine, WINE["target"])
    return (
        _logged(store, regressor, FEATURES, "segor_model"),
        _logged(store, classifier, wine, "sego_model"),
    )


def test_the_signature_types_integer_columns_any_and_the_others_as_inferred(
    model_uri,
):
    uri, _ = model_uri
    schema = mlflow.models.get_model_info(uri).signature.inputs
    types = {spec.name: repr(spec.type) for spec in schema.inputs}
    assert types.pop("age") == "Any"
    assert set(types.values()) == {"double"}


def test_whole_floats_and_missing_values_are_served_in_an_integer_column(model_uri):
    uri, _ = model_uri
    model = mlflow.pyfunc.load_model(uri)
    rows = FEATURES.head(3)
    as_floats = rows.astype({"age": float})
    missing_age = as_floats.assign(age=np.nan)
    missing_water = rows.assign(water=np.nan)
    expected = model.predict(rows)  # integers still served
    np.testing.assert_array_equal(model.predict(as_floats), expected)
    # a missing value is imputed in the integer column as in a float column
    for frame in (missing_age, missing_water):
        predictions = np.asarray(model.predict(frame))
        assert predictions.shape == (3,) and np.isfinite(predictions).all()


@pytest.mark.slow
def test_mlflow_models_predict_serves_a_csv_with_28_0_and_an_empty_age(
    model_uri, tmp_path
):
    uri, folder = model_uri
    rows = FEATURES.head(3).astype({"age": float})
    rows.loc[1, "age"] = np.nan
    path = tmp_path / "rows.csv"
    rows.to_csv(path, index=False)
    assert "28.0" in path.read_text()
    served = serve_csv(uri, path, f"sqlite:///{folder / 'mlflow.db'}")
    assert len(served) == 3 and np.isfinite(served).all()


def test_a_conformal_model_serves_intervals_when_asked_for_a_coverage(
    conformal_uris,
):
    uri, _ = conformal_uris
    assert "coverage" in repr(mlflow.models.get_model_info(uri).signature.params)
    served = mlflow.pyfunc.load_model(uri)
    local = mlflow.sklearn.load_model(uri)
    rows = FEATURES.head(4)
    np.testing.assert_array_equal(served.predict(rows), local.predict(rows))
    answer = served.predict(rows, params={"coverage": 0.8})
    assert list(answer.columns) == ["prediction", "lower", "upper"]
    np.testing.assert_array_equal(answer["prediction"], local.predict(rows))
    np.testing.assert_array_equal(
        answer[["lower", "upper"]].to_numpy(), local.predict_interval(rows, 0.8)
    )
    wider = served.predict(rows, params={"coverage": 0.95})
    assert (wider["upper"] - wider["lower"] >= answer["upper"] - answer["lower"]).all()


def test_a_conformal_classifier_serves_sets_of_class_labels(conformal_uris):
    _, uri = conformal_uris
    served = mlflow.pyfunc.load_model(uri)
    rows = WINE.drop(columns="target").head(5)
    answer = served.predict(rows, params={"coverage": 0.9})
    local = mlflow.sklearn.load_model(uri)
    sets = local.predict_set(rows, 0.9)
    assert list(answer.columns) == ["prediction", "prediction_set"]
    assert answer["prediction_set"].tolist() == [
        local.classes_[row].tolist() for row in sets
    ]


def test_a_model_without_fold_models_refuses_a_coverage_and_says_why(model_uri):
    uri, _ = model_uri
    served = mlflow.pyfunc.load_model(uri)
    with pytest.raises(ValueError, match="logged without conformal fold models"):
        served.predict(FEATURES.head(2), params={"coverage": 0.9})
    assert served.predict(FEATURES.head(2)).shape == (2,)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_mlflow_models_serve_answers_a_request_for_intervals(conformal_uris, store):
    uri, _ = conformal_uris
    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "models",
            "serve",
            "-m",
            uri,
            "-p",
            str(port),
            "--env-manager",
            "local",
        ],
        env={
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{store[0] / 'mlflow.db'}",
            # the server starts uvicorn by name: the venv's
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=2)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "the model server never answered"
                time.sleep(0.5)
        rows = FEATURES.head(3)
        body = {
            "dataframe_split": json.loads(rows.to_json(orient="split", index=False)),
            "params": {"coverage": 0.9},
        }
        request = urllib.request.Request(
            f"{url}/invocations",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = json.loads(response.read())["predictions"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    expected = mlflow.sklearn.load_model(uri).predict_interval(rows, 0.9)
    np.testing.assert_allclose(
        [[row["lower"], row["upper"]] for row in predictions], expected
    )
