"""The types a logged model's skops file is trusted with: held_types names a
superset of what skops flags, for every family of the default spaces, so that
MLflow's check that the dump loads passes with the model dumped once."""

import functools
import zipfile

import mlflow
import numpy as np
import pandas as pd
import pytest
import skops.io
from mlflow.models import Model

from ensemble_bo import EnsembleRegressor
from ensemble_bo.core.conformal import cross_conformal
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model, member_spread
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.zoo import make_model
from ensemble_bo.tracking import artifacts
from ensemble_bo.tracking.artifacts import held_types
from tests.core.test_zoo import IRIS_X, IRIS_Y, MODELS, set_classifier
from tests.support import PROJECT

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
def test_held_types_cover_what_skops_flags_in_each_family(space_name, choice, task):
    model = _fitted_conformal(space_name, choice, task)
    flagged = skops.io.get_untrusted_types(data=skops.io.dumps(model))
    assert set(flagged) <= set(held_types(model))
    # this package's own classes are among them, named as skops names them
    assert "ensemble_bo.core.conformal.CrossConformalRegressor" in flagged or (
        "ensemble_bo.core.conformal.CrossConformalClassifier" in flagged
    )


def test_held_types_walk_containers_partials_and_object_arrays():
    class Leaf:
        pass

    class Holder:
        def __init__(self):
            self.items = {"k": [Leaf()]}
            self.call = functools.partial(np.mean, axis=0)
            self.cells = np.array([Leaf()], dtype=object)
            self.kind = np.dtype("float32")

    names = held_types(Holder())
    leaf = f"{Leaf.__module__}.{Leaf.__qualname__}"
    assert leaf in names and "functools.partial" in names
    assert "numpy.mean" in names and "numpy.dtype" in names
    assert f"{Holder.__module__}.{Holder.__qualname__}" in names


def test_held_types_cover_a_bagged_stacked_search_s_model():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(200)
    search = EnsembleRegressor(
        budget=6, random_state=1, params={"final_model": "bagged", "stacking": True}
    ).fit(raw.drop(columns="target"), raw["target"])
    flagged = skops.io.get_untrusted_types(data=skops.io.dumps(search.conformal_))
    assert "ensemble_bo.core.bagging.BaggedRegressor" in flagged
    assert set(flagged) <= set(held_types(search.conformal_))


def test_a_type_the_walk_misses_still_logs_the_model_trusting_its_dump(
    tmp_path, monkeypatch
):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("types", (tmp_path / "art").as_uri())
    model = _fitted_conformal("segor_sklearn", "extra_trees", "regression")
    monkeypatch.setattr(artifacts, "held_types", lambda estimator: [])
    with mlflow.start_run(experiment_id=experiment) as run:
        artifacts.log_model("segor_model", model, None)
    loaded = mlflow.sklearn.load_model(f"runs:/{run.info.run_id}/segor_model")
    np.testing.assert_array_equal(loaded.predict(FEATURES), model.predict(FEATURES))
    flavor = Model.load(f"runs:/{run.info.run_id}/segor_model").flavors["sklearn"]
    # exactly the dump's types, the tree storage among them
    assert flavor["skops_trusted_types"] == skops.io.get_untrusted_types(
        data=skops.io.dumps(model)
    )
    assert "sklearn.tree._tree.Tree" in flavor["skops_trusted_types"]
    # the skops file is deflated
    local = mlflow.artifacts.download_artifacts(
        f"runs:/{run.info.run_id}/segor_model/model.skops", dst_path=str(tmp_path)
    )
    with zipfile.ZipFile(local) as archive:
        assert {m.compress_type for m in archive.infolist()} == {zipfile.ZIP_DEFLATED}


def test_deflate_compresses_a_skops_file_that_still_loads(tmp_path):
    model = _fitted_conformal("segor_sklearn", "random_forest", "regression")
    path = tmp_path / "model.skops"
    skops.io.dump(model, path)
    stored = path.stat().st_size
    artifacts.deflate(path)
    assert path.stat().st_size < stored / 2
    with zipfile.ZipFile(path) as archive:
        assert {m.compress_type for m in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    loaded = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    np.testing.assert_array_equal(loaded.predict(FEATURES), model.predict(FEATURES))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.skops"]
