from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import GroupKFold

from ensemble_bo.api import EnsembleSearch, default_parameters
from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.revalidation import (
    fresh_fold_ids,
    repeated_split_selection,
    revalidation_candidates,
)
from ensemble_bo.core.settings import InvalidInput
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import check_settings
from tests.support import CHEAP_MODEL

RAW = Path(__file__).parents[2] / "data" / "01_raw"
# Six rows in three folds of two; three regression models.
Y = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
SEARCH_FOLDS = np.array([0, 0, 1, 1, 2, 2])
FRESH_FOLDS = np.array([2, 1, 0, 2, 1, 0])
# Out-of-fold predictions on the search's split: model 0 looks best there.
SEARCH_PREDICTIONS = np.array(
    [
        Y + 0.1,  # squared error 0.01 on every row
        Y + 0.3,  # 0.09
        Y + np.array([0.2, -0.2, 0.2, -0.2, 0.2, -0.2]),  # 0.04
    ]
)
# On a fresh split of the same rows model 0 is far off, model 2 as before.
FRESH_PREDICTIONS = np.array([Y + 1.0, Y + 0.3, Y - 0.2])


def regression_search(predictions=SEARCH_PREDICTIONS, members=(0,), megabytes=None):
    pool = Pool(len(Y))
    for i, row in enumerate(predictions):
        costs = {}
        if megabytes is not None:
            costs = {
                "predict_seconds_per_1000": 0.01,
                "model_bytes": megabytes[i] * 2**20,
            }
        pool.add({"i": i}, np.array([float(i)]), TrialResult(row, 1.0, **costs))
    singles = np.mean((predictions - Y) ** 2, axis=1)
    result = EnsembleSearchResult(
        pool, list(members), singles, target=Y, model_name="ridge"
    )
    data = ModelInput(Y.reshape(-1, 1), Y, SEARCH_FOLDS, "regression", {}, {})
    return result, data


def fresh(rows, failed=()):
    return [
        TrialResult(None, 0.5, "ValueError: cut")
        if i in failed
        else TrialResult(row, 0.5)
        for i, row in enumerate(rows)
    ]


def best_single_over_the_splits(search, budget=None):
    """One greedy step, no warm start, over the three models and one fresh split."""
    result, data = search
    return repeated_split_selection(
        result,
        data,
        [0, 1, 2],
        [FRESH_FOLDS],
        fresh(FRESH_PREDICTIONS),
        max_size=1,
        warm_start=0,
        budget=budget,
    )


def test_one_member_is_the_model_with_the_lowest_mean_loss_over_the_splits():
    # mean squared errors by hand: model 0 (0.01 + 1.0) / 2, model 1 0.09,
    # model 2 0.04: model 2, which the search's split alone ranks second
    selected = best_single_over_the_splits(regression_search())
    assert selected.members == [2]
    assert selected.history[-1].ensemble_loss == pytest.approx(0.04)
    assert selected.history[-1].trial == 2
    assert selected.search_metrics == {
        "revalidation_splits": 1.0,
        "revalidated_configurations": 3.0,
    }


def test_the_selection_loss_is_the_mean_of_the_splits_losses_not_of_averaged_predictions():
    result, data = regression_search()
    # models 0 and 1 together: on the search's split their mean predicts
    # Y + 0.2 (0.04); on the fresh one Y + 0.65 (0.4225): mean 0.23125.
    # Averaging each model's predictions over the splits first would give
    # Y + 0.425 and 0.180625 instead.
    both = repeated_split_selection(
        result,
        data,
        [0, 1],
        [FRESH_FOLDS],
        fresh(FRESH_PREDICTIONS[:2]),
        max_size=2,
        warm_start=2,
    )
    assert sorted(both.members) == [0, 1]
    assert both.history[1].ensemble_loss == pytest.approx((0.04 + 0.4225) / 2)


def test_members_are_indices_of_the_search_pool_and_a_model_failing_a_split_is_left_out():
    result, data = regression_search()
    selected = repeated_split_selection(
        result,
        data,
        [2, 1],  # pool indices, in the order their fresh results come
        [FRESH_FOLDS],
        fresh(FRESH_PREDICTIONS[[2, 1]], failed=(0,)),
        max_size=3,
        warm_start=0,
    )
    assert set(selected.members) == {1}
    assert selected.pool is result.pool
    assert selected.search_metrics["revalidated_configurations"] == 1.0
    with pytest.raises(ValueError, match="every split"):
        repeated_split_selection(
            result, data, [2], [FRESH_FOLDS], fresh(FRESH_PREDICTIONS[[2]], (0,))
        )


