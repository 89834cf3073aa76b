import multiprocessing
import os
import pickle
import re
import time
import warnings

import cloudpickle
import numpy as np
import pytest
from joblib.externals.loky import process_executor
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import PredefinedSplit, cross_val_predict
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.core.evaluation import (
    merge_fold_results,
    pickled_bytes,
)
from ensemble_bo.core.runners import trial_runner
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.time_budget import TimeBudget
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.zoo import make_model
from tests.support import cross_validation_evaluator, request

RNG = np.random.default_rng(0)
X = RNG.normal(size=(50, 3))
Y = X[:, 0] + 0.1 * RNG.normal(size=50)
FOLDS = np.arange(50) % 5


def test_out_of_fold_predictions_equal_manual_cross_validation():
    result = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, FOLDS, random_state=3
    )(request({"max_depth": 3}))
    assert result.ok and result.fit_seconds > 0
    expected = np.empty(50)
    for k in range(5):
        train, test = FOLDS != k, FOLDS == k
        model = DecisionTreeRegressor(max_depth=3, random_state=3).fit(
            X[train], Y[train]
        )
        expected[test] = model.predict(X[test])
    np.testing.assert_array_equal(result.oof_predictions, expected)


@pytest.mark.parametrize("time_limit", [None, 60])
def test_some_folds_now_and_the_rest_later_equal_every_fold_at_once(time_limit):
    # multi-fidelity: a promoted configuration adds folds to those it has
    evaluate = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, FOLDS, random_state=3, time_limit=time_limit
    )
    try:
        whole = evaluate(request({"max_depth": 3}))
        first = evaluate(request({"max_depth": 3}, folds=[1, 3]))
        rest = evaluate(request({"max_depth": 3}, folds=[0, 2, 4]))
    finally:
        evaluate.close()
    on_first = np.isin(FOLDS, [1, 3])
    np.testing.assert_array_equal(
        first.oof_predictions[on_first], whole.oof_predictions[on_first]
    )
    assert np.isnan(first.oof_predictions[~on_first]).all()
    merged = merge_fold_results(first, rest)
    np.testing.assert_array_equal(merged.oof_predictions, whole.oof_predictions)
    assert merged.fit_seconds == first.fit_seconds + rest.fit_seconds


def test_a_classifier_s_probabilities_merge_over_folds_too():
    labels = (Y > 0).astype(int)
    evaluate = cross_validation_evaluator("decision_tree_classifier", X, labels, FOLDS)
    whole = evaluate(request({"max_depth": 2}))
    merged = merge_fold_results(
        evaluate(request({"max_depth": 2}, folds=[0])),
        evaluate(request({"max_depth": 2}, folds=[1, 2, 3, 4])),
    )
    np.testing.assert_array_equal(merged.oof_predictions, whole.oof_predictions)
    np.testing.assert_array_equal(merged.oof_probabilities, whole.oof_probabilities)


def test_a_failed_part_fails_the_merged_trial_and_unknown_folds_are_named():
    evaluate = cross_validation_evaluator("decision_tree_regressor", X, Y, FOLDS)
    good = evaluate(request({"max_depth": 3}, folds=[0]))
    bad = evaluate(request({"max_depth": -2}, folds=[1]))
    assert not merge_fold_results(good, bad).ok and not merge_fold_results(bad, good).ok
    unknown = evaluate(request({"max_depth": 3}, folds=[0, 7]))
    assert (
        not unknown.ok
        and "folds [7] are not among the folds [0, 1, 2, 3, 4]" in unknown.error
    )


