"""The inference budget: ensembles within limits on prediction time and size."""

import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from ensemble_bo import EnsembleRegressor
from ensemble_bo.api import default_parameters
from ensemble_bo.core.inference_budget import (
    InferenceBudget,
    RefitSizeScale,
    refit_size_scale,
)
from ensemble_bo.core.losses import objective
from ensemble_bo.core.methods import inference_budget
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.preparation import ModelInput, search_input
from ensemble_bo.core.results import EnsembleSearchResult, SearchInterrupted
from ensemble_bo.core.selection.stages import (
    agnostic_bayes_selection,
    bagged_weights,
    posthoc_selection,
)
from ensemble_bo.core.strategies.base import IterationContext, PoolScorer
from ensemble_bo.core.strategies.esmbo import Esmbo
from ensemble_bo.core.strategies.single_best import SingleBest
from ensemble_bo.core.strategies.slots import SlotEnsemble
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import PROJECT, cheap_parameters

Y = np.array([0.0, 0.0, 0.0, 0.0])


LARGE_DATA_START = default_parameters()["large_data_portfolios"]["segor_sklearn"]


def costed_pool(costs, predictions) -> Pool:
    """Trials with (seconds per 1,000 rows, MB) costs and constant predictions."""
    pool = Pool(4)
    for (seconds, mb), value in zip(costs, predictions):
        pool.add(
            {},
            np.array([0.0]),
            TrialResult(
                np.full(4, value),
                0.1,
                predict_seconds_per_1000=seconds,
                model_bytes=mb * 1e6,
            ),
        )
    return pool


def free_and_halved(rows: int, sample_seed: int, budget: int, method="auto"):
    """A search of `rows` concrete rows without limits, and the same search
    with its ensemble's trial-measured prediction time halved as its limit:
    (free, limited, limit)."""
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").sample(
        rows, random_state=sample_seed
    )
    X, y = raw.drop(columns="target"), raw["target"]
    # the search's own ensemble: halving a bagged one's cost would leave the
    # search's slots more than they use
    settings = {"conformal": False, "ensemble": {"weighting": "counts"}}
    free = EnsembleRegressor(
        method=method, budget=budget, random_state=0, params=settings
    ).fit(X, y)
    pool, members = free.result_.pool, list(free.result_.member_weights)
    limit = InferenceBudget().ensemble_cost(pool, members)[0] / 2
    limited = EnsembleRegressor(
        method=method,
        budget=budget,
        random_state=0,
        params={**settings, "inference": {"max_seconds_per_1000_rows": limit}},
    ).fit(X, y)
    return free, limited, limit


def test_a_measured_size_stands_for_its_member_refit_on_every_row():
    # 100 rows in 5 folds: a fold model fits 80, the final model 100
    fold_ids = np.arange(100) % 5
    assert refit_size_scale(fold_ids) == pytest.approx(1.25)
    # a search on a 100-row sample of 1,000 training rows
    assert refit_size_scale(fold_ids, 1000) == pytest.approx(12.5)
    pool = costed_pool([(0.1, 1), (0.2, 2), (0.3, 3)], [1, 1, 1])
    scaled = InferenceBudget(max_model_mb=3.5, size_scale=1.25)
    # 1, 2, 3 MB measured: 1.25, 2.5, 3.75 MB refit; seconds unscaled
    np.testing.assert_allclose(scaled.ensemble_cost(pool, [0, 1]), [0.3, 3.75])
    assert scaled.fits(pool, []).tolist() == [True, True, False]
    # with 0 in, 1 would make 3.75 MB: measured, the two made 3
    assert scaled.fits(pool, [0]).tolist() == [True, False, False]
    assert InferenceBudget(max_model_mb=3.5).fits(pool, [0]).tolist() == [
        True,
        True,
        False,
    ]
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="size_scale must be positive"):
            InferenceBudget(size_scale=bad)


