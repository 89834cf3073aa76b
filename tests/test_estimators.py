"""EnsembleRegressor, EnsembleClassifier and EnsembleSearch as scikit-learn estimators.

Both per-task estimators pass every check of scikit-learn's
`parametrize_with_checks`, so none is listed in `expected_failed_checks`; the
only checks not run are the array-API ones, which scikit-learn itself skips
unless SCIPY_ARRAY_API is set. Every search here is cheap: a few trees, in
process (time_limit None: no worker process).
"""

import copy
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.model_selection import (
    GridSearchCV,
    StratifiedKFold,
    check_cv,
    cross_val_score,
)
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

import ensemble_bo.api
from ensemble_bo import METHODS, EnsembleClassifier, EnsembleRegressor, EnsembleSearch
from ensemble_bo.core.methods import TASK_METHODS
from tests.support import cheap_parameters

RAW = Path(__file__).resolve().parents[1] / "data" / "01_raw"
TREES = {
    "regression": "decision_tree_regressor",
    "classification": "decision_tree_classifier",
}
IN_PROCESS = {"time_limit": None}


@pytest.fixture
def cheap(monkeypatch):
    """The project's parameters with trees as each task's model, searched in process."""
    parameters = cheap_parameters()
    parameters["default_models"] = TREES
    for method in METHODS.values():
        parameters[method.search_params]["time_limit"] = None
    monkeypatch.setattr(
        ensemble_bo.api, "default_parameters", lambda: copy.deepcopy(parameters)
    )