def test_repeated_cross_validation_lays_each_split_s_outputs_side_by_side():
    # not separable by one feature: the fold models' leaves differ by split
    labels = (X[:, 1] + Y > 0).astype(int)
    assignments = np.stack([FOLDS, np.random.default_rng(1).permutation(FOLDS)])
    repeated = cross_validation_evaluator(
        "decision_tree_classifier", X, labels, assignments, random_state=3
    )(request({"max_depth": 2}))
    each = [
        cross_validation_evaluator(
            "decision_tree_classifier", X, labels, folds, random_state=3
        )(request({"max_depth": 2}))
        for folds in assignments
    ]
    assert repeated.oof_predictions.shape == (100,)
    assert repeated.oof_probabilities.shape == (100, 2)
    np.testing.assert_array_equal(
        repeated.oof_predictions, np.concatenate([t.oof_predictions for t in each])
    )
    np.testing.assert_array_equal(
        repeated.oof_probabilities,
        np.concatenate([t.oof_probabilities for t in each]),
    )
    # other folds, other fold models: the halves are two evaluations, not one
    assert not np.array_equal(
        repeated.oof_probabilities[:50], each[1].oof_probabilities
    )
    assert repeated.model_bytes == each[0].model_bytes


def test_repeated_cross_validation_in_a_worker_process_gives_the_same_outputs():
    assignments = np.stack([FOLDS, FOLDS[::-1]])
    evaluate = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, assignments, random_state=3, time_limit=60
    )
    try:
        in_worker = evaluate(request({"max_depth": 3}))
    finally:
        evaluate.close()
    here = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, assignments, random_state=3
    )(request({"max_depth": 3}))
    np.testing.assert_array_equal(in_worker.oof_predictions, here.oof_predictions)


FIT_ROWS = []


class NeedsTwentyRows(RegressorMixin, BaseEstimator):
    """Predicts the mean; fails to fit on fewer than 20 rows."""

    def fit(self, X, y):
        FIT_ROWS.append(len(X))
        if len(X) < 20:
            raise ValueError(f"only {len(X)} rows")
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_)


def test_repeated_cross_validation_fails_with_a_failing_split_and_stops_there():
    # fold 0 holds 40 of the 50 rows: its models train on 10 and fail
    lopsided = np.where(np.arange(50) < 40, 0, np.arange(50) % 4 + 1)

    def evaluate(assignments):
        FIT_ROWS.clear()
        return cross_validation_evaluator(
            "mean",
            X,
            Y,
            np.stack(assignments),
            model_factory=lambda name, config, seed: NeedsTwentyRows(),
        )(request({}))

    second_fails = evaluate([FOLDS, lopsided])
    assert not second_fails.ok and second_fails.oof_predictions is None
    assert second_fails.error == "ValueError: only 10 rows"
    assert FIT_ROWS == [40, 40, 40, 40, 40, 10]
    first_fails = evaluate([lopsided, FOLDS])
    assert not first_fails.ok
    assert FIT_ROWS == [10]  # the other split never ran
    assert evaluate([FOLDS, FOLDS]).oof_predictions.shape == (100,)


def test_a_model_that_fails_to_train_is_a_failed_trial():
    result = cross_validation_evaluator("decision_tree_regressor", X, Y, FOLDS)(
        request({"max_depth": -2})
    )
    assert not result.ok and result.oof_predictions is None
    assert "max_depth" in result.error and result.error.startswith(
        "InvalidParameterError"
    )


def test_unknown_algorithm_is_an_error_before_any_training():
    with pytest.raises(
        ValueError,
        match="unknown model 'boosted_tree'; available: \\[.*'decision_tree_regressor'",
    ):
        cross_validation_evaluator("boosted_tree", X, Y, FOLDS)


# --- time limit -------------------------------------------------------------
# With a time limit the models are built in a worker process, where a
# monkeypatched zoo would not be seen; so test models come through the
# evaluator's `model_factory` seam, from this (importable) module. Starting a
# worker imports scikit-learn (seconds), so the tests share one evaluator.


class _ProbeRegressor(RegressorMixin, BaseEstimator):
    """Test model: sleeps, raises, exits or reports its process id when fitted."""

    def __init__(self, probe="pid", seconds=0.0):
        self.probe = probe
        self.seconds = seconds

    def fit(self, X, y):
        if self.probe == "sleep":
            time.sleep(self.seconds)
        elif self.probe == "raise":
            raise RuntimeError("the probe refused to fit")
        elif self.probe == "exit":
            os._exit(3)
        return self

    def predict(self, X):
        return np.full(len(X), float(os.getpid()))