def test_a_search_s_budget_scales_sizes_to_the_rows_it_refits_on():
    sample = search_input(
        ModelInput(
            np.zeros((2000, 1)),
            np.zeros(2000),
            np.arange(2000) % 4,
            "regression",
            {"mean": 0.0, "std": 1.0},
            {"name": "big", "task": "regression", "categorical_columns": []},
        ),
        400,
        seed=0,
    )
    # fold models of the sample fit 300 rows; a forest refits on all 2,000,
    # an SVR on the 400 of the sample (core.row_capped.large_data_refit),
    # histogram boosting for up to 2000 / 400 times its rounds, and an
    # elastic net is as large refit as measured
    budget = inference_budget({"max_model_mb": 10.0}, sample, "segor_sklearn")
    assert budget.max_model_mb == 10.0
    configs = {
        "extra_trees": {"regressor": "extra_trees", "max_features": 0.5,
                        "bootstrap": False, "n_estimators": 100},
        "svr": {"regressor": "svr", "C": 1.0, "gamma": 0.1, "epsilon": 0.1},
        "hist_gradient_boosting": LARGE_DATA_START[0],
        "elastic_net": {"regressor": "elastic_net", "elastic_net__alpha": 0.01,
                        "l1_ratio": 0.5, "elastic_net__max_iter": 1000},
    }  # fmt: skip
    pool = Pool(len(sample.target))
    for config in configs.values():
        pool.add(
            config,
            np.zeros(1),
            TrialResult(
                np.zeros(len(sample.target)),
                0.1,
                predict_seconds_per_1000=0.0,
                model_bytes=1e6,
            ),
        )
    np.testing.assert_allclose(
        budget.costs(pool)[:, 1], [2000 / 300, 400 / 300, 2000 / 400, 1.0]
    )
    # the same model on all its rows (no sample): rows and capped alike, and
    # boosting's rounds as searched
    whole = inference_budget({}, replace(sample, sampled_from=None), "segor_sklearn")
    np.testing.assert_allclose(whole.costs(pool)[:, 1], [400 / 300] * 2 + [1.0] * 2)


def test_an_ensemble_costs_the_sum_of_its_distinct_members():
    pool = costed_pool([(0.1, 1), (0.2, 2), (0.3, 3)], [1, 1, 1])
    budget = InferenceBudget(max_seconds_per_1000_rows=0.35)
    np.testing.assert_allclose(budget.ensemble_cost(pool, [0, 0, 1]), [0.3, 3.0])
    # with trial 0 in: 0 again costs nothing, 1 gives 0.3 <= 0.35, 2 gives 0.4
    assert budget.fits(pool, [0]).tolist() == [True, True, False]
    by_size = InferenceBudget(max_model_mb=3.5)
    assert by_size.fits(pool, [0, 1]).tolist() == [True, True, False]
    assert InferenceBudget().fits(pool, [0, 1, 2]).all()


def test_the_best_candidate_that_fits_is_chosen_and_a_turn_away_counted():
    budget = InferenceBudget(max_model_mb=1.0)
    losses = np.array([0.5, 0.2, np.nan, 0.3])
    fits = np.array([True, False, True, True])
    assert budget.best(losses, fits) == 3 and budget.skipped == 1
    assert budget.best(losses, np.array([True, True, True, True])) == 1
    assert budget.skipped == 1
    assert budget.best(losses, np.zeros(4, dtype=bool)) is None
    assert budget.skipped == 2
    assert budget.metrics() == {"inference_budget_skipped": 2.0}
    assert InferenceBudget().metrics() == {}


@pytest.mark.parametrize("value", [0, -1.0, "1", True, float("inf")])
def test_a_bad_limit_is_refused_naming_it(value):
    with pytest.raises(ValueError, match=rf"inference.max_model_mb={value!r} is not"):
        InferenceBudget(max_model_mb=value)


def test_a_pool_without_measured_costs_is_refused():
    pool = Pool(4)
    pool.add({}, np.array([0.0]), TrialResult(np.zeros(4), 0.1))
    with pytest.raises(ValueError, match=r"trials \[0\] have no measured"):
        InferenceBudget(max_model_mb=1.0).fits(pool, [])