@pytest.fixture(scope="module")
def concrete():
    """120 rows of concrete; a target in MPa, and in whole tens of MPa (up to 60:
    7 values, each on 7 rows or more)."""
    raw = pd.read_csv(RAW / "concrete.csv").sample(120, random_state=0)
    X, y = raw.drop(columns="target"), raw["target"]
    return X, y, (y // 10).clip(upper=6).astype(int)


@pytest.fixture(scope="module")
def wine():
    raw = pd.read_csv(RAW / "wine.csv")
    return raw.drop(columns="target"), raw["target"]


@parametrize_with_checks(
    [
        EnsembleRegressor(
            model=TREES["regression"], budget=3, params={"segor": IN_PROCESS}
        ),
        EnsembleClassifier(
            model=TREES["classification"], budget=3, params={"sego": IN_PROCESS}
        ),
    ]
)
@pytest.mark.filterwarnings(
    # scikit-learn's type_of_target casts NaN labels before it rejects them.
    "ignore:invalid value encountered in cast:RuntimeWarning"
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# --- the task, and what it tells scikit-learn ------------------------------------


def test_is_classifier_for_a_classification_search():
    assert is_classifier(EnsembleSearch(method="sego")) is True
    assert is_classifier(EnsembleSearch(task="classification"))
    assert is_classifier(EnsembleClassifier(method="esmbo"))
    assert not is_regressor(EnsembleSearch(method="sego"))


def test_is_regressor_for_a_regression_search():
    assert is_regressor(EnsembleSearch(method="segor"))
    assert is_regressor(EnsembleSearch(method="esmbo", task="regression"))
    assert is_regressor(EnsembleRegressor())
    assert not is_classifier(EnsembleSearch(method="segor"))


@pytest.mark.parametrize("method", ["auto", "esmbo", "smbo_posthoc", "no such method"])
def test_until_the_target_chooses_the_task_the_tags_say_neither(method):
    search = EnsembleSearch(method=method)
    assert get_tags(search).estimator_type is None
    assert not is_classifier(search) and not is_regressor(search)


def test_predict_proba_only_where_it_exists():
    assert hasattr(EnsembleSearch(method="segor"), "predict_proba") is False
    assert not hasattr(EnsembleSearch(task="regression"), "predict_proba")
    assert not hasattr(EnsembleRegressor(), "predict_proba")
    assert hasattr(EnsembleSearch(method="sego"), "predict_proba")
    assert hasattr(EnsembleClassifier(), "predict_proba")
    # a search whose target is still to choose its task may classify
    assert hasattr(EnsembleSearch(), "predict_proba")
    with pytest.raises(AttributeError, match="predict_proba"):
        EnsembleSearch(task="regression").predict_proba(np.zeros((2, 3)))


def test_a_fit_that_finds_the_task_says_it_in_the_tags(cheap, concrete):
    X, y, tens = concrete
    numbers = EnsembleSearch(budget=2, random_state=0).fit(X, y)
    assert numbers.task_ == "regression" and is_regressor(numbers)
    assert not hasattr(numbers, "predict_proba")
    classes = EnsembleSearch(budget=2, random_state=0).fit(X, tens)
    assert classes.task_ == "classification" and is_classifier(classes)
    assert classes.predict_proba(X).shape == (len(X), len(np.unique(tens)))
    assert classes.score(X, tens) == pytest.approx(np.mean(classes.predict(X) == tens))
    # a clone is unfitted: the target has not chosen yet
    assert get_tags(clone(classes)).estimator_type is None


def test_a_regression_method_fits_whole_numbers_as_regression(cheap, concrete):
    X, _, y = concrete  # 7 distinct whole numbers: classes to task "auto"
    search = EnsembleSearch(method="segor", budget=5).fit(X, y)
    assert search.task_ == "regression" and len(search.result_.pool) == 5
    assert not hasattr(search, "predict_proba")
    # searched on the standardized numbers, not on class codes
    np.testing.assert_allclose(search.result_.target, (y - y.mean()) / y.std(ddof=0))
    assert search.predict(X).dtype == float
    # a method of both tasks leaves the task to the target, as `kedro run` does
    both = EnsembleSearch(method="random_search", budget=2).fit(X, y)
    assert both.task_ == "classification"


def test_a_classification_method_takes_many_whole_numbers_as_classes(cheap, concrete):
    X, y, _ = concrete
    codes = y.rank(method="first").astype(int) % 25  # 25 values: regression to "auto"
    search = EnsembleSearch(method="sego", budget=2, cv=2, random_state=0)
    assert search.fit(X, codes).task_ == "classification"


@pytest.mark.parametrize(
    ("target", "shown", "dtype"),
    [
        (np.array(["low", "high"] * 60), "'low'", "str"),
        (np.arange(120) % 2 == 0, "True", "bool"),
    ],
    ids=["text", "booleans"],
)
def test_a_regression_method_refuses_text_and_booleans_naming_a_value(
    cheap, concrete, target, shown, dtype
):
    X, _, _ = concrete
    message = (
        f"y: regression needs a numeric target, but column 'target' has dtype {dtype} "
        f"(e.g. value {shown}); make the column numeric"
    )
    for search in (
        EnsembleSearch(method="segor", budget=2),
        EnsembleRegressor(budget=2),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            search.fit(X, target)


def test_method_auto_runs_the_task_s_ensemble_method(cheap, concrete, monkeypatch):
    X, y, tens = concrete
    ran = []
    run_method = ensemble_bo.api.run_method

    def spy(method, *args, **kwargs):
        ran.append(method)
        return run_method(method, *args, **kwargs)

    monkeypatch.setattr(ensemble_bo.api, "run_method", spy)
    EnsembleSearch(budget=2, random_state=0).fit(X, y)
    EnsembleSearch(budget=2, random_state=0).fit(X, tens)
    EnsembleSearch(task="regression", budget=2, random_state=0).fit(X, tens)
    EnsembleRegressor(budget=2, random_state=0).fit(X, tens)
    EnsembleClassifier(budget=2, random_state=0).fit(X, tens)
    assert ran == ["segor", "sego", "segor", "segor", "sego"]
    assert TASK_METHODS == {"regression": "segor", "classification": "sego"}


def test_the_per_task_estimators_give_the_search_s_ensemble(cheap, concrete):
    X, y, tens = concrete
    pairs = [
        (
            EnsembleRegressor(budget=3, random_state=4),
            EnsembleSearch(budget=3, random_state=4),
            y,
        ),
        (
            EnsembleClassifier(method="esmbo", budget=3, random_state=4),
            EnsembleSearch(
                method="esmbo", task="classification", budget=3, random_state=4
            ),
            tens,
        ),
    ]
    for one_task, search, target in pairs:
        one_task.fit(X, target)
        search.fit(X, target)
        assert one_task.result_.pool.configs == search.result_.pool.configs
        np.testing.assert_array_equal(one_task.predict(X), search.predict(X))
        assert one_task.score(X, target) == search.score(X, target)


def test_the_task_argument(cheap, concrete):
    X, y, tens = concrete
    as_numbers = EnsembleSearch(method="esmbo", task="regression", budget=2).fit(
        X, tens
    )
    assert as_numbers.task_ == "regression" and is_regressor(as_numbers)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "task must be one of ['regression', 'classification', 'auto'], got 'ranking'"
        ),
    ):
        EnsembleSearch(task="ranking", budget=2).fit(X, y)
    # classes must be classes, as scikit-learn's classifiers say
    for search in (EnsembleSearch(task="classification"), EnsembleClassifier()):
        with pytest.raises(ValueError, match="Unknown label type: continuous"):
            search.set_params(budget=2).fit(X, y)
    with pytest.raises(ValueError, match="segor builds regression ensembles"):
        EnsembleSearch(method="segor", task="classification", budget=2).fit(X, tens)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"data_processing": {"task": "classification"}},
            "params: 'data_processing' is set by the arguments task (the task) and "
            "cv (the folds), not in params",
        ),
        ({"budget": 9}, "params: 'budget' is set by the argument budget"),
        (
            {"time_budget": 9},
            "params: 'time_budget' is set by the argument time_budget",
        ),
        ({"seed": 1}, "params: 'seed' is set by the argument random_state"),
        ({"dataset": "wine"}, "params: 'dataset' is set by the data given to fit"),
        (
            {"segor": {"model": "svr"}},
            "params: segor.model is set by the argument model, not in params "
            "(got 'svr')",
        ),
    ],
)
def test_params_may_not_set_what_an_argument_sets(concrete, params, message):
    X, y, _ = concrete
    with pytest.raises(ValueError, match=re.escape(message)):
        EnsembleSearch(budget=2, params=params).fit(X, y)