def _probe_factory(model_name, config, random_state):
    if "probe" in config:
        return _ProbeRegressor(**config)
    return make_model(model_name, config, random_state)


# The shared evaluator's limit: well above a probe's fit, which a loaded machine
# (tests in parallel beside other work) stretched past 1 s, and short enough
# that the tests that sleep past it stay quick.
LIMIT = 3.0


@pytest.fixture(scope="module")
def limited():
    evaluate = cross_validation_evaluator(
        "decision_tree_regressor",
        X,
        Y,
        FOLDS,
        random_state=7,
        time_limit=LIMIT,
        model_factory=_probe_factory,
    )
    yield evaluate
    evaluate.close()


def _worker_pid(evaluate):
    result = evaluate(request({"probe": "pid"}))
    assert result.ok, result.error
    return int(result.oof_predictions[0])


def test_a_fit_past_the_time_limit_is_a_failed_trial_and_the_next_one_runs(limited):
    first_worker = _worker_pid(limited)
    assert first_worker != os.getpid()
    assert _worker_pid(limited) == first_worker  # the worker is reused

    result = limited(request({"probe": "sleep", "seconds": 60.0}))
    assert not result.ok and result.oof_predictions is None
    assert result.error == f"TimeoutError: fit exceeded the time limit of {LIMIT:g} s"
    assert LIMIT <= result.fit_seconds < LIMIT + 10.0

    assert _worker_pid(limited) not in (first_worker, os.getpid())
    assert limited(request({"probe": "sleep", "seconds": 0.01})).ok


def test_a_fit_collected_after_its_limit_is_cut_though_it_ended_in_time(
    monkeypatch,
):
    evaluate = cross_validation_evaluator(
        "decision_tree_regressor",
        X,
        Y,
        FOLDS,
        random_state=7,
        time_limit=0.5,
        model_factory=_probe_factory,
    )
    try:
        _worker_pid(evaluate)  # the worker is up
        executor = evaluate._executor
        submit = executor.submit

        def held_submit(*args, **kwargs):
            future = submit(*args, **kwargs)
            future.result()  # the fit ends in the worker...
            time.sleep(0.6)  # ...while this thread is held past the limit
            return future

        monkeypatch.setattr(executor, "submit", held_submit)
        result = evaluate(request({"probe": "sleep", "seconds": 0.01}))
        assert result.error == "TimeoutError: fit exceeded the time limit of 0.5 s"
        assert result.fit_seconds >= 0.5
    finally:
        evaluate.close()


def test_the_time_limit_leaves_the_predictions_unchanged(limited):
    in_process = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, FOLDS, random_state=7
    )
    config = {"max_depth": 4, "min_samples_leaf": 2, "max_features": 0.5}
    expected, result = in_process(request(config)), limited(request(config))
    assert expected.ok and result.ok
    np.testing.assert_array_equal(result.oof_predictions, expected.oof_predictions)
    assert (
        limited(request({"max_depth": -2})).error
        == in_process(request({"max_depth": -2})).error
    )


def test_an_exception_in_the_worker_is_a_failed_trial_with_its_text(limited):
    result = limited(request({"probe": "raise"}))
    assert not result.ok and result.oof_predictions is None
    assert result.error == "RuntimeError: the probe refused to fit"
    assert _worker_pid(limited) != os.getpid()


def test_a_worker_that_dies_is_a_failed_trial_and_the_next_one_runs(limited):
    result = limited(request({"probe": "exit"}))
    assert not result.ok and result.oof_predictions is None
    assert result.error.startswith("TerminatedWorkerError")
    assert _worker_pid(limited) != os.getpid()


