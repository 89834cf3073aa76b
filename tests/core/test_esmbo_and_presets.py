"""ESMBO's replicas of ceil(rho n) samples, rho tuned on the initial design, its
final ensemble (agnostic Bayes posterior or replica winners), the `<method>:<loss>`
variants and `optimizer.preset: paper`.

Oracles are written out here (bootstrap draws, squared errors, fold-weighted CV
losses, argmins by loops), not taken from the code under test.
"""

import copy
import re

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core import methods
from ensemble_bo.core.agnostic_bayes import RHO_GRID, bootstrap_posterior, tune_rho
from ensemble_bo.core.losses import fold_weights
from ensemble_bo.core.methods import (
    MARGINAL_LIKELIHOOD_GP,
    METHODS,
    SLICE_SAMPLED_GP,
    method_settings,
    parse_method,
    run_method,
)
from ensemble_bo.core.optimizer import RandomSearch
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.selection.stages import agnostic_bayes_selection
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import Esmbo
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import PROJECT, RecordingRetargets, cheap_parameters, esmbo_search

PARAMETERS = default_parameters()

# A regression toy: n samples in 5 folds of unequal sizes (so the fold weights
# are not the plain mean), and a fixed table of out-of-fold predictions that a
# fake evaluator hands out in call order (None: a failed trial).
N = 37
RNG = np.random.default_rng(38)
Y = RNG.normal(size=N)
FOLDS = np.array([0] * 10 + [1] * 9 + [2] * 7 + [3] * 6 + [4] * 5)
SHARED = RNG.normal(size=N)
# models of similar quality, some sharing an error: replicas disagree on the best
TABLE = [
    None
    if k in (2, 9)
    else Y + (0.3 + 0.05 * (k % 4)) * RNG.normal(size=N) + 0.2 * (k % 3) * SHARED
    for k in range(15)
]
SPACE = SearchSpace.from_dict({"a": {"type": "float", "low": 0.0, "high": 1.0}})


def table_evaluator(table=TABLE):
    calls = []

    def evaluate(config):
        row = table[len(calls)]
        calls.append(config)
        if row is None:
            return TrialResult(None, 0.0, "RuntimeError: boom")
        return TrialResult(np.array(row, dtype=float), 0.0)

    return evaluate


class RecordingRandomSearch(RecordingRetargets, RandomSearch):
    """Random search that keeps every set of targets the strategy retargets it with."""


def esmbo(rho=1.0, table=TABLE, **kwargs):
    options = {"n_replicas": 4, "seed": 7, "rho": rho, **kwargs}
    optimizer = RecordingRandomSearch(SPACE, seed=3)
    return esmbo_search(optimizer, table_evaluator(table), Y, FOLDS, **options)


def hand_replicas(seed, n, size, n_replicas):
    """Bootstrap counts (n_replicas, n): `size` draws of n samples per replica, in order."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_replicas, n))
    for replica in range(n_replicas):
        for sample in rng.integers(0, n, size=size):
            counts[replica, sample] += 1
    return counts


def hand_tuned_rho(predictions, n_posterior, seed):
    """tune_rho on these models' squared errors, with a bootstrap posterior and
    the fold-weighted MSE of the weighted mean prediction written here."""
    predictions = [np.asarray(p, dtype=float) for p in predictions]
    losses = np.array([(p - Y) ** 2 for p in predictions])
    weights_of_samples = fold_weights(FOLDS)

    def ensemble_loss(weights):
        mean = sum(w * p for w, p in zip(weights, predictions, strict=True))
        return float(((mean / np.sum(weights) - Y) ** 2) @ weights_of_samples)

    # fold_weights is the mean over folds of the folds' means
    assert ensemble_loss(np.eye(len(predictions))[0]) == pytest.approx(
        hand_cv_mse(predictions[0])
    )
    return tune_rho(
        lambda L, rng, rho: bootstrap_posterior(L, n_posterior, rng, rho=rho),
        losses,
        ensemble_loss,
        np.random.default_rng(seed),
    )


def hand_cv_mse(prediction, y=Y, folds=FOLDS):
    """Mean over folds of each fold's mean squared error."""
    return float(
        np.mean(
            [np.mean((prediction[folds == k] - y[folds == k]) ** 2) for k in set(folds)]
        )
    )