def test_a_search_cuts_every_trial_but_the_first_at_its_share_of_the_time_budget(
    concrete,
):
    X, y, _ = concrete
    search = EnsembleRegressor(
        method="segor",
        model="decision_tree_regressor",
        budget=3,
        time_budget=600,
        params={"max_trial_share": 1e-7},  # 60 microseconds: no fit is that quick
        random_state=0,
    ).fit(X, y)
    errors = search.result_.pool.errors
    assert errors[0] is None  # the first trial is never cut
    assert (
        errors[1:]
        == [
            "TimeoutError: fit exceeded its share of the time budget "
            "(1e-07 x 600 s = 6e-05 s)"
        ]
        * 2
    )


def test_every_setting_is_a_parameter_scikit_learn_sees():
    assert set(EnsembleSearch().get_params()) == {
        "method",
        "task",
        "model",
        "budget",
        "time_budget",
        "cv",
        "params",
        "random_state",
        "callbacks",
    }
    per_task = set(EnsembleSearch().get_params()) - {"task"}
    assert set(EnsembleRegressor().get_params()) == per_task
    assert set(EnsembleClassifier().get_params()) == per_task
    with pytest.raises(TypeError):
        EnsembleSearch("segor")  # keyword arguments only


# --- scikit-learn's model selection -------------------------------------------------


def test_cross_val_score_works_on_both_tasks(cheap, concrete, wine):
    X, y, _ = concrete
    r2 = cross_val_score(EnsembleRegressor(budget=3, cv=3, random_state=0), X, y, cv=2)
    assert r2.shape == (2,) and np.isfinite(r2).all()
    X_wine, labels = wine
    classifier = EnsembleClassifier(budget=3, cv=3, random_state=0)
    # a classifier's outer folds are stratified, as for any scikit-learn classifier
    assert isinstance(
        check_cv(2, labels, classifier=is_classifier(classifier)), StratifiedKFold
    )
    accuracy = cross_val_score(classifier, X_wine, labels, cv=2)
    assert accuracy.shape == (2,) and ((accuracy >= 0) & (accuracy <= 1)).all()


def test_grid_search_over_the_variant_and_the_budget(cheap, concrete, wine):
    X, y, _ = concrete
    variants = GridSearchCV(
        EnsembleSearch(budget=3, cv=3, random_state=0),
        {"method": ["segor:f-m", "segor:g-m"]},
        cv=2,
    ).fit(X, y)
    assert variants.best_params_["method"] in {"segor:f-m", "segor:g-m"}
    assert np.isfinite(variants.cv_results_["mean_test_score"]).all()
    assert variants.best_estimator_.task_ == "regression"
    assert variants.predict(X).shape == (len(X),)
    X_wine, labels = wine
    budgets = GridSearchCV(
        EnsembleClassifier(budget=2, cv=3, random_state=0), {"budget": [2, 3]}, cv=2
    ).fit(X_wine, labels)
    assert [len(p) for p in budgets.cv_results_["params"]] == [1, 1]
    assert len(budgets.best_estimator_.result_.pool) == budgets.best_params_["budget"]
    assert budgets.predict_proba(X_wine).shape == (len(X_wine), len(np.unique(labels)))
