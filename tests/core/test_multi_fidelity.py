"""Multi-fidelity searches on the CV folds: promotion by the ensemble objective,
brackets run through the search loop, and the `fidelity` block end to end."""

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo import EnsembleSearch
from ensemble_bo.core.brackets import rung_targets
from ensemble_bo.core.evaluation import out_of_fold_predictions
from ensemble_bo.core.journal import ReplayingRunner, TrialJournal
from ensemble_bo.core.optimizer import GPEIOptimizer, RandomSearch, Suggestion
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import AllTrialsFailed, IterationRecord
from ensemble_bo.core.runners import SerialRunner
from ensemble_bo.core.settings import FidelitySettings
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import Esmbo, Segor, SingleBest
from ensemble_bo.core.time_budget import TimeBudget
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.events import IterationEnded
from tests.support import (
    CHEAP_MODEL,
    cross_validation_evaluator,
    request,
    segor_search,
    single_best_search,
)

RAW = Path(__file__).resolve().parents[2] / "data" / "01_raw"
SPACE = SearchSpace.from_dict({"max_depth": {"type": "int", "low": 1, "high": 6}})
RNG = np.random.default_rng(0)
N = 40
FOLDS = np.arange(N) % 5
Y = RNG.normal(size=N)
ERROR = RNG.normal(size=N)


def candidate(predictions, rows=None):
    """A candidate evaluated on `rows` (all if None): its other rows NaN."""
    predictions = np.where(
        np.ones(N, bool) if rows is None else rows, predictions, np.nan
    )
    return Suggestion({"max_depth": 2}, SPACE.encode({"max_depth": 2})), TrialResult(
        predictions, 0.1
    )


def segor_with_one_member():
    """SEGOR, 2 fixed slots: slot 0 holds a model off by ERROR, slot 1 is next;
    (strategy, the iteration's context, pool)."""
    segor = Segor(Y, FOLDS, ensemble_size=2)
    pool = Pool(N)
    suggestion, result = candidate(Y + ERROR)
    pool.add(suggestion.config, suggestion.encoded, result)
    segor._slots[0] = 0
    return segor, segor.begin(1, pool), pool


def test_a_rung_is_ranked_by_the_ensemble_objective_not_the_single_loss():
    # A repeats the member's error (good alone), B cancels it (poor alone)
    a, b = candidate(Y + 0.9 * ERROR), candidate(Y - 1.2 * ERROR)
    rows = np.isin(FOLDS, [0, 2])  # the folds a rung has evaluated
    segor, context, pool = segor_with_one_member()
    ensemble = rung_targets(segor, context, pool, [a, b], rows)
    # the mean of the member and the candidate, on those rows only (equal folds)
    squared = ERROR[rows] ** 2
    np.testing.assert_allclose(
        ensemble,
        [np.mean((0.95 * ERROR[rows]) ** 2), np.mean((0.1 * ERROR[rows]) ** 2)],
    )
    assert ensemble[1] < ensemble[0]
    single = SingleBest(Y, FOLDS)
    alone = rung_targets(single, single.begin(1, pool), pool, [a, b], rows)
    np.testing.assert_allclose(alone, [0.81 * squared.mean(), 1.44 * squared.mean()])
    assert alone[0] < alone[1]
    # the rows not evaluated do not count, and the search's own weights are kept
    partial = rung_targets(
        segor, context, pool, [candidate(Y - 1.2 * ERROR, rows)], rows
    )
    assert partial[0] == pytest.approx(ensemble[1])
    np.testing.assert_allclose(context.cv_weights, 1 / N)


def test_a_failed_candidate_is_never_promoted():
    segor, context, pool = segor_with_one_member()
    failed = (candidate(Y)[0], TrialResult(None, 0.1, "ValueError: no"))
    objectives = rung_targets(segor, context, pool, [failed, candidate(Y)], FOLDS < 5)
    assert np.isnan(objectives[0]) and np.isfinite(objectives[1])


class Recording:
    """An evaluator that records what each request asked for."""

    def __init__(self, evaluate):
        self.evaluate = evaluate
        self.X = evaluate.cross_validation.X
        self.calls, self.fractions, self.requests = [], [], []

    def __call__(self, request):
        self.calls.append(None if request.folds is None else list(request.folds))
        self.fractions.append(request.train_fraction)
        self.requests.append(request)
        return self.evaluate(request)


