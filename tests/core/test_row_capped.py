"""Members that cost more than linearly in their rows refit on a capped sample."""

import numpy as np
import pandas as pd
import skops.io
from sklearn.ensemble import ExtraTreesRegressor
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR

from ensemble_bo import EnsembleRegressor
from ensemble_bo.core.refit import member_row_cap
from ensemble_bo.core.row_capped import (
    RowCappedClassifier,
    RowCappedRegressor,
    capped_rows,
    costs_more_than_linearly,
    row_capped,
    size_growth,
)
from ensemble_bo.core.zoo import make_model
from tests.support import PROJECT

RNG = np.random.default_rng(0)
X = RNG.normal(size=(600, 3))
Y = X[:, 0] + 0.1 * RNG.normal(size=600)


def test_kernel_and_neighbour_members_are_capped_and_the_others_not():
    assert costs_more_than_linearly(SVR())
    assert costs_more_than_linearly(make_pipeline(StandardScaler(), SVR()))
    assert not costs_more_than_linearly(Ridge())
    assert not costs_more_than_linearly(ExtraTreesRegressor())
    assert type(row_capped(SVR(), 100, 0)) is RowCappedRegressor
    assert type(row_capped(SVC(), 100, 0)) is RowCappedClassifier
    assert type(row_capped(Ridge(), 100, 0)) is Ridge
    svr = SVR()
    assert row_capped(svr, None, 0) is svr
    # only where the training rows exceed the search's sample
    assert member_row_cap(20_000, 67_000) == 20_000
    assert member_row_cap(20_000, 20_000) is None
    assert member_row_cap(None, 67_000) is None


def test_the_sample_is_seeded_and_keeps_every_class():
    y = np.array([0] * 990 + [1] * 8 + [2] * 2)
    rows = capped_rows(y, 100, seed=1, stratify=True)
    counts = np.bincount(y[rows])
    assert counts[0] == 99 and counts[1] >= 1 and counts[2] >= 1
    assert (np.diff(rows) > 0).all()
    assert (capped_rows(y, 100, seed=1, stratify=True) == rows).all()
    assert len(capped_rows(Y, 100, seed=1, stratify=False)) == 100
    assert (capped_rows(Y, 600, seed=1, stratify=False) == np.arange(600)).all()


def test_a_capped_member_fits_its_sample_and_predicts_as_it():
    capped = RowCappedRegressor(SVR(), 200, random_state=3).fit(X, Y)
    rows = capped_rows(Y, 200, 3, stratify=False)
    alone = SVR().fit(X[rows], Y[rows])
    assert capped.n_rows_ == 200
    np.testing.assert_array_equal(capped.predict(X), alone.predict(X))
    labels = (Y > 0).astype(int)
    classifier = RowCappedClassifier(SVC(), 200).fit(X, labels)
    assert classifier.classes_.tolist() == [0, 1]
    # an SVC without probability estimates has no predict_proba, capped or not
    assert not hasattr(classifier, "predict_proba")
    assert hasattr(RowCappedClassifier(SVC(probability=True), 200), "predict_proba")
    dumped = skops.io.dumps(capped)
    loaded = skops.io.loads(dumped, trusted=skops.io.get_untrusted_types(data=dumped))
    np.testing.assert_array_equal(loaded.predict(X), capped.predict(X))


def test_a_search_on_a_sample_refits_its_svr_on_the_sample_size():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(500)
    search = EnsembleRegressor(
        model="svr",
        budget=3,
        random_state=0,
        params={"max_search_rows": 200, "conformal": False},
    ).fit(raw.drop(columns="target"), raw["target"])
    member = search.ensemble_.regressor_.named_steps["ensemble"].estimators_[0]
    assert type(member) is RowCappedRegressor and member.n_rows_ == 200
    whole = EnsembleRegressor(
        model="svr", budget=3, random_state=0, params={"conformal": False}
    ).fit(raw.drop(columns="target"), raw["target"])
    plain = whole.ensemble_.regressor_.named_steps["ensemble"].estimators_[0]
    assert not isinstance(plain, RowCappedRegressor)


class LGBMRegressor(Ridge):
    """Stands for LightGBM's class, known by its name (an optional package)."""


def test_a_member_s_size_grows_with_its_rows_unless_bounded_or_capped():
    growth = {
        name: size_growth(make_model("sego_sklearn", {"classifier": name, **params}, 0))
        for name, params in {
            "knn": {"n_neighbors": 3},
            "rbf_svm": {"C": 1.0, "gamma": 0.1, "max_iter": 1000},
            "decision_tree": {"max_depth": 3, "min_samples_split": 2,
                              "min_samples_leaf": 2},
            "random_forest": {"max_depth": 3, "min_samples_split": 2,
                              "min_samples_leaf": 2, "n_estimators": 3},
            "lda": {},
            "gaussian_nb": {},
        }.items()
    }  # fmt: skip
    assert growth == {
        "knn": "capped",
        "rbf_svm": "capped",
        "decision_tree": "rows",
        "random_forest": "rows",
        "lda": "bounded",
        "gaussian_nb": "bounded",
    }
    assert size_growth(make_pipeline(StandardScaler(), Ridge())) == "bounded"
    assert size_growth(LGBMRegressor()) == "bounded"
    assert size_growth(ExtraTreesRegressor()) == "rows"
