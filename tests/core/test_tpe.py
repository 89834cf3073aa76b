"""The TPE adapter: Optuna's TPESampler over our spaces and retargeted histories."""

import numpy as np
import pytest
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.tpe import TPEOptimizer, optuna_distributions
from tests.support import SVM_SPEC

LINE = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})
SVM = SearchSpace.from_dict(
    {**SVM_SPEC, "max_iter": {"type": "constant", "value": 1000}}
)


def test_the_space_reaches_optuna_as_its_distributions():
    assert optuna_distributions(SVM) == {
        # choice indices: TPE treats them as unordered
        "kernel": CategoricalDistribution([0, 1, 2]),
        "C": FloatDistribution(1e-3, 1e3, log=True),
        "gamma": FloatDistribution(1e-5, 10.0, log=True),
        "degree": IntDistribution(2, 5),
    }


def told_line(optimizer, good_at, n=30, seed=0):
    """n told points on LINE, the loss |x - good_at| (the history TPE models)."""
    points = np.random.default_rng(seed).random(n)
    optimizer.tell_many([{"x": float(x)} for x in points], np.abs(points - good_at))


def test_tpe_proposes_where_the_told_values_are_good():
    optimizer = TPEOptimizer(LINE, seed=0, n_initial=10)
    told_line(optimizer, good_at=0.2)
    proposals = [s.config["x"] for s in optimizer.ask_batch(8)]
    assert abs(np.median(proposals) - 0.2) < 0.1


def test_a_retargeted_history_moves_the_proposals():
    # SEGOR retargets every told point at each iteration; TPE must see the new values.
    optimizer = TPEOptimizer(LINE, seed=0, n_initial=10)
    told_line(optimizer, good_at=0.2)
    optimizer.retarget(np.abs(optimizer.X[:, 0] - 0.8))
    proposals = [s.config["x"] for s in optimizer.ask_batch(8)]
    assert abs(np.median(proposals) - 0.8) < 0.1


def test_failed_trials_teach_tpe_nothing():
    optimizer = TPEOptimizer(LINE, seed=0, n_initial=10)
    told_line(optimizer, good_at=0.2)
    # failures where the loss would be lowest: if TPE read them as values it would move
    optimizer.tell_many([{"x": 0.75 + 0.01 * i} for i in range(20)], [None] * 20)
    proposals = [s.config["x"] for s in optimizer.ask_batch(8)]
    assert abs(np.median(proposals) - 0.2) < 0.1


def test_startup_is_random_until_n_initial_trials_complete():
    optimizer = TPEOptimizer(LINE, seed=0, n_initial=40)
    told_line(optimizer, good_at=0.2, n=30)
    # 30 < 40 complete trials: still Optuna's uniform startup, not drawn to 0.2
    proposals = np.array([s.config["x"] for s in optimizer.ask_batch(40)])
    assert np.mean(np.abs(proposals - 0.2) < 0.1) < 0.5
    assert proposals.max() - proposals.min() > 0.7


def test_conditional_configurations_hold_the_active_parameters_and_constants():
    optimizer = TPEOptimizer(SVM, seed=3, n_initial=5)
    for _ in range(15):
        suggestion = optimizer.ask()
        config = suggestion.config
        expected = (
            {"kernel", "C", "max_iter"}
            | ({"gamma"} if config["kernel"] != "linear" else set())
            | ({"degree"} if config["kernel"] == "poly" else set())
        )
        assert set(config) == expected and config["max_iter"] == 1000
        np.testing.assert_array_equal(suggestion.encoded, SVM.encode(config))
        optimizer.tell(suggestion, float(np.log10(config["C"]) ** 2))


def test_a_batch_spreads_out_and_the_same_seed_gives_the_same_suggestions():
    def batches(seed):
        optimizer = TPEOptimizer(SVM, seed=seed, n_initial=4)
        rng = np.random.default_rng(1)
        configs = [SVM.decode(rng.random(SVM.dim)) for _ in range(12)]
        optimizer.tell_many(configs, rng.random(12))
        return [
            s.config for s in optimizer.ask_batch(4, pending=[SVM.encode(configs[0])])
        ]

    batch = batches(0)
    assert len({repr(config) for config in batch}) == 4
    assert batch == batches(0) and batch != batches(1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_initial": 0}, "n_initial must be an integer >= 1, got 0"),
        ({"n_ei_candidates": 2.5}, "n_ei_candidates must be an integer >= 1, got 2.5"),
        ({"multivariate": "yes"}, "multivariate must be true or false, got 'yes'"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        TPEOptimizer(SVM, **options)