def hand_winner_shares(losses, ok, counts):
    """Per replica, the ok rows of lowest sum_i c_i loss_i / sum_i c_i (ties split).

    (first winner of each replica, {row: share of the replicas it wins})
    """
    firsts, shares = [], {}
    for replica in counts:
        risks = {
            h: sum(c * loss for c, loss in zip(replica, losses[h], strict=True))
            / replica.sum()
            for h in ok
        }
        low = min(risks.values())
        # the code compares exact risks: only exact copies tie
        winners = [h for h in ok if np.isclose(risks[h], low, rtol=1e-12, atol=0)]
        firsts.append(winners[0])
        for h in winners:
            shares[h] = shares.get(h, 0.0) + 1.0 / (len(winners) * len(counts))
    return firsts, shares


# ------------------------------------------------------------ replica sizes


@pytest.mark.parametrize(("rho", "size"), [(0.1, 4), (0.37, 14), (1.0, 37)])
def test_each_replica_resamples_ceil_rho_n_samples(rho, size):
    # sizes by hand: 0.1 * 37 = 3.7 -> 4, 0.37 * 37 = 13.69 -> 14, 37
    search = esmbo(rho=rho, n_replicas=5)
    weights = search.strategy.replica_weights
    assert weights.shape == (5, N)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)
    counts = weights * size
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)
    assert np.round(counts).sum(axis=1).tolist() == [size] * 5
    np.testing.assert_allclose(counts, hand_replicas(7, N, size, 5), atol=1e-9)
    assert search.strategy.rho == rho


def test_rho_one_draws_what_esmbo_drew_before_rho_existed():
    # before rho: one generator, replica after replica, n draws each
    rng = np.random.default_rng(7)
    old = [np.bincount(rng.integers(0, N, size=N), minlength=N) / N for _ in range(4)]
    np.testing.assert_array_equal(
        esmbo(rho=1.0).strategy.replica_weights, np.array(old)
    )
    np.testing.assert_array_equal(esmbo(rho=1).strategy.replica_weights, np.array(old))
    # the default is rho = 1
    default = esmbo_search(
        RandomSearch(SPACE, seed=3), table_evaluator(), Y, FOLDS, n_replicas=4, seed=7
    )
    np.testing.assert_array_equal(default.strategy.replica_weights, np.array(old))


@pytest.mark.parametrize("rho", [0, 1.5, -0.1, True, "big", None])
def test_a_bad_rho_is_refused_naming_it(rho):
    with pytest.raises(ValueError, match=re.escape(f"got {rho!r}")):
        esmbo(rho=rho)


# ------------------------------------------------------------------- rho: auto


def test_auto_rho_is_tuned_on_the_initial_design_and_the_replicas_redrawn():
    n_posterior, tuned_at = 200, 6
    search = esmbo(rho="auto", rho_tuned_at=tuned_at, n_posterior_samples=n_posterior)
    assert search.strategy.rho == 1.0  # until the tuning
    result = search.run(15, max_initial_failures=None)
    predictions = result.pool.predictions
    np.testing.assert_array_equal(predictions[3], TABLE[3])  # the table, in order

    # The oracle: tune_rho on the first 6 trials' successful squared errors.
    first = [h for h in range(tuned_at) if TABLE[h] is not None]
    assert first == [0, 1, 3, 4, 5]
    expected = hand_tuned_rho([TABLE[h] for h in first], n_posterior, seed=7)
    # inside the grid (a bug returning its first or last value would show), < 1
    # (so the redraw shows)
    assert expected.value in RHO_GRID[1:-1]
    assert search.strategy.rho == pytest.approx(expected.value, rel=1e-12)

    size = int(np.ceil(expected.value * N))
    counts = search.strategy.replica_weights * size
    np.testing.assert_allclose(counts, hand_replicas(7, N, size, 4), atol=1e-9)
    np.testing.assert_allclose(search.strategy.replica_weights.sum(axis=1), 1.0)

    # The GP targets: rho = 1 replicas before the tuning, the tuned ones from it on.
    before = hand_replicas(7, N, N, 4) / N
    after = counts / size
    all_losses = (predictions - Y) ** 2  # NaN rows for failed trials
    optimizer = search.optimizer
    assert len(optimizer.retargets) == 15
    for i, targets in enumerate(optimizer.retargets):
        replica = (before if i < tuned_at else after)[i % 4]
        np.testing.assert_allclose(
            targets, all_losses[:i] @ replica, rtol=1e-10, equal_nan=True
        )
        assert result.history[i].slot == i % 4