def test_a_slot_takes_the_best_model_the_ensemble_can_afford():
    # Trial 1 predicts the target exactly but costs 0.5 s: over a 0.3 s budget
    # it is turned away, and trial 2 (0.1 s, off by 0.5) takes the slot.
    pool = costed_pool([(0.1, 1), (0.5, 1), (0.1, 1)], [1.0, 0.0, 0.5])
    budget = InferenceBudget(max_seconds_per_1000_rows=0.3)
    slots = SlotEnsemble(
        PoolScorer(Y, np.arange(4) % 2), ensemble_size=2, budget=budget
    )
    context = slots.begin(0, pool)
    targets = slots.targets(context, pool, slice(None), [1.0, 0.0, 0.25])
    update = slots.update(context, pool, targets, [1.0, 0.0, 0.25])
    assert slots.members() == [2] and update.action == "replace"
    assert slots.search_metrics() == {"inference_budget_skipped": 1.0}
    unlimited = SlotEnsemble(PoolScorer(Y, np.arange(4) % 2), ensemble_size=2)
    context = unlimited.begin(0, pool)
    unlimited.update(context, pool, targets, [1.0, 0.0, 0.25])
    assert unlimited.members() == [1]


def test_the_optimizer_is_told_no_better_than_the_ensemble_for_what_cannot_join():
    # Target 0. Slot 0 holds trial 2 (0.5, 0.1 s); trial 1 (exact, 0.5 s)
    # cannot join within 0.3 s: its target L(E[0] <- 1) = 0 is told as
    # L(E) = 0.25. Trial 3 (2.0, 0.5 s) cannot either, and its own target
    # 4.0 is worse than L(E): told as it is. Trial 0 fits: told as it is.
    pool = costed_pool([(0.1, 1), (0.5, 1), (0.1, 1), (0.5, 1)], [1.0, 0.0, 0.5, 2.0])
    scorer = PoolScorer(Y, np.arange(4) % 2)
    slots = SlotEnsemble(
        scorer, ensemble_size=1, budget=InferenceBudget(max_seconds_per_1000_rows=0.3)
    )
    slots._slots = [2]
    context = slots.begin(1, pool)
    told = slots.targets(context, pool, slice(None), [])
    np.testing.assert_allclose(told, [1.0, 0.25, 0.25, 4.0])
    np.testing.assert_allclose(slots.targets(context, pool, slice(1, 2), []), [0.25])
    # the update still sees trial 1's own loss: a turn-away, and slot 0 kept
    slots.update(context, pool, told, [])
    assert slots.members() == [2] and slots.budget.skipped == 1
    free = SlotEnsemble(scorer, ensemble_size=1)
    free._slots = [2]
    raw = free.targets(free.begin(1, pool), pool, slice(None), [])
    np.testing.assert_allclose(raw, [1.0, 0.0, 0.25, 4.0])
    # an empty slot beside slot 0's trial 2: the ensemble as it is, L = 0.25;
    # trial 1 joining would give ((0.5 + 0) / 2)^2 = 0.0625, told 0.25
    two = SlotEnsemble(
        scorer, ensemble_size=2, budget=InferenceBudget(max_seconds_per_1000_rows=0.3)
    )
    two._slots = [2, None]
    told = two.targets(two.begin(1, pool), pool, slice(None), [])
    np.testing.assert_allclose(told, [0.5625, 0.25, 0.25, 1.5625])


def test_single_best_tells_no_better_than_the_held_model_for_what_cannot_be_held():
    pool = costed_pool([(0.1, 1), (0.5, 1), (0.1, 1)], [1.0, 0.0, 0.5])
    best = SingleBest(
        Y, np.arange(4) % 2, budget=InferenceBudget(max_seconds_per_1000_rows=0.3)
    )
    losses = [1.0, 0.0, 0.25]
    context = IterationContext(0, -1, np.full(4, 0.25))
    np.testing.assert_allclose(best.targets(context, pool, slice(None), losses), losses)
    best.update(context, pool, None, losses)
    told = best.targets(context, pool, slice(None), losses)
    np.testing.assert_allclose(told, [1.0, 0.25, 0.25])
    failed = best.targets(context, pool, slice(1, 2), [np.nan])
    assert np.isnan(failed).all()


def test_no_affordable_model_leaves_the_slot_as_it_was():
    pool = costed_pool([(0.5, 1), (0.6, 1)], [1.0, 0.0])
    slots = SlotEnsemble(
        PoolScorer(Y, np.arange(4) % 2),
        ensemble_size=2,
        budget=InferenceBudget(max_seconds_per_1000_rows=0.3),
    )
    context = slots.begin(0, pool)
    targets = slots.targets(context, pool, slice(None), [1.0, 0.0])
    update = slots.update(context, pool, targets, [1.0, 0.0])
    assert update.action == "none" and slots.members() == []