def recording_evaluator():
    X = RNG.normal(size=(N, 3))
    y = X[:, 0] + 0.1 * RNG.normal(size=N)
    evaluate = cross_validation_evaluator(
        "decision_tree_regressor", X, y, FOLDS, random_state=0
    )
    return Recording(evaluate), y


def test_hyperband_brackets_run_through_the_search_within_the_budget():
    evaluate, y = recording_evaluator()
    fidelity = FidelitySettings.from_block(
        {"scheduler": "hyperband", "resource": "folds", "min_resource": 1, "eta": 2},
        n_folds=5,
    )
    # brackets (n configs @ folds): 4@1 2@2 1@5 | 3@2 1@5 | 3@5, costing 1.8, 1.8
    # and 3 full-fidelity equivalents with the folds kept; a budget of 10 runs
    # them, then the first again (8.4), and not the second again (10.2)
    search = segor_search(RandomSearch(SPACE, seed=1), evaluate, y, FOLDS, 3)
    result = search.run(10, fidelity=fidelity)
    assert len(result.pool) == 1 + 1 + 3 + 1 and result.pool.ok.all()
    assert np.isfinite(result.pool.member_outputs("predictions")).all()
    fits = [len(folds) for folds in evaluate.calls]
    assert fits == [1] * 4 + [1] * 2 + [3] + [2] * 3 + [3] + [5] * 3 + [1] * 4 + [
        1
    ] * 2 + [3]
    assert sum(fits) / 5 == pytest.approx(8.4)
    # a promoted configuration adds the folds it lacks, in order
    assert evaluate.calls[4:7] == [[1], [1], [2, 3, 4]]
    assert [record.iteration for record in result.history] == list(range(6))
    # spent when each trial joined: after bracket 1, 2, 3 (three trials), 4
    assert [record.fidelity_spent for record in result.history] == pytest.approx(
        [1.8, 3.6, 6.6, 6.6, 6.6, 8.4]
    )
    assert result.search_metrics == {
        "fidelity_full_equivalents": pytest.approx(8.4),
        "fidelity_whole_brackets_equivalents": pytest.approx(8.4),
        "fidelity_configurations": 4 + 3 + 3 + 4,
        "fidelity_brackets": 4,
    }


RAW_CPU = RAW / "cpu_performance.csv"


def fidelity_params(block, scheduler, **fidelity):
    return {
        block: {
            "fidelity": {"scheduler": scheduler, "resource": "folds", **fidelity},
            "optimizer": {"n_initial": 3},
            "time_limit": None,
        },
        "default_models": {"regression": CHEAP_MODEL},
    }


@pytest.mark.parametrize("scheduler", ["successive_halving", "hyperband", "bohb"])
def test_segor_runs_each_scheduler_reproducibly(scheduler):
    raw = pd.read_csv(RAW_CPU)
    X, y = raw.drop(columns="target"), raw["target"]
    params = fidelity_params("segor", scheduler, eta=2)
    runs = [
        EnsembleSearch(method="segor", budget=12, random_state=3, params=params).fit(
            X, y
        )
        for _ in range(2)
    ]
    pool = runs[0].result_.pool
    assert 1 <= len(pool) <= 12 and pool.ok.all()
    assert runs[1].result_.pool.configs == pool.configs
    assert runs[0].members_["weight"].sum() == pytest.approx(1.0)


def test_sego_runs_bohb_on_a_classification_task():
    raw = pd.read_csv(RAW / "wine.csv")
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleSearch(
        method="sego",
        model="decision_tree_classifier",
        budget=10,
        random_state=0,
        params=fidelity_params("sego", "bohb", eta=2),
    ).fit(X, y)
    assert search.result_.pool.ok.all() and set(search.predict(X)) <= set(y)


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        (
            "segor",
            fidelity_params(
                "segor", "hyperband", min_resource=1, resource="iterations"
            ),
            # the default space mixes in families without iterations (trees, kNN)
            "the model 'decision_tree_regressor' has no setting that counts "
            "training iterations for every configuration",
        ),
        (
            "segor",
            {
                **fidelity_params(
                    "segor",
                    "hyperband",
                    min_resource=10,
                    max_resource=50,
                    resource="iterations",
                ),
                "default_models": {"regression": "gradient_boosting_regressor"},
            },
            "max_resource=50 iterations, but the model's n_estimators is 100",
        ),
        (
            "segor",
            {
                **fidelity_params(
                    "segor", "hyperband", min_resource=10, resource="iterations"
                ),
                "default_models": {"regression": "gradient_boosting_regressor"},
                "models": {
                    "gradient_boosting_regressor": {
                        "max_depth": {"type": "int", "low": 1, "high": 3},
                        "n_estimators": {"type": "int", "low": 10, "high": 100},
                    }
                },
            },
            "grows models.gradient_boosting_regressor.n_estimators, which must then "
            "be a constant whole number >= 1",
        ),
        (
            "segor",
            fidelity_params("segor", "hyperband", eta=1),
            "fidelity.eta must be a finite number > 1, got 1",
        ),
    ],
)
def test_what_multi_fidelity_does_not_cover_is_refused_by_name(method, params, message):
    raw = pd.read_csv(RAW_CPU)
    search = EnsembleSearch(method=method, budget=6, random_state=0, params=params)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        search.fit(raw.drop(columns="target"), raw["target"])