def test_auto_rho_waits_for_two_successful_trials():
    # At iteration 6 one trial has trained (2), at 7 two (2 and 6): tuned then.
    table = [None, None, TABLE[0], None, None, None, TABLE[1], TABLE[3]]
    search = esmbo("auto", table, rho_tuned_at=6, n_posterior_samples=50)
    result = search.run(8, max_initial_failures=None)
    expected = hand_tuned_rho([TABLE[0], TABLE[1]], 50, seed=7)
    assert search.strategy.rho == pytest.approx(expected.value, rel=1e-12)
    assert result.search_metrics == {"esmbo_rho": search.strategy.rho}
    # iteration 6's targets still came from the rho = 1 replicas
    before = hand_replicas(7, N, N, 4) / N
    losses = (result.pool.predictions[:6] - Y) ** 2
    np.testing.assert_allclose(
        search.optimizer.retargets[6],
        losses @ before[6 % 4],
        rtol=1e-10,
        equal_nan=True,
    )


def test_auto_rho_stays_one_without_two_successes():
    table = [None, None, TABLE[0], None, None, None, None]
    search = esmbo("auto", table, rho_tuned_at=6, n_posterior_samples=50)
    result = search.run(7, max_initial_failures=None)
    assert search.strategy.rho == 1.0 and result.search_metrics == {"esmbo_rho": 1.0}
    np.testing.assert_allclose(
        search.strategy.replica_weights, hand_replicas(7, N, N, 4) / N, atol=1e-12
    )


def test_auto_rho_is_not_tuned_before_its_iteration():
    search = esmbo(rho="auto", rho_tuned_at=6, n_posterior_samples=50)
    search.run(6, max_initial_failures=None)
    assert search.strategy.rho == 1.0


# ------------------------------------------------------------ the ensemble


@pytest.mark.parametrize("rho", [1.0, 0.37, "auto"])
def test_the_ensemble_is_each_replica_s_argmin_of_its_bootstrap_risk(rho):
    search = esmbo(rho=rho, rho_tuned_at=6, n_posterior_samples=100)
    result = search.run(15, max_initial_failures=None)
    predictions, ok = result.pool.predictions, np.flatnonzero(result.pool.ok)
    assert ok.tolist() == [k for k in range(15) if TABLE[k] is not None]
    losses = np.array(
        [[(p - y) ** 2 for p, y in zip(row, Y, strict=True)] for row in predictions]
    )
    # the replicas the last update used: sizes by hand (37 * 0.37 = 13.69 -> 14)
    size = {1.0: N, 0.37: 14}.get(rho) or int(np.ceil(search.strategy.rho * N))
    counts = hand_replicas(7, N, size, 4)
    np.testing.assert_allclose(
        search.strategy.replica_weights, counts / size, atol=1e-12
    )
    firsts, shares = hand_winner_shares(losses, ok, counts)
    # not degenerate: replicas disagree, and not all winners have the same share
    assert len(set(firsts)) >= 2 and len(set(shares.values())) >= 2
    assert result.members == firsts
    assert result.member_weights == pytest.approx(shares, rel=1e-12)
    mean = sum(w * predictions[h] for h, w in shares.items())
    assert result.history[-1].ensemble_loss == pytest.approx(
        hand_cv_mse(mean), rel=1e-10
    )


