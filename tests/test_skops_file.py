"""The skops file of tracking.skops_file: what skops.io.dump writes, array for
array, and what skops loads back."""

import hashlib
import json
import zipfile

import numpy as np
import pytest
import skops.io
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestClassifier

from ensemble_bo.tracking.skops_file import write_skops
from tests.test_model_types import FEATURES, IRIS_Y, _fitted_conformal


def _contents(archive: zipfile.ZipFile):
    """The archive's schema with each array file replaced by its bytes' sha256
    and each object id by the order it first appears in: the ids and the file
    names they make are the objects' addresses, which differ between dumps."""
    ids: dict[int, int] = {}

    def resolved(node):
        if isinstance(node, dict):
            return {
                key: hashlib.sha256(archive.read(value)).hexdigest()
                if key == "file"
                else ids.setdefault(value, len(ids))
                if key == "__id__"
                else resolved(value)
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [resolved(value) for value in node]
        return node

    return resolved(json.loads(archive.read("schema.json"))), len(archive.namelist())


def _skops_dump(obj, path):
    skops.io.dump(obj, path, compression=zipfile.ZIP_DEFLATED, compresslevel=1)


SHARED = np.arange(12.0).reshape(3, 4)
OBJECTS = {
    "boosted trees with CV+ fold models": lambda: _fitted_conformal(
        "segor_sklearn", "hist_gradient_boosting", "regression"
    ),
    "a forest": lambda: RandomForestClassifier(5, random_state=0).fit(FEATURES, IRIS_Y),
    # one array held twice is one file, as skops memoizes it
    "an array held twice": lambda: {"a": SHARED, "b": [SHARED, 3], "c": "text"},
}


@pytest.mark.parametrize("name", OBJECTS)
def test_the_file_holds_what_skops_dump_writes(name, tmp_path):
    obj = OBJECTS[name]()
    write_skops(obj, tmp_path / "ours.skops")
    _skops_dump(obj, tmp_path / "skops.skops")
    with (
        zipfile.ZipFile(tmp_path / "ours.skops") as ours,
        zipfile.ZipFile(tmp_path / "skops.skops") as theirs,
    ):
        assert _contents(ours) == _contents(theirs)
        assert {m.compress_type for m in ours.infolist()} == {zipfile.ZIP_DEFLATED}
        if name == "an array held twice":
            assert sorted(ours.namelist()) == sorted(theirs.namelist())
            assert len(ours.namelist()) == 2  # the schema and one array


def test_skops_loads_it_back_to_the_same_predictions(tmp_path):
    model = HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(
        FEATURES, FEATURES["a"]
    )
    path = tmp_path / "model.skops"
    write_skops(model, path)
    loaded = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    np.testing.assert_array_equal(loaded.predict(FEATURES), model.predict(FEATURES))