def test_the_single_best_model_is_the_best_that_fits():
    pool = costed_pool([(0.1, 1), (0.5, 1), (0.1, 1)], [1.0, 0.0, 0.5])
    best = SingleBest(Y, np.arange(4) % 2, budget=InferenceBudget(max_model_mb=10))
    best.budget.max_seconds_per_1000_rows = 0.3
    losses = [1.0, 0.0, 0.25]
    update = best.update(IterationContext(0, -1, np.full(4, 0.25)), pool, None, losses)
    assert best.members() == [2] and update.ensemble_loss == 0.25
    assert best.search_metrics() == {"inference_budget_skipped": 1.0}


def test_a_weighted_ensemble_keeps_its_heaviest_members_that_fit():
    pool = costed_pool([(0.2, 1), (0.1, 1), (0.15, 1), (0.05, 1)], [1, 1, 1, 1])
    budget = InferenceBudget(max_seconds_per_1000_rows=0.31)
    # 0 (0.2 s), then 1 (0.3 s in all); 2 would make 0.45 s; 3 would make 0.35 s
    weights = {3: 0.1, 2: 0.2, 1: 0.3, 0: 0.4}
    assert budget.affordable(pool, weights) == [0, 1]
    assert InferenceBudget().affordable(pool, weights) == [0, 1, 2, 3]


def test_a_choice_from_the_whole_pool_counts_the_better_models_it_refused():
    budget = InferenceBudget(max_model_mb=1.0)
    losses = np.array([0.3, 0.1, np.nan, 0.2, 0.5])
    budget.count_refused(losses, [3, 4])  # 1 (0.1) is below both members
    assert budget.skipped == 1
    budget.count_refused(losses, [1])
    assert budget.skipped == 0


def noisy_pool(costs, seed=0, n=40):
    """Trials whose predictions are the target 0 plus noise of growing sd."""
    rng = np.random.default_rng(seed)
    pool = Pool(n)
    for index, (seconds, mb) in enumerate(costs):
        pool.add(
            {},
            np.array([float(index)]),
            TrialResult(
                rng.normal(0.0, 1.0 + 0.05 * index, n),
                0.1,
                predict_seconds_per_1000=seconds,
                model_bytes=mb * 1e6,
            ),
        )
    return pool


def test_an_agnostic_bayes_ensemble_weighs_only_what_fits():
    n = 40
    pool = noisy_pool([(0.2, 1), (0.1, 1), (0.1, 1), (0.1, 1), (0.5, 1)], n=n)
    source = EnsembleSearchResult(
        pool=pool,
        members=[0],
        single_losses=np.nanmean(pool.predictions**2, axis=1),
        target=np.zeros(n),
        objective="mse",
    )
    fold_ids = np.arange(n) % 4
    free = agnostic_bayes_selection(source, np.zeros(n), fold_ids)
    assert len(free.weights) >= 3 and free.search_metrics == {}
    budget = InferenceBudget(max_seconds_per_1000_rows=0.25)
    limited = agnostic_bayes_selection(source, np.zeros(n), fold_ids, budget=budget)
    assert budget.ensemble_cost(pool, list(limited.weights))[0] <= 0.25
    assert sum(limited.weights.values()) == pytest.approx(1.0)
    # trial 4 (0.5 s) never fits; the support that does not fit together is
    # cut; the count: the models left out better than every member
    risks = source.single_losses
    left_out = np.setdiff1d(np.arange(5), list(limited.weights))
    best_member = risks[list(limited.weights)].min()
    assert limited.search_metrics["inference_budget_skipped"] == np.sum(
        risks[left_out] < best_member
    )
    assert limited.history[-1].ensemble_predict_seconds <= 0.25
    # ArgMin: the lowest-risk model is trial 0 (0.2 s); within 0.15 s it is
    # the lowest-risk of trials 1-3
    argmin = agnostic_bayes_selection(
        source,
        np.zeros(n),
        fold_ids,
        posterior="argmin",
        budget=InferenceBudget(max_seconds_per_1000_rows=0.15),
    )
    assert np.argmin(risks) == 0
    assert argmin.weights == {1 + int(np.argmin(risks[1:4])): 1.0}
    with pytest.raises(ValueError, match="fits the inference budget on its own"):
        agnostic_bayes_selection(
            source,
            np.zeros(n),
            fold_ids,
            budget=InferenceBudget(max_seconds_per_1000_rows=0.01),
        )