def test_an_exact_copy_shares_its_replicas_win():
    best = Y + 0.01 * SHARED
    table = [TABLE[0], best, TABLE[1], best]
    search = esmbo_search(
        RandomSearch(SPACE, seed=0),
        table_evaluator(table),
        Y,
        FOLDS,
        n_replicas=3,
        rho=0.5,
    )
    result = search.run(4)
    assert result.member_weights == pytest.approx({1: 0.5, 3: 0.5})
    assert result.members == [1, 1, 1]


# ------------------------------------------------------- run_method on real data

BUDGET = 12  # rho is tuned at iteration 10


@pytest.fixture(scope="module")
def cpu_data():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "cpu_performance.csv")
    return prepare(raw, "cpu_performance", PARAMETERS["data_processing"], 0)[1]


def cheap_esmbo(**esmbo):
    settings = cheap_parameters()
    settings["budget"] = BUDGET
    block = settings["esmbo"]
    settings["esmbo"] = {
        **block,
        "time_limit": None,
        "n_samples": 300,
        "optimizer": {
            **block["optimizer"],
            "n_initial": 4,
            "gp_restarts": 1,
            "n_candidates": 128,
            "n_local_starts": 1,
        },
        **esmbo,
    }
    return settings


@pytest.fixture
def built_searches(monkeypatch):
    """Every ESMBO strategy run_method builds, in order."""
    built = []

    class Recorded(Esmbo):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(methods, "Esmbo", Recorded)
    return built


def test_esmbo_s_posterior_ensemble_is_agnostic_bayes_over_its_pool(
    cpu_data, built_searches
):
    settings = cheap_esmbo()
    block = settings["esmbo"]
    assert (block["ensemble"], block["rho"], block["posterior"]) == (
        "posterior",
        "auto",
        "bootstrap",
    )
    posterior = run_method("esmbo", cpu_data, settings, 0)
    winners = run_method("esmbo:replica_winners", cpu_data, settings, 0)
    assert len(built_searches) == 2
    # the same search: the ensemble setting only chooses the final stage
    assert posterior.pool.configs == winners.pool.configs
    np.testing.assert_array_equal(posterior.pool.predictions, winners.pool.predictions)
    assert len(winners.pool) == BUDGET and winners.pool.ok.all()

    expected = agnostic_bayes_selection(
        winners,
        cpu_data.target,
        cpu_data.fold_ids,
        loss=block["loss"],
        posterior=block["posterior"],
        n_samples=block["n_samples"],
        seed=derive_seed(0, "agnostic bayes"),
    )
    assert posterior.members == expected.members
    assert posterior.member_weights == pytest.approx(expected.member_weights, rel=1e-12)
    assert posterior.history[-1].action == "weigh"
    assert [r.ensemble_loss for r in posterior.history[:-1]] == [
        r.ensemble_loss for r in winners.history[:-1]
    ]

    # replica_winners: the shares of the replicas' winners, rho tuned after the
    # initial design (n_initial 4) and on at least 10 trials
    search = built_searches[1]
    assert search.rho_tuned_at == 10 and search.rho in RHO_GRID
    # the default inference budget (max_model_mb) refused nothing
    assert winners.search_metrics == {
        "esmbo_rho": search.rho,
        "inference_budget_skipped": 0.0,
    }
    size = int(np.ceil(search.rho * len(cpu_data.target)))
    counts = hand_replicas(
        derive_seed(0, "bootstrap replicas"), len(cpu_data.target), size, 10
    )
    np.testing.assert_allclose(search.replica_weights, counts / size, atol=1e-12)
    losses = (winners.pool.predictions - cpu_data.target) ** 2
    firsts, shares = hand_winner_shares(losses, range(BUDGET), counts)
    assert winners.member_weights == pytest.approx(shares, rel=1e-12)
    assert winners.members == firsts