def _limited_on(X, y, fold_ids):
    return cross_validation_evaluator(
        "decision_tree_regressor",
        X,
        y,
        fold_ids,
        random_state=7,
        time_limit=LIMIT,
        model_factory=_probe_factory,
    )


def test_a_released_worker_serves_the_next_evaluator_with_its_own_data(limited):
    first = _limited_on(X, Y, FOLDS)
    worker = _worker_pid(first)
    first.release()

    # Other data (a 3-fold split of half the rows): the parked worker gets them.
    half = len(X) // 2
    second = _limited_on(X[:half], Y[:half], np.arange(half) % 3)
    assert _worker_pid(second) == worker
    in_process = cross_validation_evaluator(
        "decision_tree_regressor", X[:half], Y[:half], np.arange(half) % 3, 7
    )
    config = {"max_depth": 3}
    np.testing.assert_array_equal(
        second(request(config)).oof_predictions,
        in_process(request(config)).oof_predictions,
    )
    second.close()  # killed, not parked: the next evaluator starts a worker
    third = _limited_on(X, Y, FOLDS)
    assert _worker_pid(third) not in (worker, os.getpid())
    third.close()


def test_a_serial_search_leaves_its_worker_to_the_next_search(limited):
    first = _limited_on(X, Y, FOLDS)
    with trial_runner(ParallelSettings(), first):
        worker = _worker_pid(first)
    second = _limited_on(X, Y, FOLDS)
    assert _worker_pid(second) == worker
    second.close()


def test_a_parked_worker_that_died_is_replaced(limited):
    first = _limited_on(X, Y, FOLDS)
    worker = _worker_pid(first)
    first.release()
    os.kill(worker, 9)
    time.sleep(0.5)  # loky's manager sees the death

    second = _limited_on(X, Y, FOLDS)
    replacement = _worker_pid(second)
    assert replacement not in (worker, os.getpid())
    second.close()


def _end_after_this_task_as_a_leak():
    # loky ends a worker whose memory grew by more than _MAX_MEMORY_LEAK_SIZE
    # since its first task, checked at most once a second, and starts a bare
    # one in its place; a negative size makes this worker's next check fail.
    process_executor._MAX_MEMORY_LEAK_SIZE = -1
    time.sleep(1.1)


def test_a_worker_that_loky_replaced_gets_the_data_again(limited):
    config = {"max_depth": 3}
    before = limited(request(config))
    worker = _worker_pid(limited)
    limited._executor.submit(_end_after_this_task_as_a_leak).result()
    time.sleep(0.5)  # loky's manager starts the replacement

    after = limited(request(config))
    assert after.ok, after.error
    np.testing.assert_array_equal(after.oof_predictions, before.oof_predictions)
    assert _worker_pid(limited) not in (worker, os.getpid())


def _refuse_to_be_rebuilt():
    raise RuntimeError("this factory cannot be rebuilt in the worker")


class _FactoryThatCannotArrive:
    """A model factory that pickles but fails to unpickle in the worker."""

    def __call__(self, model_name, config, random_state):
        return make_model(model_name, config, random_state)

    def __reduce__(self):
        return _refuse_to_be_rebuilt, ()


def test_a_worker_that_cannot_start_gives_a_trial_that_never_ran(limited):
    evaluate = cross_validation_evaluator(
        "decision_tree_regressor",
        X,
        Y,
        FOLDS,
        time_limit=LIMIT,
        model_factory=_FactoryThatCannotArrive(),
    )
    result = evaluate(request({"max_depth": 2}))
    assert not result.ok and result.never_ran
    assert "the worker process could not start" in result.error
    assert not limited(request({"probe": "raise"})).never_ran  # a failed fit did run


@pytest.fixture
def budget():
    """A started time budget, the deadline of the requests; its seconds are set
    by the test."""
    budget = TimeBudget(1000.0)
    budget.start()
    return budget


