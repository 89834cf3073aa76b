"""Members refit on more rows than their search had: a capped sample for those
that cost more than linearly in their rows, more rounds for histogram boosting."""

import numpy as np
import pandas as pd
import skops.io
from sklearn.datasets import make_friedman1
from sklearn.ensemble import (
    ExtraTreesRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
)
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.linear_model import Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR

from ensemble_bo import EnsembleRegressor
from ensemble_bo.api import default_parameters
from ensemble_bo.core.row_capped import (
    PATIENCE,
    LargeDataRefit,
    RowCappedClassifier,
    RowCappedRegressor,
    capped_rows,
    costs_more_than_linearly,
    fits_superlinearly,
    large_data_refit,
    rounds_growth,
    row_capped,
    size_growth,
    with_rounds_grown,
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


def test_kernel_machines_fit_superlinearly_and_neighbours_do_not():
    assert fits_superlinearly(make_pipeline(StandardScaler(), SVR()))
    assert fits_superlinearly(SVC())
    assert fits_superlinearly(GaussianProcessRegressor())
    # a neighbour model's fit only stores its rows; its prediction costs more
    assert not fits_superlinearly(KNeighborsRegressor())
    assert costs_more_than_linearly(KNeighborsRegressor())
    assert not fits_superlinearly(ExtraTreesRegressor())


def test_a_refit_on_more_rows_than_searched_caps_rows_and_grows_rounds():
    # only where the training rows exceed the search's sample
    assert large_data_refit(20_000, np.zeros(67_000), False) == LargeDataRefit(
        20_000, 3.35
    )
    assert large_data_refit(20_000, np.zeros(20_000), False) is None
    assert large_data_refit(None, np.zeros(67_000), False) is None
    labels = np.array([0] * 66_991 + [1] * 9)
    assert large_data_refit(20_000, labels, True).rounds == 1.0
    labels[-10] = 1
    assert large_data_refit(20_000, labels, True).rounds == 3.35
    assert rounds_growth(20_000, 67_000) == 3.35
    assert rounds_growth(20_000, None) == 1.0
    assert rounds_growth(20_000, 10_000) == 1.0


def test_histogram_boosting_grows_its_rounds_with_early_stopping():
    plain = HistGradientBoostingRegressor(max_iter=100, early_stopping=False)
    grown = with_rounds_grown(plain, 3.35)
    assert grown.get_params() == {
        **plain.get_params(),
        "max_iter": 335,
        "early_stopping": True,
        "n_iter_no_change": PATIENCE,
    }
    assert plain.max_iter == 100 and not plain.early_stopping
    assert with_rounds_grown(plain, 1.0) is plain
    classifier = make_pipeline(StandardScaler(), HistGradientBoostingClassifier())
    assert with_rounds_grown(classifier, 2.0)[-1].max_iter == 200
    assert classifier[-1].max_iter == 100
    forest = ExtraTreesRegressor()
    assert with_rounds_grown(forest, 3.0) is forest
    # a large-data member: an SVR fits a sample, boosting more rounds
    refit = LargeDataRefit(200, 2.0)
    assert type(refit.member(SVR(), 0)) is RowCappedRegressor
    assert refit.member(plain, 0).max_iter == 200
    assert refit.member(forest, 0) is forest


def test_grown_rounds_stop_early_and_fit_better_where_rounds_help():
    X, y = make_friedman1(4_000, noise=1.0, random_state=0)
    test_X, test_y = make_friedman1(2_000, noise=1.0, random_state=1)
    plain = HistGradientBoostingRegressor(
        learning_rate=0.05, max_leaf_nodes=7, max_iter=50, early_stopping=False,
        random_state=0,
    )  # fmt: skip
    grown = with_rounds_grown(plain, 20.0).fit(X, y)
    plain.fit(X, y)
    assert plain.n_iter_ == 50
    assert 50 < grown.n_iter_ < 1_000
    mse = {m: np.mean((m.predict(test_X) - test_y) ** 2) for m in (plain, grown)}
    assert mse[grown] < 0.8 * mse[plain]


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
    assert size_growth(HistGradientBoostingRegressor()) == "rounds"
    start = default_parameters()["large_data_portfolios"]["sego_sklearn"][0]
    assert size_growth(make_model("sego_sklearn", start, 0)) == "rounds"
    assert size_growth(ExtraTreesRegressor()) == "rows"


def test_a_search_on_a_sample_refits_histogram_boosting_for_more_rounds():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(500)
    features, target = raw.drop(columns="target"), raw["target"]
    fits = {
        rows: EnsembleRegressor(
            model="hist_gradient_boosting_regressor",
            budget=2,
            random_state=0,
            params={"max_search_rows": rows, "conformal": False},
        ).fit(features, target)
        for rows in (200, None)
    }
    for rows, search in fits.items():
        member = search.ensemble_.regressor_.named_steps["ensemble"].estimators_[0]
        searched = search.members_["max_iter"].iloc[0]
        if rows is None:
            assert member.max_iter == searched
        else:
            assert member.max_iter == np.ceil(searched * 500 / 200)
            assert member.early_stopping and member.n_iter_ <= member.max_iter