def test_esmbo_replica_winners_with_rho_one_from_the_seed_alone(cpu_data):
    result = run_method(
        "esmbo:replica_winners", cpu_data, cheap_esmbo(rho=1.0, n_replicas=6), 2
    )
    n = len(cpu_data.target)
    counts = hand_replicas(derive_seed(2, "bootstrap replicas"), n, n, 6)
    ok = np.flatnonzero(result.pool.ok)
    losses = (result.pool.predictions - cpu_data.target) ** 2
    firsts, shares = hand_winner_shares(losses, ok, counts)
    assert result.member_weights == pytest.approx(shares, rel=1e-12)
    assert result.members == firsts
    assert sum(result.member_weights.values()) == pytest.approx(1.0)


# ------------------------------------------------------------------ variants


@pytest.mark.parametrize(
    ("spec", "block", "key", "value"),
    [
        ("esmbo:replica_winners", "esmbo", "ensemble", "replica_winners"),
        ("esmbo:posterior", "esmbo", "ensemble", "posterior"),
        ("esmbo:log_loss", "esmbo", "loss", "log_loss"),
        ("sego:brier", "sego", "loss", "brier"),
        ("smbo_posthoc:brier", "posthoc", "loss", "brier"),
        ("ers:error", "ers", "loss", "error"),
    ],
)
def test_a_variant_sets_one_key_of_one_block(spec, block, key, value):
    method, variant = parse_method(spec)
    assert method is METHODS[spec.partition(":")[0]]
    assert variant == spec.partition(":")[2]
    chosen = method_settings(spec, PARAMETERS)
    assert set(chosen) == set(method.params)
    assert chosen[block] == {**PARAMETERS[block], key: value}
    for other in set(chosen) - {block}:
        assert chosen[other] == PARAMETERS[other], other
    assert PARAMETERS[block][key] != value or spec == "esmbo:posterior"
    check_settings(method, chosen, seed=0)  # fits one of the method's tasks


@pytest.mark.parametrize(
    ("spec", "path", "loss"),
    [
        ("esmbo:log_loss", "esmbo.loss", "log_loss"),
        ("ers:error", "ers.loss", "error"),
        ("smbo_posthoc:brier", "posthoc.loss", "brier"),
        ("esmbo:squared_margin", "esmbo.loss", "squared_margin"),
    ],
)
def test_a_classification_loss_on_regression_data_is_refused(spec, path, loss):
    chosen = method_settings(spec, PARAMETERS)
    with pytest.raises(InvalidInput, match=re.escape(f"{path}={loss!r}")):
        check_settings(parse_method(spec)[0], chosen, seed=0, task="regression")
    check_settings(parse_method(spec)[0], chosen, seed=0, task="classification")


def test_a_regression_loss_on_classification_data_is_refused():
    chosen = method_settings("esmbo:huber", PARAMETERS)
    check_settings("esmbo", chosen, seed=0, task="regression")
    with pytest.raises(InvalidInput, match=re.escape("esmbo.loss='huber'")):
        check_settings("esmbo", chosen, seed=0, task="classification")
    with pytest.raises(InvalidInput, match=re.escape("esmbo.loss='nonsense'")):
        check_settings("esmbo", method_settings("esmbo:nonsense", PARAMETERS), seed=0)


# ------------------------------------------------------------------- presets

GP_OPTIONS = {
    "kind": "gp",
    "n_initial": 10,
    "hyperparameters": "map",
    "acquisition": "ucb",  # the papers' GP maximizes EI: the preset sets it
    "n_candidates": 64,
    "preset": "paper",
}
PAPER_GP = {
    "segor": "slice",
    "sego": "slice",
    "esmbo": "ml2",
    "smbo": "ml2",
    "smbo_posthoc": "ml2",
    "ers": None,
    "random_search": None,
}


def test_every_method_is_named_in_the_preset_table():
    assert set(PAPER_GP) == set(METHODS)
    assert SLICE_SAMPLED_GP == {
        "hyperparameters": "slice",
        "acquisition": "ei",
        "n_initial": 2,
    }
    assert MARGINAL_LIKELIHOOD_GP == {
        "hyperparameters": "ml2",
        "acquisition": "ei",
        "n_initial": 2,
    }