def test_the_selection_keeps_to_an_inference_budget():
    # model 2, the best over the splits, is 5 MB against a 3 MB budget
    selected = best_single_over_the_splits(
        regression_search(megabytes=[1.0, 1.0, 5.0]),
        InferenceBudget(max_model_mb=3.0),
    )
    assert selected.members == [1]
    assert selected.search_metrics["inference_budget_skipped"] == 1.0


def test_candidates_are_the_best_singles_then_the_members():
    result, _ = regression_search(SEARCH_PREDICTIONS, members=(1, 1, 0))
    assert revalidation_candidates(result, 1) == [0, 1]
    assert revalidation_candidates(result, 2) == [0, 2, 1]
    pool = Pool(len(Y))
    for i in range(4):
        trial = (
            TrialResult(SEARCH_PREDICTIONS[i], 1.0)
            if i < 3
            else TrialResult(None, 1.0, "failed")
        )
        pool.add({"i": i}, np.array([float(i)]), trial)
    with_failure = EnsembleSearchResult(
        pool, [0], np.array([0.01, 0.09, 0.04, np.nan]), target=Y
    )
    assert revalidation_candidates(with_failure, 10) == [0, 2, 1]


def test_fresh_splits_have_the_searchs_number_of_folds_are_seeded_and_stratified():
    labels = np.array([0] * 30 + [1] * 10)
    data = ModelInput(
        np.zeros((40, 1)), labels, np.arange(40) % 5, "classification", {}, {}
    )
    splits = fresh_fold_ids(data, 2, seed=7)
    assert len(splits) == 2
    for ids in splits:
        assert sorted(np.unique(ids)) == [0, 1, 2, 3, 4]
        # stratified: each fold holds 6 of class 0 and 2 of class 1
        for fold in range(5):
            assert np.bincount(labels[ids == fold]).tolist() == [6, 2]
    assert not np.array_equal(splits[0], splits[1])
    assert not np.array_equal(splits[0], data.fold_ids)
    again = fresh_fold_ids(data, 2, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(splits, again, strict=True))


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ({"repeats": -1}, "revalidation.repeats=-1"),
        ({"repeats": 1.5}, "revalidation.repeats=1.5"),
        ({"candidates": 0}, "revalidation.candidates=0"),
        ({"time_share": 1.0}, "revalidation.time_share=1.0"),
        ({"time_share": "half"}, "revalidation.time_share='half'"),
        ({"repeat": 2}, "did you mean"),
    ],
)
def test_bad_revalidation_settings_are_refused_by_name(block, named):
    parameters = default_parameters()
    parameters["revalidation"] = {**parameters["revalidation"], **block}
    with pytest.raises(InvalidInput, match=named.replace("(", r"\(")):
        check_settings("segor", parameters, 0, "regression")


@pytest.fixture(scope="module")
def concrete():
    raw = pd.read_csv(RAW / "concrete.csv").sample(300, random_state=0)
    return raw.drop(columns="target"), raw["target"]


def fit(X, y, repeats, **kwargs):
    return EnsembleSearch(
        model=CHEAP_MODEL,
        budget=8,
        random_state=3,
        params={
            "revalidation": {"repeats": repeats, "candidates": 4},
            "conformal": False,
        },
        **kwargs,
    ).fit(X, y)


def test_a_revalidated_search_chooses_among_its_best_and_is_reproducible(concrete):
    X, y = concrete
    plain = fit(X, y, 0)
    first = fit(X, y, 2)
    again = fit(X, y, 2)
    metrics = first.result_.search_metrics
    assert metrics["revalidation_splits"] == 2.0
    assert 4 <= metrics["revalidated_configurations"] <= 8
    # the same trials as the plain search, chosen among its best
    assert first.result_.pool.configs == plain.result_.pool.configs
    candidates = revalidation_candidates(plain.result_, 4)
    assert set(first.result_.members) <= set(candidates)
    # the default bagged weighting chose the plain search's ensemble again
    # from its pool, and leaves the one re-validation chose as it is
    assert plain.result_.history[-1].action == "bag"
    assert first.result_.history[-1].action != "bag"
    assert first.result_.member_weights == again.result_.member_weights
    assert first.predict(X.head(20)).tolist() == again.predict(X.head(20)).tolist()


def test_a_splitter_s_folds_are_not_redrawn(concrete):
    X, y = concrete
    groups = np.arange(len(y)) % 10
    search = EnsembleSearch(
        model=CHEAP_MODEL,
        budget=8,
        random_state=3,
        cv=GroupKFold(5),
        params={"revalidation": {"repeats": 2}, "conformal": False},
    ).fit(X, y, groups=groups)
    assert "revalidation_splits" not in search.result_.search_metrics
    assert search.result_.pool.configs  # the search itself ran