def test_esmbo_ranks_a_rung_by_the_replica_risk_on_the_rows_evaluated():
    esmbo = Esmbo(Y, FOLDS, n_replicas=2, seed=4)
    pool = Pool(N)
    context = esmbo.begin(1, pool)
    assert context.slot == 1  # proposing for replica 1
    replicas = esmbo.replica_weights.copy()
    rows = np.isin(FOLDS, [1, 3])
    # the replica's bootstrap weights of the evaluated rows, renormalized
    weights = np.where(rows, replicas[1], 0.0) / replicas[1][rows].sum()
    a, b = candidate(Y + ERROR), candidate(Y + 0.5 * ERROR, rows)
    got = rung_targets(esmbo, context, pool, [a, b], rows)
    np.testing.assert_allclose(
        got, [np.sum(weights * ERROR**2), np.sum(weights * 0.25 * ERROR**2)]
    )
    np.testing.assert_array_equal(esmbo.replica_weights, replicas)
    # replica 0 weighs the same rows otherwise
    context = esmbo.begin(2, pool)
    other = np.where(rows, replicas[0], 0.0) / replicas[0][rows].sum()
    assert rung_targets(esmbo, context, pool, [a], rows)[0] == pytest.approx(
        np.sum(other * ERROR**2)
    )


@pytest.mark.parametrize("method", ["esmbo", "ers"])
def test_esmbo_and_ers_search_with_hyperband_reproducibly(method):
    raw = pd.read_csv(RAW_CPU)
    X, y = raw.drop(columns="target"), raw["target"]
    params = fidelity_params(method, "hyperband", eta=2)
    if method == "ers":
        params[method]["optimizer"] = {"kind": "random"}
    runs = [
        EnsembleSearch(method=method, budget=8, random_state=2, params=params).fit(X, y)
        for _ in range(2)
    ]
    result = runs[0].result_
    assert 1 <= len(result.pool) <= 8 and result.pool.ok.all()
    assert result.search_metrics["fidelity_full_equivalents"] <= 8
    assert result.search_metrics["fidelity_configurations"] > len(result.pool)
    assert runs[1].result_.pool.configs == result.pool.configs
    assert runs[0].members_["weight"].sum() == pytest.approx(1.0)


def test_on_rows_each_rung_refits_on_a_larger_share_of_every_fold():
    evaluate, y = recording_evaluator()
    fidelity = FidelitySettings.from_block(
        {
            "scheduler": "successive_halving",
            "resource": "rows",
            "min_resource": 0.25,
            "eta": 2,
        }
    )
    # one bracket, repeated: 4 configurations on 1/4 of the rows, 2 on 1/2, 1 on all;
    # 1 + 1 + 1 = 3 full-fidelity equivalents each, so a budget of 7 runs two
    result = segor_search(RandomSearch(SPACE, seed=2), evaluate, y, FOLDS, 3).run(
        7, fidelity=fidelity
    )
    assert evaluate.fractions == ([0.25] * 4 + [0.5] * 2 + [1.0]) * 2
    assert evaluate.calls == [None] * 14  # every fold each time
    assert len(result.pool) == 2 and result.pool.ok.all()
    assert result.search_metrics["fidelity_full_equivalents"] == pytest.approx(6.0)