def test_a_bagged_ensemble_keeps_within_the_budget_what_fits_together():
    n = 40
    pool = noisy_pool([(0.1, 1)] * 6, seed=3, n=n)
    fold_ids = np.arange(n) % 4
    mse = objective("regression", "mse")
    free = bagged_weights(pool, mse, np.zeros(n), fold_ids, seed=0)
    budget = InferenceBudget(max_seconds_per_1000_rows=0.25)
    assert budget.ensemble_cost(pool, list(free))[0] > 0.25  # the bags' union
    limited = bagged_weights(pool, mse, np.zeros(n), fold_ids, 0, budget)
    # each bag takes what fits, and the union keeps its heaviest members that
    # fit together: two of these 0.1 s models, the weights summing to 1 again
    assert len(limited) == 2
    assert budget.ensemble_cost(pool, list(limited))[0] <= 0.25
    assert sum(limited.values()) == pytest.approx(1.0)


def test_esmbo_replicas_choose_among_models_that_fit_together():
    n = 40
    pool = noisy_pool([(0.2, 1), (0.1, 1), (0.1, 1), (0.1, 1)], n=n)
    fold_ids = np.arange(n) % 4
    losses = list(np.mean(pool.predictions**2, axis=1))  # each model's CV MSE
    free = Esmbo(np.zeros(n), fold_ids, n_replicas=20, seed=0)
    context = free.begin(0, pool)
    free.update(context, pool, None, losses)
    assert len(free.weights()) >= 2
    budget = InferenceBudget(max_seconds_per_1000_rows=0.2)
    limited = Esmbo(np.zeros(n), fold_ids, n_replicas=20, seed=0, budget=budget)
    for iteration in range(3):  # the count is of this update, not a running sum
        update = limited.update(limited.begin(iteration, pool), pool, None, losses)
        assert budget.ensemble_cost(pool, list(limited.weights()))[0] <= 0.2
        assert update.action == "select" and np.isfinite(update.ensemble_loss)
        members = list(limited.weights())
        left_out = np.setdiff1d(np.arange(4), members)
        refused = np.sum(np.array(losses)[left_out] < min(losses[i] for i in members))
        assert limited.search_metrics()["inference_budget_skipped"] == refused
    limited.start()
    assert limited.search_metrics()["inference_budget_skipped"] == 0
    nothing = Esmbo(
        np.zeros(n),
        fold_ids,
        seed=0,
        budget=InferenceBudget(max_seconds_per_1000_rows=0.01),
    )
    update = nothing.update(nothing.begin(0, pool), pool, None, losses)
    assert update.action == "none" and nothing.weights() is None


@pytest.mark.parametrize("method", ["esmbo", "ers", "esmbo:replica_winners"])
def test_agnostic_bayes_methods_keep_a_budget_in_a_real_search(method):
    _, limited, limit = free_and_halved(200, 2, 6, method)
    members = list(limited.result_.member_weights)
    assert InferenceBudget().ensemble_cost(limited.result_.pool, members)[0] <= limit
    assert "inference_budget_skipped" in limited.result_.search_metrics


def test_inference_keys_and_values_are_checked():
    with pytest.raises(InvalidInput, match="did you mean 'max_model_mb'"):
        check_settings("segor", cheap_parameters() | {"inference": {"max_model_md": 1}})
    with pytest.raises(InvalidInput, match=r"inference.max_model_mb=-1 is not"):
        check_settings(
            "segor", cheap_parameters() | {"inference": {"max_model_mb": -1}}
        )


def test_a_budgeted_search_never_exceeds_its_limit():
    free, limited, limit = free_and_halved(300, 0, 10)
    budget = InferenceBudget()
    seconds = 2 * limit
    members = list(limited.result_.member_weights)
    assert budget.ensemble_cost(limited.result_.pool, members)[0] <= limit
    # every iteration records what its ensemble costs
    last = free.result_.history[-1]
    assert last.ensemble_predict_seconds == pytest.approx(seconds)
    costs = [r.ensemble_predict_seconds for r in limited.result_.history]
    assert all(c <= limit for c in costs if not np.isnan(c)) and costs[-1] <= limit
    assert limited.result_.search_metrics["inference_budget_skipped"] >= 1


