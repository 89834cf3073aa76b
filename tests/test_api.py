"""EnsembleSearch: the methods as a scikit-learn estimator, outside Kedro."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GroupKFold, KFold, ShuffleSplit

import ensemble_bo.api
from ensemble_bo import METHODS, EnsembleSearch
from ensemble_bo.api import default_parameters, merged
from tests.support import CHEAP_MODEL, cheap_parameters

PROJECT = Path(__file__).resolve().parents[1]
RAW = PROJECT / "data" / "01_raw"
# model="auto" (the default) searches the cheap tree rather than segor_sklearn
CHEAP = {"default_models": {"regression": CHEAP_MODEL}}
FAST = {"segor": {"optimizer": {"n_initial": 3}, "time_limit": None}, **CHEAP}


@pytest.fixture(scope="module")
def concrete():
    raw = pd.read_csv(RAW / "concrete.csv").sample(300, random_state=0)
    return raw.drop(columns="target"), raw["target"]


@pytest.fixture(scope="module")
def fitted(concrete):
    X, y = concrete
    return EnsembleSearch(budget=6, random_state=1, params=FAST).fit(X, y)


def test_it_is_a_scikit_learn_estimator():
    search = EnsembleSearch(method="esmbo", budget=7, cv=3, random_state=2)
    copy = clone(search)
    assert copy.get_params() == search.get_params()
    assert copy.set_params(budget=9).budget == 9 and search.budget == 7
    with pytest.raises(NotFittedError):
        search.predict(np.zeros((2, 3)))


def test_a_fit_gives_the_ensemble_its_attributes_and_target_units(fitted, concrete):
    X, y = concrete
    assert fitted.task_ == "regression" and fitted.seed_ == 1
    assert fitted.result_.model_name == CHEAP_MODEL  # auto: params' default_models
    assert len(fitted.result_.pool) == 6
    assert fitted.cv_loss_ == fitted.result_.history[-1].ensemble_loss
    assert fitted.members_["weight"].sum() == pytest.approx(1.0)
    assert set(fitted.members_["trial"]) == set(fitted.result_.member_weights)
    predictions = fitted.predict(X)
    # in the target's units (MPa), not standardized
    assert abs(predictions.mean() - y.mean()) < 0.2 * y.std()
    assert fitted.score(X, y) == pytest.approx(
        1 - np.sum((y - predictions) ** 2) / np.sum((y - y.mean()) ** 2)
    )
    assert list(fitted.feature_names_in_) == list(X.columns)


def test_same_seed_same_ensemble_and_arrays_work_like_frames(fitted, concrete):
    X, y = concrete
    again = EnsembleSearch(budget=6, random_state=1, params=FAST).fit(
        X.to_numpy(), y.to_numpy()
    )
    assert again.result_.pool.configs == fitted.result_.pool.configs
    np.testing.assert_allclose(again.predict(X.to_numpy()), fitted.predict(X))


def test_no_random_state_draws_a_seed_it_keeps(concrete):
    X, y = concrete
    search = EnsembleSearch(method="random_search", budget=3, params=CHEAP).fit(X, y)
    again = EnsembleSearch(
        method="random_search", budget=3, random_state=search.seed_, params=CHEAP
    )
    assert again.fit(X, y).result_.pool.configs == search.result_.pool.configs


def test_classification_predicts_labels_and_probabilities():
    raw = pd.read_csv(RAW / "wine.csv")
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleSearch(
        method="sego",
        model="decision_tree_classifier",
        budget=5,
        random_state=0,
        params={"sego": {"optimizer": {"n_initial": 3}, "time_limit": None}},
    ).fit(X, y)
    assert search.task_ == "classification"
    np.testing.assert_array_equal(search.classes_, np.unique(y))
    probabilities = search.predict_proba(X)
    assert probabilities.shape == (len(X), len(search.classes_))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)
    assert set(search.predict(X)) <= set(y)
    assert search.score(X, y) == pytest.approx(np.mean(search.predict(X) == y))


def test_intervals_come_from_the_fold_ensembles_by_cv_plus(fitted, concrete):
    X, y = concrete
    conformal = fitted.conformal_
    # the ensemble_ is the model refit on all rows; the fold models beside it
    assert conformal.estimator_ is fitted.ensemble_
    assert len(conformal.fold_estimators_) == 5
    np.testing.assert_array_equal(conformal.score_folds_, fitted.fold_ids_)
    bounds = fitted.predict_interval(X.head(30), coverage=0.8)
    assert bounds.shape == (30, 2) and (bounds[:, 0] < bounds[:, 1]).all()
    wider = fitted.predict_interval(X.head(30), coverage=0.95)
    assert (wider[:, 1] - wider[:, 0] >= bounds[:, 1] - bounds[:, 0]).all()
    # CV+ by hand from the fold ensembles' predictions and the residuals
    centres = np.stack([m.predict(X.head(1)) for m in conformal.fold_estimators_])
    own = centres[conformal.score_folds_, 0]
    rank = int(np.ceil(0.8 * (len(y) + 1)))
    assert bounds[0, 1] == pytest.approx(np.sort(own + conformal.residuals_)[rank - 1])
    assert bounds[0, 0] == pytest.approx(-np.sort(conformal.residuals_ - own)[rank - 1])
    assert not hasattr(fitted, "predict_set")
    with pytest.raises(ValueError, match=r"coverage must be in \(0, 1\), got 90"):
        fitted.predict_interval(X.head(2), coverage=90)


def test_the_leaderboard_and_feature_importance_of_a_search(fitted, concrete):
    X, y = concrete
    board = fitted.leaderboard()
    assert len(board) == len(fitted.result_.pool)
    assert board["cv_loss"].is_monotonic_increasing
    members = board[board["weight"] > 0]
    assert set(members["trial"]) == set(fitted.members_["trial"])
    assert (board["model_mib"] > 0).all() and (board["fit_seconds"] > 0).all()
    importance = fitted.feature_importance(X.head(100), y.head(100), n_repeats=2)
    assert sorted(importance["feature"]) == sorted(X.columns)
    assert importance["importance"].is_monotonic_decreasing


def test_prediction_sets_and_no_fold_models_without_conformal():
    raw = pd.read_csv(RAW / "wine.csv")
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleSearch(
        method="sego",
        model="decision_tree_classifier",
        budget=4,
        random_state=0,
        params={"sego": {"optimizer": {"n_initial": 3}, "time_limit": None}},
    ).fit(X, y)
    sets = search.predict_set(X, coverage=0.9)
    assert sets.shape == (len(X), 3) and sets.dtype == bool
    assert not hasattr(search, "predict_interval")
    plain = EnsembleSearch(
        method="sego",
        model="decision_tree_classifier",
        budget=4,
        random_state=0,
        params={
            "sego": {"optimizer": {"n_initial": 3}, "time_limit": None},
            "conformal": False,
        },
    ).fit(X, y)
    assert plain.conformal_ is None
    # the same ensemble, without the fold models
    np.testing.assert_array_equal(plain.predict(X), search.predict(X))
    with pytest.raises(ValueError, match="fitted with conformal=False"):
        plain.predict_set(X)


def test_a_splitter_sets_the_folds_with_its_groups(concrete):
    X, y = concrete
    groups = np.arange(len(y)) % 7
    search = EnsembleSearch(budget=3, cv=GroupKFold(3), random_state=0, params=FAST)
    folds = search.fit(X, y, groups=groups).fold_ids_
    assert sorted(np.unique(folds)) == [0, 1, 2]
    for group in range(7):  # a group never straddles two folds
        assert len(np.unique(folds[groups == group])) == 1
    three = EnsembleSearch(budget=3, cv=KFold(3), random_state=0, params=FAST)
    assert np.bincount(three.fit(X, y).fold_ids_).tolist() == [100, 100, 100]


@pytest.mark.parametrize(
    ("cv", "message"),
    [
        (1, "cv must be an integer >= 2 or a splitter, got 1"),
        ("five", "cv must be an integer >= 2 or a scikit-learn splitter, got 'five'"),
        (ShuffleSplit(3, random_state=0), "more than one fold"),
    ],
)
def test_bad_folds_are_named(concrete, cv, message):
    X, y = concrete
    with pytest.raises(ValueError, match=re.escape(message)):
        EnsembleSearch(budget=3, cv=cv, params=FAST).fit(X, y)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"method": "segro"}, "unknown method 'segro'"),
        ({"params": {"ensembel": {"size": 3}}}, "unknown parameter 'ensembel'"),
        ({"params": {"ensemble": {"sise": 3}}}, "unknown parameter 'sise'"),
        (
            {"budget": "ten"},
            "budget must be a positive integer (with a fidelity schedule, a positive "
            "number of full-fidelity equivalents), got 'ten'",
        ),
        ({"budget": 2.5}, "budget=2.5 is not an integer >= 1"),
        ({"time_budget": -1}, "time_budget must be a positive finite number"),
        ({"model": "xgboost"}, "segor.model='xgboost' is not a model"),
        ({"method": "sego"}, "methods for regression"),
    ],
)
def test_bad_arguments_are_named(concrete, arguments, message):
    X, y = concrete
    with pytest.raises(ValueError, match=re.escape(message)):
        EnsembleSearch(**{"budget": 3, "params": FAST, **arguments}).fit(X, y)


def test_params_override_the_project_s_defaults_key_by_key():
    defaults = default_parameters()
    chosen = merged(defaults, {"ensemble": {"variant": "g-m"}})
    assert chosen["ensemble"] == {**defaults["ensemble"], "variant": "g-m"}
    assert chosen["segor"] == defaults["segor"]


def run_example(page: str, heading: str) -> dict:
    """The namespace after the first Python block under `heading` of `page` ran."""
    text = (PROJECT / page).read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, page, "exec"), namespace)  # noqa: S102 - our own docs
    return namespace


def test_the_python_api_examples_of_the_readme_and_the_usage_page_run(monkeypatch):
    # the examples' model="auto": the cheap tree, not segor_sklearn
    cheap = cheap_parameters()
    monkeypatch.setattr(ensemble_bo.api, "default_parameters", lambda: cheap)
    assert np.isfinite(run_example("docs/usage.md", "## The Python API")["test_mse"])
    readme = run_example("README.md", "## Python API")
    for search in (readme["search"], readme["single"]):
        assert search.score(readme["X_test"], readme["y_test"]) > 0.5


def test_the_usage_page_lists_every_method_with_its_summary():
    readme = (PROJECT / "docs" / "usage.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in readme.splitlines()
        if line.startswith("| `")
    }
    for name, method in METHODS.items():
        assert name in rows, name
        assert method.summary in rows[name], name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda X, y: (X.assign(cement=np.inf), y), "['cement'] hold infinite values"),
        (lambda X, y: (X.assign(cement=np.nan), y), "['cement'] have no value at all"),
        (lambda X, y: (X, y * 0.0), "has the same value (0.0) in every row"),
        (lambda X, y: (X.iloc[:0], y.iloc[:0]), "no rows"),
    ],
)
def test_bad_data_is_refused_before_any_training(concrete, change, message):
    X, y = change(*concrete)
    with pytest.raises(ValueError, match=re.escape(message)):
        EnsembleSearch(budget=3, params=FAST).fit(X, y)


def test_missing_feature_values_are_imputed(concrete):
    X, y = concrete
    holes = X.mask(np.random.default_rng(0).random(X.shape) < 0.1)
    search = EnsembleSearch(method="smbo", model="svr", budget=3, random_state=0)
    search.set_params(params={"smbo": {"time_limit": None}})
    assert search.fit(holes, y).result_.pool.ok.all()
    assert np.isfinite(search.predict(holes)).all()


def test_a_time_budget_ends_the_search_within_one_trial_of_its_limit(concrete):
    X, y = concrete
    # The budget counts the evaluation worker's start-up (seconds).
    time_budget = 4.0
    search = EnsembleSearch(
        budget=10_000,
        time_budget=time_budget,
        random_state=3,
        params={"segor": {"optimizer": {"n_initial": 3}}, **CHEAP},
    ).fit(X, y)
    result = search.result_
    # How far past its limit a search stops is tested on a fake clock
    # (test_time_budget.py); the seconds here depend on the machine's load.
    assert result.stopped_by == "time_budget" and 1 <= len(result.pool) < 10_000
    assert result.pool.ok[0]  # the first trial is never cut by the budget
    # It stopped where the time left after its final fit's was spent, or where
    # a trial was cut at the budget's end: that trial had only the share of
    # the time left that leaves room for its own final fit (core.time_budget).
    kept = result.search_metrics["final_fit_seconds_kept"]
    last_error = result.pool.errors[-1] or ""
    cut_at_end = "cut at the end of the time budget" in last_error
    assert kept > 0 and (result.search_seconds + kept >= time_budget or cut_at_end)
    assert search.refit_seconds_ > 0 and len(search.predict(X)) == len(X)


@pytest.mark.parametrize(
    ("method", "kind"), [("segor", "tpe"), ("segor", "rf"), ("esmbo", "tpe")]
)
def test_every_optimizer_kind_drives_the_ensemble_searches(concrete, method, kind):
    # one parameter switches the engine; the ensemble search and its seed work the same
    X, y = concrete
    block = "segor" if method == "segor" else "esmbo"
    params = {
        block: {"optimizer": {"kind": kind, "n_initial": 3}, "time_limit": None},
        **CHEAP,
    }
    runs = [
        EnsembleSearch(method=method, budget=6, random_state=4, params=params).fit(X, y)
        for _ in range(2)
    ]
    assert len(runs[0].result_.pool) == 6 and all(runs[0].result_.pool.ok)
    assert runs[0].result_.pool.configs == runs[1].result_.pool.configs
    assert runs[0].members_["weight"].sum() == pytest.approx(1.0)