def test_a_share_of_the_rows_is_a_seeded_prefix_so_larger_shares_are_supersets():
    fitted_on = []

    class Recorder(DecisionTreeRegressor):
        def fit(self, X, y):
            fitted_on.append(frozenset(map(tuple, np.round(X, 12))))
            return super().fit(X, y)

    X = RNG.normal(size=(N, 3))
    model = Recorder(max_depth=2, random_state=0)
    for fraction in (0.25, 0.5, 1.0):
        out_of_fold_predictions(
            model, X, X[:, 0], FOLDS, folds=[0], train_fraction=fraction
        )
    quarter, half, whole = fitted_on
    assert (len(quarter), len(half), len(whole)) == (8, 16, 32)
    assert quarter < half < whole
    again = []
    fitted_on.clear()
    out_of_fold_predictions(model, X, X[:, 0], FOLDS, folds=[0], train_fraction=0.25)
    again = fitted_on[0]
    assert again == quarter
    with pytest.raises(
        ValueError, match="train_fraction must be in \\(0, 1\\], got 1.5"
    ):
        out_of_fold_predictions(model, X, X[:, 0], FOLDS, train_fraction=1.5)


HYPERBAND_ON_FOLDS = {"scheduler": "hyperband", "resource": "folds", "eta": 2}


def test_a_resumed_search_replays_its_rung_evaluations_and_ends_the_same(tmp_path):
    fidelity = FidelitySettings.from_block(HYPERBAND_ON_FOLDS, n_folds=5)
    evaluate, y = recording_evaluator()
    journal = TrialJournal(tmp_path / "journal")

    def search(runner):
        return segor_search(RandomSearch(SPACE, seed=1), evaluate, y, FOLDS, 3).run(
            10, fidelity=fidelity, runner=runner
        )

    whole = search(ReplayingRunner(SerialRunner(evaluate), journal))
    evaluations = len(evaluate.calls)
    journal.truncate(9)  # killed after 9 rung evaluations
    evaluate.calls.clear()
    runner = ReplayingRunner(SerialRunner(evaluate), journal)
    resumed = search(runner)
    assert runner.reused == 9 and len(evaluate.calls) == evaluations - 9
    assert resumed.pool.configs == whole.pool.configs
    np.testing.assert_array_equal(
        resumed.pool.member_outputs("predictions"),
        whole.pool.member_outputs("predictions"),
    )
    # a journal from other settings is not replayed: the rung shares differ
    rows = FidelitySettings.from_block(
        {"scheduler": "hyperband", "resource": "rows", "min_resource": 0.25, "eta": 2}
    )
    runner = ReplayingRunner(SerialRunner(evaluate), journal)
    segor_search(RandomSearch(SPACE, seed=1), evaluate, y, FOLDS, 3).run(
        10, fidelity=rows, runner=runner
    )
    assert runner.reused == 0


def test_rungs_train_side_by_side_on_workers_and_give_the_serial_ensemble():
    raw = pd.read_csv(RAW_CPU)
    X, y = raw.drop(columns="target"), raw["target"]
    params = fidelity_params("segor", "hyperband", eta=2)
    serial = EnsembleSearch(method="segor", budget=8, random_state=5, params=params)
    on_workers = EnsembleSearch(
        method="segor",
        budget=8,
        random_state=5,
        params={**params, "parallel": {"backend": "local", "n_workers": 2}},
    )
    serial.fit(X, y), on_workers.fit(X, y)
    assert on_workers.result_.pool.configs == serial.result_.pool.configs
    np.testing.assert_allclose(on_workers.predict(X), serial.predict(X))


def test_each_step_logs_what_a_multi_fidelity_search_had_spent():
    record = IterationRecord(3, 0, 3, "ok", "replace", 0.2, 0.3, 2, 0.1, 0.5)
    assert "fidelity_spent" not in IterationEnded(record).metrics
    spent = replace(record, fidelity_spent=6.6)
    assert IterationEnded(spent).metrics["fidelity_spent"] == 6.6


