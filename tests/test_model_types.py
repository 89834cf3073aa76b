"""The logged model's skops file: dumped once, deflated, trusted with exactly
the types it holds (read from its schema), and loaded by nothing but its
users: MLflow's own checks would load a second copy of it in the run."""

import zipfile
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import skops.io
from mlflow.models import Model
from sklearn.dummy import DummyRegressor

from ensemble_bo import EnsembleRegressor
from ensemble_bo.core.conformal import cross_conformal
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model, member_spread
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.zoo import make_model
from ensemble_bo.tracking import artifacts, skops_file
from tests.core.test_zoo import IRIS_X, IRIS_Y, MODELS, set_classifier
from tests.support import CHEAP_MODEL, PROJECT

FEATURES = pd.DataFrame(IRIS_X, columns=["a", "b", "c", "d"])


def _choices(space_name: str) -> list[str]:
    return SearchSpace.from_dict(MODELS[space_name]).parameters[0].choices


def _fitted_conformal(space_name: str, choice: str, task: str):
    space = SearchSpace.from_dict(MODELS[space_name])
    point = set_classifier(space, np.random.default_rng(3).random(space.dim), choice)
    members = [make_model(space_name, space.decode(point), 0)]
    ensemble = build_ensemble_model(task, members, [1.0], FeatureEncoding())
    spread = member_spread if task == "regression" else None
    target = IRIS_X[:, 0] if task == "regression" else IRIS_Y
    folds = np.arange(len(target)) % 3
    return cross_conformal(ensemble, folds, task, spread=spread).fit(FEATURES, target)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    ("space_name", "choice", "task"),
    [("segor_sklearn", c, "regression") for c in _choices("segor_sklearn")]
    + [("sego_sklearn", c, "classification") for c in _choices("sego_sklearn")],
)
def test_each_family_loads_trusting_the_types_its_file_names(
    space_name, choice, task, tmp_path
):
    model = _fitted_conformal(space_name, choice, task)
    path = tmp_path / "model.skops"
    trusted = artifacts.dump_model(model, path)
    # exactly what skops flags in a dump of the model, this package's classes too
    assert trusted == skops.io.get_untrusted_types(data=skops.io.dumps(model))
    assert any(name.startswith("ensemble_bo.core.conformal.") for name in trusted)
    loaded = skops.io.load(path, trusted=trusted)
    np.testing.assert_array_equal(loaded.predict(FEATURES), model.predict(FEATURES))
    with zipfile.ZipFile(path) as archive:
        assert {m.compress_type for m in archive.infolist()} == {zipfile.ZIP_DEFLATED}


def test_a_type_left_out_of_the_trusted_ones_is_refused(tmp_path):
    model = _fitted_conformal("segor_sklearn", "extra_trees", "regression")
    path = tmp_path / "model.skops"
    trusted = artifacts.dump_model(model, path)
    assert "sklearn.tree._tree.Tree" in trusted
    with pytest.raises(skops.io.exceptions.UntrustedTypesFoundException, match="Tree"):
        skops.io.load(path, trusted=[t for t in trusted if not t.endswith("Tree")])


def test_a_bagged_stacked_search_s_model_is_logged_dumped_once_and_not_loaded(
    tmp_path, monkeypatch
):
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(200)
    features = raw.drop(columns="target")
    search = EnsembleRegressor(
        model=CHEAP_MODEL,
        budget=6,
        random_state=1,
        params={"final_model": "bagged", "stacking": True},
    ).fit(features, raw["target"])
    model = search.conformal_
    dumped, written, loaded = [], [], []
    real_dump, real_write, real_load = (
        skops.io.dump,
        skops_file.write_skops,
        skops.io.load,
    )

    def dump(obj, *args, **kwargs):
        dumped.append(type(obj))
        return real_dump(obj, *args, **kwargs)

    def write(obj, *args, **kwargs):
        written.append(type(obj))
        return real_write(obj, *args, **kwargs)

    def load(*args, **kwargs):
        loaded.append(type(obj := real_load(*args, **kwargs)))
        return obj

    monkeypatch.setattr(skops.io, "dump", dump)
    monkeypatch.setattr(skops_file, "write_skops", write)
    monkeypatch.setattr(skops.io, "load", load)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("types", (tmp_path / "art").as_uri())
    with mlflow.start_run(experiment_id=experiment) as run:
        artifacts.log_model("segor_model", model, features)
    # the ensemble written once, by skops_file; only MLflow's stand-in
    # dumped by skops and loaded back
    assert written == [type(model)]
    assert dumped == [DummyRegressor]
    assert loaded == [DummyRegressor]
    monkeypatch.undo()

    uri = f"runs:/{run.info.run_id}/segor_model"
    logged = Model.load(uri)
    trusted = logged.flavors["sklearn"]["skops_trusted_types"]
    assert trusted == skops.io.get_untrusted_types(data=skops.io.dumps(model))
    assert "ensemble_bo.core.bagging.BaggedRegressor" in trusted
    expected = model.predict(features)
    np.testing.assert_allclose(
        mlflow.sklearn.load_model(uri).predict(features), expected
    )
    served = mlflow.pyfunc.load_model(uri).predict(features)
    np.testing.assert_allclose(np.asarray(served).ravel(), expected)
    local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path)))
    model_file = local / "model.skops"
    with zipfile.ZipFile(model_file) as archive:
        assert {m.compress_type for m in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    assert model_file.stat().st_size < logged.model_size_bytes