def test_a_trial_running_past_the_time_budget_is_cut_with_a_message_saying_so(
    limited, budget
):
    _worker_pid(limited)  # the worker is up
    budget.seconds = budget.elapsed + 0.3
    result = limited(request({"probe": "sleep", "seconds": 60.0}, deadline=budget))
    assert result.error == (
        f"TimeoutError: fit was cut at the end of the time budget of "
        f"{budget.seconds:g} s"
    )
    assert result.fit_seconds < LIMIT  # the budget's 0.3 s, not the limit
    assert budget.spent()


def test_a_trial_cut_at_the_budget_s_end_spends_what_was_kept_for_its_final_fit(
    limited, budget
):
    _worker_pid(limited)
    # 2 s left, half of them kept for the trial's own final fit: cut after
    # about 1 s (half of what is left once the worker has the request)
    budget.final_fit_factor = 1.0
    budget.seconds = budget.elapsed + 2.0
    result = limited(request({"probe": "sleep", "seconds": 60.0}, deadline=budget))
    assert "end of the time budget" in result.error
    assert 0.9 <= result.fit_seconds < LIMIT
    assert budget.remaining() > 0 and budget.spent()


def test_a_trial_asked_for_once_the_time_budget_is_spent_starts_no_worker(
    limited, budget, monkeypatch
):
    assert limited(request({"probe": "sleep", "seconds": 0.0}, deadline=budget)).ok
    budget.seconds = budget.elapsed
    limited.close()  # as a cut leaves it: no worker
    started = []
    monkeypatch.setattr(limited, "_ready_worker", lambda: started.append(1))
    result = limited(request({"probe": "sleep", "seconds": 60.0}, deadline=budget))
    assert result.error == (
        f"TimeoutError: fit was cut at the end of the time budget of "
        f"{budget.seconds:g} s"
    )
    assert result.fit_seconds == 0.0 and not started


def test_the_time_limit_applies_when_it_is_shorter_than_the_time_left(limited, budget):
    result = limited(request({"probe": "sleep", "seconds": 60.0}, deadline=budget))
    assert result.error == f"TimeoutError: fit exceeded the time limit of {LIMIT:g} s"


def test_a_trial_past_its_share_of_the_time_budget_is_cut_there(limited, budget):
    _worker_pid(limited)  # the worker is up
    budget.trial_share = 0.002  # 2 s of the budget's 1000 s per trial
    result = limited(request({"probe": "sleep", "seconds": 60.0}, deadline=budget))
    assert result.error == (
        "TimeoutError: fit exceeded its share of the time budget (0.002 x 1000 s = 2 s)"
    )
    assert result.fit_seconds >= 2.0 and not budget.spent()
    # a trial within its share is not cut
    assert limited(request({"probe": "sleep", "seconds": 0.0}, deadline=budget)).ok


def test_an_evaluator_with_a_worker_can_be_pickled(limited):
    worker = _worker_pid(limited)
    copy = pickle.loads(pickle.dumps(limited))
    assert copy.time_limit == LIMIT
    assert copy.cross_validation.model_factory is _probe_factory
    try:
        assert _worker_pid(copy) not in (worker, os.getpid())
    finally:
        copy.close()
    assert _worker_pid(limited) == worker


@pytest.mark.parametrize(
    "time_limit", [0, -1.0, float("inf"), float("nan"), True, "30"]
)
def test_a_time_limit_must_be_positive_and_finite(time_limit):
    with pytest.raises(ValueError, match=f"got {re.escape(repr(time_limit))}"):
        cross_validation_evaluator(
            "decision_tree_regressor", X, Y, FOLDS, time_limit=time_limit
        )


def test_a_fit_stopped_at_its_iteration_cap_is_a_quiet_successful_trial():
    capped = {
        "learning_rate_init": 0.01,
        "activation": "relu",
        "n_hidden_layers": 1,
        "units_1": 5,
        "max_iter": 2,
    }
    with warnings.catch_warnings(record=True) as plain:
        warnings.simplefilter("always")
        cross_val_predict(
            make_model("mlp_regressor", capped, 0), X, Y, cv=PredefinedSplit(FOLDS)
        )
    assert any(issubclass(w.category, ConvergenceWarning) for w in plain)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = cross_validation_evaluator("mlp_regressor", X, Y, FOLDS)(
            request(capped)
        )
    assert result.ok
    assert not any(issubclass(w.category, ConvergenceWarning) for w in caught)