def test_a_bracket_whose_candidates_all_fail_adds_nothing_and_the_search_goes_on():
    def failing(config, folds=None, train_fraction=1.0):
        return TrialResult(None, 0.0, "ValueError: cannot train")

    fidelity = FidelitySettings.from_block(HYPERBAND_ON_FOLDS, n_folds=5)
    search = segor_search(RandomSearch(SPACE, seed=1), failing, Y, FOLDS, 3)
    with pytest.raises(AllTrialsFailed, match="ValueError: cannot train"):
        search.run(10, fidelity=fidelity)
    # a budget of one bracket, which its first rung's failures end: no trial
    # joined the pool, and the message still says why
    search = segor_search(RandomSearch(SPACE, seed=1), failing, Y, FOLDS, 3)
    with pytest.raises(AllTrialsFailed) as raised:
        search.run(2, fidelity=fidelity)
    assert len(raised.value.result.pool) == 0
    assert raised.value.errors == ["ValueError: cannot train"]
    assert str(raised.value).startswith(
        "no configuration trained at full fidelity (0 reached it, of 4 multi-fidelity "
        "evaluations)"
    )
    assert "cannot train [4 trials]" in str(raised.value)


class SpentAfter(TimeBudget):
    """A time budget spent once `evaluations` (a list) holds `count` calls."""

    def __init__(self, evaluations, count):
        super().__init__(None)
        self.evaluations, self.count = evaluations, count

    def spent(self):
        return len(self.evaluations) >= self.count


def test_a_time_budgeted_search_is_repeated_by_a_budget_of_its_whole_brackets():
    evaluate, y = recording_evaluator()
    fidelity = FidelitySettings.from_block(HYPERBAND_ON_FOLDS, n_folds=5)

    def search():
        return segor_search(RandomSearch(SPACE, seed=1), evaluate, y, FOLDS, 3)

    # brackets of 7, 4, 3, 7 and 4 evaluations: stopped inside the fifth, with
    # 1.8 + 1.8 + 3 + 1.8 spent in whole ones, a sum no integer budget gives
    timed = search().run(
        100, fidelity=fidelity, time_budget=SpentAfter(evaluate.calls, 22)
    )
    spent = timed.search_metrics["fidelity_whole_brackets_equivalents"]
    assert spent == pytest.approx(8.4) and timed.stopped_by == "time_budget"
    assert timed.search_metrics["fidelity_full_equivalents"] > spent
    again = search().run(spent, fidelity=fidelity)
    assert again.stopped_by == "budget"
    assert again.pool.configs == timed.pool.configs
    np.testing.assert_array_equal(
        again.pool.member_outputs("predictions"),
        timed.pool.member_outputs("predictions"),
    )
    with pytest.raises(ValueError, match="budget must be a positive integer"):
        search().run(8.4)  # a fractional budget needs a fidelity schedule


def test_a_time_budget_spent_inside_a_bracket_ends_the_search_before_its_next_rung():
    fidelity = FidelitySettings.from_block(HYPERBAND_ON_FOLDS, n_folds=5)
    evaluate, y = recording_evaluator()
    # bracket 1 (4@1, 2@2, 1@5) takes 7 evaluations, bracket 2's first rung 3 more:
    # spent by then, its last rung is not asked for (each would be cut at once)
    clock = SpentAfter(evaluate.calls, 9)
    result = segor_search(RandomSearch(SPACE, seed=1), evaluate, y, FOLDS, 3).run(
        10, fidelity=fidelity, time_budget=clock
    )
    assert len(evaluate.calls) == 10 and len(result.pool) == 1
    assert result.stopped_by == "time_budget"


BOOSTING = SearchSpace.from_dict(
    {
        "max_depth": {"type": "int", "low": 1, "high": 3},
        "n_estimators": {"type": "constant", "value": 8},
    }
)


def test_on_iterations_each_rung_refits_with_more_stages_and_the_pool_holds_the_space():
    X = RNG.normal(size=(N, 3))
    y = X[:, 0] + 0.1 * RNG.normal(size=N)
    stages = []
    boosting = cross_validation_evaluator(
        "gradient_boosting_regressor", X, y, FOLDS, random_state=0
    )

    def evaluate(request):
        stages.append(request.config["n_estimators"])
        # all rows, all folds
        assert request.folds is None and request.train_fraction == 1.0
        return boosting(request)

    fidelity = FidelitySettings.from_block(
        {
            "scheduler": "successive_halving",
            "resource": "iterations",
            "min_resource": 2,
            "eta": 2,
        },
        iteration_setting=("n_estimators", 8),
    )
    assert fidelity.max_resource == 8 and fidelity.iteration_setting == "n_estimators"
    # one bracket, repeated: 4 configurations with 2 stages, 2 with 4, 1 with all 8;
    # 1 + 1 + 1 = 3 full-fidelity equivalents each, so a budget of 7 runs two
    result = segor_search(RandomSearch(BOOSTING, seed=2), evaluate, y, FOLDS, 3).run(
        7, fidelity=fidelity
    )
    assert stages == ([2] * 4 + [4] * 2 + [8]) * 2
    assert len(result.pool) == 2 and result.pool.ok.all()
    assert [config["n_estimators"] for config in result.pool.configs] == [8, 8]
    assert result.search_metrics["fidelity_full_equivalents"] == pytest.approx(6.0)
    # the pool's predictions are those of the space's configuration itself
    full = boosting(request(result.pool.configs[0]))
    np.testing.assert_array_equal(
        result.pool.member_outputs("predictions")[0], full.oof_predictions
    )