def test_a_bagged_search_keeps_the_limit_its_counted_ensemble_kept():
    free, limited, limit = free_and_halved(300, 0, 10)
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").sample(
        300, random_state=0
    )
    bagged = EnsembleRegressor(
        budget=10,
        random_state=0,
        params={"conformal": False, "inference": {"max_seconds_per_1000_rows": limit}},
    ).fit(raw.drop(columns="target"), raw["target"])
    result = bagged.result_
    assert result.history[-1].action == "bag"
    assert result.pool.configs == limited.result_.pool.configs
    members = list(result.member_weights)
    assert InferenceBudget().ensemble_cost(result.pool, members)[0] <= limit
    assert result.history[-1].ensemble_predict_seconds <= limit


def test_post_hoc_selection_adds_only_what_the_ensemble_can_afford():
    # Target 0; trials predict 1, -1 (0.2 s each) and 0.5 (0.15 s). Free, the
    # selection starts from trial 2 and adds trial 1 (0.35 s together); within
    # 0.3 s neither 0 nor 1 can join trial 2.
    pool = costed_pool([(0.2, 1), (0.2, 1), (0.15, 1)], [1.0, -1.0, 0.5])
    source = EnsembleSearchResult(
        pool=pool,
        members=[2],
        single_losses=np.array([1.0, 1.0, 0.25]),
        target=Y,
        objective="mse",
    )
    free = posthoc_selection(source, Y, np.arange(4) % 2, max_size=4)
    assert set(free.members) == {1, 2} and free.search_metrics == {}
    budget = InferenceBudget(max_seconds_per_1000_rows=0.3)
    limited = posthoc_selection(source, Y, np.arange(4) % 2, max_size=4, budget=budget)
    assert set(limited.members) == {2}
    assert budget.ensemble_cost(pool, limited.members)[0] <= 0.3
    assert limited.search_metrics["inference_budget_skipped"] == 3
    with pytest.raises(ValueError, match="fits the inference budget on its own"):
        posthoc_selection(
            source,
            Y,
            np.arange(4) % 2,
            budget=InferenceBudget(max_seconds_per_1000_rows=0.01),
        )


def test_a_budgeted_ensemble_is_the_better_of_the_search_s_and_a_reselection():
    _, limited, limit = free_and_halved(300, 1, 10)
    limits = {"max_seconds_per_1000_rows": limit}
    result = limited.result_
    metrics = result.search_metrics
    assert metrics["inference_budget_reselected"] in (0.0, 1.0)
    assert (
        InferenceBudget().ensemble_cost(result.pool, list(result.member_weights))[0]
        <= limit
    )
    # the reselection from the same pool: the shipped ensemble (BFGS weights
    # on top) is at least as good on CV as its best kept prefix
    reselected = posthoc_selection(
        result,
        result.target,
        limited.fold_ids_,
        loss="mse",
        budget=InferenceBudget(**limits),
    )
    best = min(r.ensemble_loss for r in reselected.history if r.action == "add")
    assert limited.cv_loss_ <= best + 1e-12


def test_a_budget_no_model_meets_interrupts_the_search_naming_the_cheapest():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(120)
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleRegressor(
        budget=4,
        random_state=0,
        params={"inference": {"max_model_mb": 1e-9}, "conformal": False},
    )
    with pytest.raises(SearchInterrupted, match="no trained model fits the inference"):
        search.fit(X, y)


def test_a_learner_whose_package_is_missing_here_counts_as_growing_with_rows(
    monkeypatch,
):
    # a pool selected again where an optional learner's package is missing;
    # a value may be a list (a categorical choice), which does not hash
    config = {"learning_rate": 0.1, "num_leaves": 31, "min_child_samples": 20,
              "reg_lambda": 0.001, "colsample_bytree": 1.0, "n_estimators": 100,
              "listed": [1, 2]}  # fmt: skip
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import fails
    scale = RefitSizeScale("lightgbm_regressor", rows=3.0, capped=2.0)
    assert scale(config) == 3.0