@pytest.mark.parametrize("name", sorted(PAPER_GP))
def test_the_paper_preset_sets_each_method_s_paper_gp(name):
    method = METHODS[name]
    given = dict(GP_OPTIONS)
    options = method.optimizer_options(given)
    assert given == GP_OPTIONS  # not mutated
    if PAPER_GP[name] is None:  # no paper GP: the options without the preset
        assert options == {key: v for key, v in GP_OPTIONS.items() if key != "preset"}
    else:
        assert options == {
            "kind": "gp",
            "n_initial": 2,
            "hyperparameters": PAPER_GP[name],
            "acquisition": "ei",
            "n_candidates": 64,
        }
    # no preset: unchanged
    plain = {key: v for key, v in GP_OPTIONS.items() if key != "preset"}
    assert method.optimizer_options(plain) == plain
    # a non-gp optimizer ignores it
    assert method.optimizer_options({"kind": "random", "preset": "paper"}) == {
        "kind": "random"
    }
    with pytest.raises(ValueError, match="'spearmint'"):
        method.optimizer_options({**GP_OPTIONS, "preset": "spearmint"})


def test_the_paper_preset_applies_without_a_kind():
    # make_optimizer's kind defaults to gp
    assert METHODS["sego"].optimizer_options({"preset": "paper"}) == SLICE_SAMPLED_GP


@pytest.mark.parametrize("name", sorted(METHODS))
def test_check_settings_refuses_an_unknown_preset_and_takes_paper(name):
    method = METHODS[name]
    block = method.search_params
    parameters = copy.deepcopy(PARAMETERS)
    parameters[block]["optimizer"] = {
        **parameters[block]["optimizer"],
        "preset": "paper",
    }
    check_settings(method, method_settings(method, parameters), seed=0)
    parameters[block]["optimizer"]["preset"] = "spearmint"
    with pytest.raises(InvalidInput, match=rf"{block}\.optimizer.*'spearmint'"):
        check_settings(method, method_settings(method, parameters), seed=0)


@pytest.mark.parametrize(("name", "mode"), [("esmbo", "ml2"), ("segor", "slice")])
def test_run_method_builds_the_preset_s_optimizer(name, mode, cpu_data, monkeypatch):
    built = []

    class Stop(Exception):
        pass

    def recording(space, seed, **options):
        built.append(options)
        raise Stop

    monkeypatch.setattr(methods, "make_optimizer", recording)
    settings = cheap_esmbo()
    block = METHODS[name].search_params
    settings[block] = {
        **settings[block],
        "optimizer": {**settings[block]["optimizer"], "preset": "paper"},
    }
    with pytest.raises(Stop):
        run_method(name, cpu_data, settings, 0)
    assert built[0]["hyperparameters"] == mode and built[0]["n_initial"] == 2
    assert "preset" not in built[0]


# ---------------------------------------------------------------- validation


def changed(path, value):
    parameters = copy.deepcopy(PARAMETERS)
    block, key = path.split(".")
    parameters[block][key] = value
    return parameters


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("esmbo.rho", 0, "esmbo.rho=0 is not 'auto' or a number in (0, 1]"),
        ("esmbo.rho", 1.5, "esmbo.rho=1.5 is not 'auto'"),
        ("esmbo.rho", True, "esmbo.rho=True is not 'auto'"),
        ("esmbo.rho", "big", "esmbo.rho='big' is not 'auto'"),
        (
            "esmbo.ensemble",
            "all",
            "esmbo.ensemble='all' is not one of ['posterior', 'replica_winners']",
        ),
    ],
)
def test_bad_esmbo_settings_are_named(path, value, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        check_settings("esmbo", changed(path, value), seed=0)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("esmbo.rho", "auto"),
        ("esmbo.rho", 1),
        ("esmbo.rho", 0.25),
        ("esmbo.ensemble", "replica_winners"),
    ],
)
def test_good_esmbo_settings_pass(path, value):
    check_settings("esmbo", changed(path, value), seed=0)