def test_segor_searches_a_boosting_space_on_iterations_end_to_end():
    raw = pd.read_csv(RAW_CPU)
    X, y = raw.drop(columns="target"), raw["target"]
    params = {
        **fidelity_params(
            "segor", "hyperband", resource="iterations", min_resource=4, eta=3
        ),
        "default_models": {"regression": "gradient_boosting_regressor"},
    }
    params["models"] = {
        "gradient_boosting_regressor": {
            "max_depth": {"type": "int", "low": 1, "high": 4},
            "learning_rate": {"type": "float", "low": 0.05, "high": 0.5, "log": True},
            "loss": {"type": "constant", "value": "squared_error"},
            "n_estimators": {"type": "constant", "value": 36},
        }
    }
    search = EnsembleSearch(method="segor", budget=6, random_state=1, params=params)
    search.fit(X, y)
    pool = search.result_.pool
    assert len(pool) >= 1 and pool.ok.all()
    assert {config["n_estimators"] for config in pool.configs} == {36}
    assert search.result_.search_metrics["fidelity_full_equivalents"] <= 6


def test_bohb_models_the_largest_resource_with_enough_evaluations():
    evaluate, y = recording_evaluator()
    told = []

    class Spied(RandomSearch):
        def told_only(self, X, values, seconds=None):
            told.append((X, values, seconds))
            return super().told_only(X, values, seconds)

    fidelity = FidelitySettings.from_block(
        {"scheduler": "bohb", "resource": "folds", "eta": 2}, n_folds=5
    )
    # brackets 4@1 2@2 1@5 | 3@2 1@5 | 3@5 (dim 1: a model needs 1 + 1 + 2 points).
    # Bracket 2 is proposed from the 4 one-fold evaluations of bracket 1, bracket 3
    # from the 5 two-fold ones of brackets 1 and 2; the pool never has 4 trials.
    search = single_best_search(Spied(SPACE, seed=1), evaluate, y, FOLDS)
    result = search.run(7, fidelity=fidelity)
    assert len(result.pool) == 5
    assert [len(values) for _, values, _ in told] == [4, 5]
    # with the seconds each of those evaluations took (EI per second's cost)
    for _, values, seconds in told:
        assert np.shape(seconds) == np.shape(values) and np.all(seconds > 0)
    first_rung = evaluate.calls[:4]
    assert first_rung == [[0]] * 4
    # each told value: the configuration's own loss on the folds it had evaluated
    X, values, _ = told[0]
    for point, value in zip(X, values, strict=True):
        config = SPACE.decode(point)
        alone = cross_validation_evaluator(
            "decision_tree_regressor", evaluate.X, y, FOLDS, random_state=0
        )(request(config, folds=[0]))
        rows = FOLDS == 0
        assert value == pytest.approx(
            np.mean((alone.oof_predictions[rows] - y[rows]) ** 2)
        )