def _search_leaving_a_parked_worker() -> None:
    evaluator = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, FOLDS, time_limit=60
    )
    assert evaluator(request({"max_depth": 2})).ok
    evaluator.release()


def test_a_process_that_parked_a_worker_still_exits():
    # e.g. a ProcessPoolExecutor worker that ran a serial search: multiprocessing
    # joins its children at exit, and a parked worker waits for work forever
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_search_leaving_a_parked_worker)
    child.start()
    child.join(timeout=60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0


def test_a_trial_measures_its_fold_models_prediction_time_and_size():
    result = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, FOLDS, random_state=3
    )(request({"max_depth": 3}))
    # the pickled size of fold 0's model, which every fold's model is close to
    fold_0 = DecisionTreeRegressor(max_depth=3, random_state=3).fit(
        X[FOLDS != 0], Y[FOLDS != 0]
    )
    assert result.model_bytes == len(pickle.dumps(fold_0, protocol=5))
    assert 0 < result.predict_seconds_per_1000 < 10
    failed = cross_validation_evaluator(
        "decision_tree_regressor", X, Y, FOLDS, random_state=3
    )(request({"max_depth": -1}))
    assert not failed.ok and np.isnan(failed.model_bytes)
    assert np.isnan(failed.predict_seconds_per_1000)


def test_merged_fold_results_keep_the_later_parts_costs():
    earlier = TrialResult(np.array([1.0, np.nan]), 1.0, model_bytes=10.0)
    later = TrialResult(
        np.array([np.nan, 2.0]), 2.0, predict_seconds_per_1000=0.5, model_bytes=12.0
    )
    merged = merge_fold_results(earlier, later)
    assert (merged.predict_seconds_per_1000, merged.model_bytes) == (0.5, 12.0)
    assert merge_fold_results(later, earlier).predict_seconds_per_1000 == 0.5


def test_a_pickled_size_is_counted_as_pickle_writes_it():
    fitted = RandomForestRegressor(5, random_state=0).fit(X, Y)
    assert pickled_bytes(fitted) == len(pickle.dumps(fitted, protocol=5))
    # protocol 5 writes large arrays out of band: counted by bytes, not items
    array = np.arange(100_000, dtype=np.float64)
    assert pickled_bytes(array) == len(pickle.dumps(array, protocol=5)) > 800_000


def _script_model_factory():
    """A factory of a model whose class, as one defined in a script or a
    notebook, cannot be found by pickle's lookup in a worker process."""

    class ScriptTree(RegressorMixin, BaseEstimator):
        def fit(self, X, y):
            self.tree_ = DecisionTreeRegressor(max_depth=2).fit(X, y)
            return self

        def predict(self, X):
            return self.tree_.predict(X)

    return lambda model_name, config, random_state: ScriptTree()


def test_a_model_class_pickle_cannot_look_up_is_measured_as_cloudpickle_sends_it():
    fitted = _script_model_factory()("tree", {}, 0).fit(X, Y)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(fitted, protocol=5)
    assert pickled_bytes(fitted) == len(cloudpickle.dumps(fitted, protocol=5)) > 0


def test_a_script_defined_model_trains_in_a_worker_process():
    # Its size used to be measured with pickle, which failed every trial there.
    evaluator = cross_validation_evaluator(
        "decision_tree_regressor",
        X,
        Y,
        FOLDS,
        model_factory=_script_model_factory(),
        worker_process=True,
    )
    try:
        result = evaluator(request({}))
    finally:
        evaluator.close()
    assert result.ok, result.error
    assert result.model_bytes > 0 and np.isfinite(result.oof_predictions).all()
