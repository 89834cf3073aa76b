"""The logged model serves what a CSV gives it: an integer column as 28, 28.0 or
empty, like any numeric column (its signature types integer columns Any)."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model
from ensemble_bo.tracking.artifacts import log_model
from tests.support import PROJECT, serve_csv

CONCRETE = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv")
FEATURES = CONCRETE.drop(columns="target")


@pytest.fixture(scope="module")
def model_uri(tmp_path_factory):
    """The ensemble of two trees on concrete (`age` is an integer column), logged
    as a run logs it, to a SQLite store of its own."""
    folder = tmp_path_factory.mktemp("store")
    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = mlflow.create_experiment(
        "served", artifact_location=(folder / "artifacts").as_uri()
    )
    assert FEATURES["age"].dtype == np.int64
    trees = [DecisionTreeRegressor(max_depth=depth, random_state=0) for depth in (3, 6)]
    model = build_ensemble_model("regression", trees, [0.5, 0.5], FeatureEncoding())
    model.fit(FEATURES, CONCRETE["target"])
    with mlflow.start_run(experiment_id=experiment) as run:
        log_model("segor_model", model, FEATURES)
    yield f"runs:/{run.info.run_id}/segor_model", folder
    mlflow.set_tracking_uri(None)


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