def test_the_first_bracket_is_never_cut_by_the_time_budget_and_is_recorded():
    X = RNG.normal(size=(N, 3))
    y = X[:, 0] + 0.1 * RNG.normal(size=N)
    clock = TimeBudget(1e-3)  # spent before the first rung ends
    limited = cross_validation_evaluator(
        "decision_tree_regressor", X, y, FOLDS, random_state=0, time_limit=60
    )
    evaluate = Recording(limited)
    fidelity = FidelitySettings.from_block(HYPERBAND_ON_FOLDS, n_folds=5)
    clock.start()
    try:
        result = segor_search(RandomSearch(SPACE, seed=1), evaluate, y, FOLDS, 3).run(
            10, fidelity=fidelity, time_budget=clock
        )
    finally:
        limited.close()
    # bracket 1 (4@1 2@2 1@5) runs whole, without cuts: none of its requests
    # carries the budget as a deadline; bracket 2 never starts
    assert result.stopped_by == "time_budget"
    assert [r.deadline for r in evaluate.requests] == [None] * 7
    assert len(result.pool) == 1 and result.pool.ok.all()
    records = result.rung_evaluations
    assert [(r.bracket, r.rung, r.resource) for r in records] == (
        [(0, 0, 1.0)] * 4 + [(0, 1, 2.0)] * 2 + [(0, 2, 5.0)]
    )
    assert all(r.status == "ok" and not r.error for r in records)
    assert [r.promoted for r in records].count(True) == 3
    assert [r.trial for r in records] == [-1] * 6 + [0]
    # the promoted are the best ranked of their rung
    for rung in (0, 1):
        ranked = [r for r in records if r.rung == rung]
        best = min(r.objective for r in ranked if not r.promoted)
        assert all(r.objective <= best for r in ranked if r.promoted)
    assert result.pool.configs[0] == records[-1].config


TREE_SPACE = SearchSpace.from_dict(
    {
        "max_depth": {"type": "int", "low": 1, "high": 6},
        "max_features": {"type": "float", "low": 0.1, "high": 1.0},
    }
)
BOHB_ON_FOLDS = {"scheduler": "bohb", "resource": "folds", "eta": 2}


def bohb_asks(optimizer_class):
    """A subclass of `optimizer_class` recording each ask_batch of its copies:
    (whether the copy was told the pool, that is full fidelity, the batch)."""
    asks = []

    class Recorded(optimizer_class):
        on_pool = None

        def told_only(self, X, values, seconds=None):
            copied = super().told_only(X, values, seconds)
            copied.on_pool = np.array_equal(X, self.X)
            return copied

        def ask_batch(self, size, pending=()):
            batch = super().ask_batch(size, pending)
            asks.append((self.on_pool, batch))
            return batch

    return Recorded, asks


def test_bohb_proposes_from_its_model_on_full_fidelity_not_from_the_gp_design():
    evaluate, y = recording_evaluator()
    Recorded, asks = bohb_asks(GPEIOptimizer)
    fidelity = FidelitySettings.from_block(BOHB_ON_FOLDS, n_folds=5)
    optimizer = Recorded(TREE_SPACE, seed=3, n_initial=10)
    # cycles of brackets 4@1 2@2 1@5 | 3@2 1@5 | 3@5 (6.6 full-fidelity
    # equivalents, 5 trials): 3 cycles and 2 brackets of a fourth in 25
    result = segor_search(optimizer, evaluate, y, FOLDS, 3).run(25, fidelity=fidelity)
    assert {on_pool for on_pool, _ in asks} == {True, False}  # both kinds of model
    # every BOHB proposal is the GP's (an EI value), none a Sobol design point
    assert all(
        np.isfinite(suggestion.acquisition_value)
        for _, batch in asks
        for suggestion in batch
    )
    assert optimizer._initial_asked == 0 and len(result.pool) == 17


def test_bohb_draws_anew_in_each_bracket():
    evaluate, y = recording_evaluator()
    Recorded, asks = bohb_asks(RandomSearch)
    fidelity = FidelitySettings.from_block(BOHB_ON_FOLDS, n_folds=5)
    segor_search(Recorded(TREE_SPACE, seed=3), evaluate, y, FOLDS, 3).run(
        25, fidelity=fidelity
    )
    firsts = [batch[0].config for _, batch in asks]
    assert len(firsts) >= 4
    assert all(a != b for a, b in itertools.combinations(firsts, 2))


def test_a_multi_fidelity_search_whose_every_evaluation_fails_stops_early():
    def failing(config, folds=None, train_fraction=1.0):
        return TrialResult(None, 0.0, "ValueError: cannot train")

    fidelity = FidelitySettings.from_block(
        {"scheduler": "successive_halving", "resource": "folds", "eta": 2}, n_folds=5
    )
    search = segor_search(RandomSearch(SPACE, seed=1), failing, Y, FOLDS, 3)
    with pytest.raises(AllTrialsFailed) as raised:
        search.run(100, fidelity=fidelity, max_initial_failures=10)
    # each bracket ends at its first rung of 4: 12 evaluations reach 10 failures
    assert len(raised.value.result.rung_evaluations) == 12
