import math
from dataclasses import replace

import numpy as np
import pytest

from ensemble_bo.core.losses import objective, squared_error
from ensemble_bo.core.optimizer import GPEIOptimizer, RandomSearch
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import (
    AllTrialsFailed,
    EnsembleSearchResult,
    IterationRecord,
    SearchInterrupted,
    join_selection,
)
from ensemble_bo.core.search import MAX_INITIAL_FAILURES
from ensemble_bo.core.selection.greedy import (
    bagged_selection,
    greedy_selection_with_replacement,
    greedy_vote_selection,
    weighted_vote_cv_error,
)
from ensemble_bo.core.selection.stages import (
    BAG_STEPS,
    BAGS,
    BaggedMembers,
    agnostic_bayes_selection,
    bagged_weights,
    posthoc_selection,
)
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import segor_variant
from ensemble_bo.core.trials import TrialResult
from tests.support import (
    RecordingRetargets,
    esmbo_search,
    sego_search,
    segor_search,
    single_best_search,
)

N_SAMPLES = 40
RNG = np.random.default_rng(0)
Y = RNG.normal(size=N_SAMPLES)
FOLDS = np.arange(N_SAMPLES) % 5
BASIS = RNG.normal(size=(3, N_SAMPLES))
SPACE = SearchSpace.from_dict(
    {
        "a": {"type": "float", "low": 0.0, "high": 1.0},
        "b": {"type": "float", "low": 0.0, "high": 1.0},
    }
)


def synthetic_evaluator(config):
    """Predictions that depend smoothly on (a, b); configurations with a > 0.85 fail."""
    a, b = config["a"], config["b"]
    if a > 0.85:
        return TrialResult(None, 0.0, "ValueError: a too large")
    predictions = (
        Y
        + (a - 0.3) * BASIS[0]
        + (b - 0.6) * BASIS[1]
        + 0.3 * np.sin(7 * a * b) * BASIS[2]
    )
    return TrialResult(predictions, 0.001)


class RecordingOptimizer(RecordingRetargets, GPEIOptimizer):
    """Keeps every set of GP targets the strategy hands over."""


def brute_force_loss(pool_predictions, member_indices):
    prediction = np.mean(pool_predictions[member_indices], axis=0)
    return np.mean([np.mean((prediction - Y)[FOLDS == k] ** 2) for k in range(5)])


def test_segor_fixed_matches_a_brute_force_reading_of_algorithm_1():
    size, budget = 4, 18
    optimizer = RecordingOptimizer(
        SPACE, seed=1, n_initial=6, gp_restarts=1, n_candidates=256
    )
    result = segor_search(
        optimizer, synthetic_evaluator, Y, FOLDS, ensemble_size=size
    ).run(budget)
    predictions = result.pool.predictions
    assert len(result.pool) == budget and len(result.history) == budget

    slots = [None] * size
    for i, record in enumerate(result.history):
        j = i % size
        assert record.slot == j
        others = [s for k, s in enumerate(slots) if k != j and s is not None]
        # GP targets of iteration i: L(E[j] <- h) for every h trained before it
        expected_targets = [
            brute_force_loss(predictions, [*others, h])
            if result.pool.ok[h]
            else math.nan
            for h in range(i)
        ]
        np.testing.assert_allclose(optimizer.retargets[i], expected_targets, rtol=1e-10)
        # slot j is refilled by the argmin over the whole pool, the new model included
        candidates = [
            (brute_force_loss(predictions, [*others, h]), h)
            for h in range(i + 1)
            if result.pool.ok[h]
        ]
        if not candidates:  # every model so far failed: the slot stays empty
            slots[j] = None
            assert math.isnan(record.ensemble_loss)
            continue
        best_loss, best = min(candidates)
        slots[j] = best
        assert record.ensemble_loss == pytest.approx(best_loss, rel=1e-10)
        assert record.ensemble_loss == pytest.approx(
            brute_force_loss(predictions, [s for s in slots if s is not None]),
            rel=1e-10,
        )
        singles = [
            brute_force_loss(predictions, [h])
            for h in range(i + 1)
            if result.pool.ok[h]
        ]
        assert record.best_single_loss == pytest.approx(min(singles), rel=1e-10)
    assert sorted(result.members) == sorted(s for s in slots if s is not None)
    assert not all(result.pool.ok)  # the run exercised failed trials too
    assert sum(result.member_weights.values()) == pytest.approx(1.0)


def test_failed_trials_are_recorded_and_the_loop_goes_on():
    def every_third_fails(config):
        every_third_fails.calls += 1
        if every_third_fails.calls % 3 == 0:
            return TrialResult(None, 0.0, "RuntimeError: boom")
        return synthetic_evaluator({**config, "a": min(config["a"], 0.8)})

    every_third_fails.calls = 0
    optimizer = GPEIOptimizer(
        SPACE, seed=0, n_initial=4, gp_restarts=1, n_candidates=128
    )
    result = segor_search(optimizer, every_third_fails, Y, FOLDS, ensemble_size=3).run(
        12
    )
    failed = [record for record in result.history if record.status == "failed"]
    assert len(failed) == 4
    assert list(result.pool.to_frame()["status"]).count("failed") == 4
    assert set(result.pool.to_frame()["error"].dropna()) == {"RuntimeError: boom"}
    assert all(result.pool.ok[m] for m in result.members)
    assert all(math.isfinite(r.ensemble_loss) for r in result.history)


def test_the_optimizer_is_told_each_trials_seconds():
    def timed(config):
        timed.calls += 1
        if timed.calls == 3:  # its worker never started: it cost nothing known
            return TrialResult(None, 0.0, "WorkerStartError: no", never_ran=True)
        if timed.calls == 5:  # cut at a time limit: it took that long
            return TrialResult(None, 4.0, "TimeoutError: fit took over 4 s")
        return replace(synthetic_evaluator(config), fit_seconds=0.1 * timed.calls)

    timed.calls = 0
    optimizer = GPEIOptimizer(
        SPACE, seed=0, n_initial=4, acquisition="ei_per_second", n_candidates=128
    )
    result = segor_search(optimizer, timed, Y, FOLDS, ensemble_size=3).run(8)
    expected = [0.1, 0.2, math.nan, 0.4, 4.0, 0.6, 0.7, 0.8]
    np.testing.assert_allclose(optimizer.seconds, expected)
    np.testing.assert_allclose(result.pool.fit_seconds, [0.1, 0.2, 0.0, *expected[3:]])
    # its proposals followed those seconds: a rerun is told it may search elsewhere
    assert result.search_metrics["proposals_weighed_seconds"] == 1.0
    timed.calls = 0
    plain = GPEIOptimizer(SPACE, seed=0, n_initial=4, n_candidates=128)
    result = segor_search(plain, timed, Y, FOLDS, ensemble_size=3).run(8)
    assert "proposals_weighed_seconds" not in result.search_metrics


def test_same_seed_gives_the_same_ensemble():
    runs = [
        segor_search(
            GPEIOptimizer(SPACE, seed=7, n_initial=5, gp_restarts=1, n_candidates=128),
            synthetic_evaluator,
            Y,
            FOLDS,
            ensemble_size=3,
        ).run(12)
        for _ in range(2)
    ]
    assert runs[0].members == runs[1].members
    assert runs[0].pool.configs == runs[1].pool.configs


@pytest.mark.parametrize(
    ("size", "budget", "message"),
    [
        (0, 5, "ensemble size must be a positive integer, got 0"),
        (2.5, 5, "ensemble size must be a positive integer, got 2.5"),
        (3, 0, r"budget must be a positive integer \(.*\), got 0"),
    ],
)
def test_bad_sizes_and_budgets(size, budget, message):
    optimizer = GPEIOptimizer(SPACE, seed=0, n_initial=2)
    with pytest.raises(ValueError, match=message):
        segor_search(optimizer, synthetic_evaluator, Y, FOLDS, ensemble_size=size).run(
            budget
        )


def brute_force_sizing(result, sizing):
    """Replay SEGOR s.3.2 with explicit loops over the pool: (action, loss, members) per step."""
    predictions, ok = result.pool.predictions, result.pool.ok
    members, steps = [], []
    for i in range(len(result.history)):
        usable = [h for h in range(i + 1) if ok[h]]
        j = i % len(members) if members else None
        others = [m for k, m in enumerate(members) if k != j]
        replace = min((brute_force_loss(predictions, [*others, h]), h) for h in usable)
        options = [("replace", replace[0], replace[1])]
        if members:
            grow = min(
                (brute_force_loss(predictions, [*members, h]), h) for h in usable
            )
            options.append(("grow", grow[0], grow[1]))
            if sizing == "dynamic" and others:
                options.append(("shrink", brute_force_loss(predictions, others), None))
        action, loss, h = min(options, key=lambda option: option[1])
        if action == "replace" and j is not None:
            members[j] = h
        elif action in ("replace", "grow"):
            members.append(h)
        else:
            del members[j]
        steps.append((action, loss, list(members)))
    return steps


@pytest.mark.parametrize("sizing", ["growing", "dynamic"])
def test_growing_and_dynamic_sizing_match_a_brute_force_reading_of_s32(sizing):
    def never_fails(config):
        return synthetic_evaluator({**config, "a": min(config["a"], 0.8)})

    optimizer = RecordingOptimizer(
        SPACE, seed=4, n_initial=6, gp_restarts=1, n_candidates=256
    )
    result = segor_search(optimizer, never_fails, Y, FOLDS, sizing=sizing).run(20)
    steps = brute_force_sizing(result, sizing)
    for record, (action, loss, members) in zip(result.history, steps, strict=True):
        assert record.action == action
        assert record.ensemble_loss == pytest.approx(loss, rel=1e-10)
        assert record.ensemble_size == len(members)
    assert result.members == steps[-1][2]
    actions = {record.action for record in result.history}
    assert "grow" in actions  # the run exercised more than replacement
    if sizing == "dynamic":
        assert "shrink" in actions  # seed 4 removes a member at iteration 4
    if sizing == "growing":
        assert "shrink" not in actions
        sizes = [record.ensemble_size for record in result.history]
        assert sizes == sorted(sizes)  # a growing ensemble never shrinks


# A pool built by hand for the sizing rules of SEGOR s.3.2. Each model's
# residual (prediction - Y) is a multiple of an orthonormal direction (mean
# square 1, mutually orthogonal), so with the equal folds here the CV MSE of a
# mean ensemble is |mean of its residuals|^2, e.g. L(r0, r1) = (1 + 0.64) / 4.
DIRECTIONS = (
    np.sqrt(N_SAMPLES)
    * np.linalg.qr(np.random.default_rng(11).normal(size=(N_SAMPLES, 5)))[0].T
)
U, V, S, W, Z = DIRECTIONS
HAND_RESIDUALS = [
    U,  # 0: alone loss 1
    0.8 * V,  # 1: better alone (0.64), best next to 0 (0.41)
    -U + 0.3 * S,  # 2: nearly cancels 0: 0, 1, 2 together lose only 0.73 / 9
    3.0 * W,  # 3: useless
    2.0 * Z,  # 4: useless; by now 1 spoils the pair 0, 2 (0.09 / 4 alone)
]


def hand_built_search(variant, ensemble_size=12):
    """Run SEGOR `variant` on the hand-built pool; the evaluator ignores the
    configuration and hands out the pool's predictions in order."""
    rows = iter([Y + r for r in HAND_RESIDUALS])

    def evaluator(config):
        return TrialResult(next(rows), 0.0)

    sizing, loss = segor_variant(variant)
    result = segor_search(
        RandomSearch(SPACE, seed=0),
        evaluator,
        Y,
        FOLDS,
        ensemble_size=ensemble_size,
        loss=loss,
        sizing=sizing,
    ).run(len(HAND_RESIDUALS))
    np.testing.assert_allclose(
        result.pool.predictions, Y + np.array(HAND_RESIDUALS), rtol=0, atol=1e-12
    )
    return result


def test_hand_built_pool_losses_are_what_the_design_says():
    rows = Y + np.array(HAND_RESIDUALS)
    for members, loss in [
        ([0], 1.0),
        ([1], 0.64),
        ([0, 1], 0.41),
        ([0, 1, 2], 0.73 / 9),
        ([0, 2], 0.09 / 4),
        ([0, 1, 2, 0], 1.73 / 16),
    ]:
        assert brute_force_loss(rows, members) == pytest.approx(loss, rel=1e-12)


def assert_history(result, expected):
    """expected: (action, members after the step) per iteration; losses by hand."""
    rows = result.pool.predictions
    assert [r.action for r in result.history] == [a for a, _ in expected]
    assert [r.ensemble_size for r in result.history] == [len(m) for _, m in expected]
    for record, (_, members) in zip(result.history, expected, strict=True):
        assert record.ensemble_loss == pytest.approx(
            brute_force_loss(rows, members), rel=1e-12
        ), record.iteration
    assert result.members == expected[-1][1]


def test_best_dynamic_shrinks_when_dropping_a_member_beats_every_other_move():
    result = hand_built_search("d-m")
    assert_history(
        result,
        [
            ("replace", [0]),  # the first member of an empty ensemble
            ("grow", [0, 1]),
            ("grow", [0, 1, 2]),
            ("replace", [0, 1, 2]),  # j = 0 is refilled with model 0 itself
            ("shrink", [0, 2]),  # j = 1: model 1 leaves
        ],
    )
    # iteration 4, j = 1: by hand, removing model 1 (0.09 / 4) beats replacing
    # it by any model of the pool (best: itself, 0.73 / 9) and adding any model
    # (best: 1.73 / 16), and lowers the loss the ensemble had (0.73 / 9)
    rows = result.pool.predictions
    shrink = brute_force_loss(rows, [0, 2])
    replace = min(brute_force_loss(rows, [0, h, 2]) for h in range(5))
    grow = min(brute_force_loss(rows, [0, 1, 2, h]) for h in range(5))
    assert shrink == pytest.approx(0.09 / 4)
    assert replace == pytest.approx(0.73 / 9) and grow == pytest.approx(1.73 / 16)
    assert shrink < 0.5 * min(replace, grow)
    assert result.history[4].ensemble_loss < result.history[3].ensemble_loss
    assert result.history[4].slot == 1


def test_best_growing_grows_when_adding_beats_replacing_and_never_shrinks():
    result = hand_built_search("g-m")
    assert_history(
        result,
        [
            ("replace", [0]),
            ("grow", [0, 1]),
            ("grow", [0, 1, 2]),
            ("replace", [0, 1, 2]),
            ("replace", [0, 1, 2]),  # j = 1 refilled with model 1: no shrinking
        ],
    )
    rows = result.pool.predictions
    # iteration 1: replacing model 0 by model 1 would already lower the loss
    # from 1 to 0.64, but adding model 1 lowers it further, to 0.41
    assert brute_force_loss(rows, [1]) == pytest.approx(0.64)
    assert result.history[1].ensemble_loss == pytest.approx(0.41)
    # iteration 2: the best replacement keeps 0.41, adding model 2 gives 0.73 / 9
    assert min(brute_force_loss(rows, [h, 1]) for h in range(3)) == pytest.approx(0.41)
    assert result.history[2].ensemble_loss == pytest.approx(0.73 / 9)
    # iteration 4: dropping model 1 would give 0.09 / 4, yet growing keeps it
    assert result.history[4].ensemble_loss == pytest.approx(0.73 / 9)


def test_fixed_size_only_replaces_and_never_exceeds_m():
    result = hand_built_search("f-m", ensemble_size=2)
    assert [r.slot for r in result.history] == [0, 1, 0, 1, 0]
    assert_history(
        result,
        [
            ("replace", [0]),  # slot 0 filled, slot 1 still empty
            ("replace", [0, 1]),
            ("replace", [0, 1]),  # slot 0: model 0 is still the best next to 1
            ("replace", [0, 2]),  # slot 1: model 2 cancels model 0
            ("replace", [0, 2]),
        ],
    )
    # at iteration 2 growing to [0, 1, 2] would give 0.73 / 9 < 0.41: m = 2 holds
    assert result.history[2].ensemble_loss == pytest.approx(0.41)
    assert brute_force_loss(result.pool.predictions, [0, 1, 2]) < 0.41


def test_unknown_sizing_is_named():
    optimizer = GPEIOptimizer(SPACE, seed=0)
    with pytest.raises(ValueError, match="unknown ensemble size method 'random'"):
        segor_search(optimizer, synthetic_evaluator, Y, FOLDS, sizing="random")


def test_an_optimizer_that_was_told_points_is_refused():
    optimizer = GPEIOptimizer(SPACE, seed=0)
    optimizer.tell_many([{"a": 0.5, "b": 0.5}], [1.0])
    with pytest.raises(
        ValueError, match="needs a fresh optimizer; this one was told 1 points"
    ):
        segor_search(optimizer, synthetic_evaluator, Y, FOLDS)


def test_an_interrupted_search_keeps_what_it_trained():
    calls = {"n": 0}

    def interrupted_on_fifth_call(config):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return synthetic_evaluator({**config, "a": min(config["a"], 0.8)})

    optimizer = GPEIOptimizer(
        SPACE, seed=0, n_initial=3, gp_restarts=1, n_candidates=128
    )
    search = segor_search(
        optimizer, interrupted_on_fifth_call, Y, FOLDS, ensemble_size=3
    )
    with pytest.raises(
        SearchInterrupted, match="stopped after 4 of 10 iterations \\(KeyboardInterrupt"
    ) as caught:
        search.run(10)
    result = caught.value.result
    assert isinstance(caught.value.__cause__, KeyboardInterrupt)
    assert len(result.pool) == 4 and len(result.history) == 4
    assert len(result.single_losses) == 4 and len(result.members) == 3
    assert np.isfinite(result.pool.predictions).all()


@pytest.mark.parametrize("optimizer_class", [GPEIOptimizer, RandomSearch])
def test_single_best_search_tells_each_models_own_cv_loss(optimizer_class):
    options = {"n_initial": 4, "gp_restarts": 1, "n_candidates": 128}
    optimizer = optimizer_class(
        SPACE, seed=2, **(options if optimizer_class is GPEIOptimizer else {})
    )
    result = single_best_search(optimizer, synthetic_evaluator, Y, FOLDS).run(15)
    predictions, ok = result.pool.predictions, result.pool.ok
    own = [brute_force_loss(predictions, [h]) if ok[h] else math.nan for h in range(15)]
    np.testing.assert_allclose(optimizer.values, own, rtol=1e-10)
    np.testing.assert_allclose(result.single_losses, own, rtol=1e-10)
    best = int(np.nanargmin(own))
    assert result.members == [best] and result.member_weights == {best: 1.0}
    # each iteration selects the best model so far ("none" until one succeeds)
    for i, record in enumerate(result.history):
        so_far = own[: i + 1]
        if np.isfinite(so_far).any():
            assert record.action == "select", i
            assert record.ensemble_loss == pytest.approx(np.nanmin(so_far)), i
            assert record.ensemble_size == 1, i
        else:
            assert record.action == "none", i
            assert math.isnan(record.ensemble_loss) and record.ensemble_size == 0, i


def smbo_pool(budget=14):
    optimizer = GPEIOptimizer(
        SPACE, seed=3, n_initial=4, gp_restarts=1, n_candidates=128
    )
    return single_best_search(optimizer, synthetic_evaluator, Y, FOLDS).run(budget)


def test_posthoc_selection_is_greedy_selection_on_the_saved_pool():
    source = smbo_pool()
    result = posthoc_selection(source, Y, FOLDS, max_size=10, warm_start=3)
    expected = greedy_selection_with_replacement(
        source.pool.predictions, Y, FOLDS, squared_error, max_size=10, warm_start=3
    )
    assert result.members == expected.members.tolist()
    assert result.history[-1].ensemble_loss == pytest.approx(expected.loss_curve[-1])
    assert result.member_weights == pytest.approx(
        {i: w for i, w in enumerate(expected.weights) if w > 0}
    )
    # the chosen prefix is no worse than the best single model of the pool
    assert expected.loss <= np.nanmin(source.single_losses) + 1e-12


def test_posthoc_bfgs_weights_do_not_lose_to_the_counts():
    source = smbo_pool()
    counts = posthoc_selection(source, Y, FOLDS, max_size=10)
    fitted = posthoc_selection(source, Y, FOLDS, max_size=10, weighting="bfgs")

    def cv_loss(weights):
        prediction = sum(w * source.pool.predictions[i] for i, w in weights.items())
        return np.mean([np.mean((prediction - Y)[FOLDS == k] ** 2) for k in range(5)])

    assert sum(fitted.member_weights.values()) == pytest.approx(1.0)
    assert set(fitted.member_weights) == set(counts.member_weights)
    assert cv_loss(fitted.member_weights) <= cv_loss(counts.member_weights) + 1e-12


def test_posthoc_bagged_weights_are_the_bagged_selection_and_the_run_reports_them():
    source = smbo_pool()
    bagged = posthoc_selection(
        source, Y, FOLDS, max_size=10, weighting="bagged", seed=4
    )
    weights = bagged_selection(
        source.pool.predictions, Y, FOLDS, squared_error, BAGS, BAG_STEPS, 4
    )
    assert bagged.member_weights == pytest.approx(
        {i: w for i, w in enumerate(weights) if w > 0}
    )
    prediction = sum(w * source.pool.predictions[i] for i, w in enumerate(weights))
    loss = np.mean([np.mean((prediction - Y)[FOLDS == k] ** 2) for k in range(5)])
    # the greedy steps, then the bagged ensemble, the one the run reports
    assert [r.action for r in bagged.history] == ["add"] * 10 + ["bag"]
    assert bagged.history[-1].ensemble_loss == pytest.approx(loss)
    joined = join_selection(source, bagged)
    assert joined.history[-1].ensemble_loss == pytest.approx(loss)
    assert joined.history[-1].ensemble_size == np.count_nonzero(weights)
    # it is shipped, so reported, also where a greedy prefix had a lower CV loss
    higher = replace(
        bagged,
        history=[
            *bagged.history[:-1],
            replace(bagged.history[-1], ensemble_loss=1.0, ensemble_size=3),
        ],
    )
    assert min(r.ensemble_loss for r in bagged.history[:-1]) < 1.0
    kept = join_selection(source, higher).history[-1]
    assert (kept.action, kept.ensemble_loss, kept.ensemble_size) == ("bag", 1.0, 3)


def test_bagged_members_are_chosen_again_once_the_pool_has_grown_by_a_quarter():
    source = smbo_pool()
    chosen = objective("regression", "mse")
    members = BaggedMembers(chosen, Y, FOLDS, seed=1)

    def bagged_at(size):
        pool = Pool(N_SAMPLES)
        for i in range(size):
            pool.add(
                source.pool.configs[i],
                source.pool.encoded[i],
                TrialResult(source.pool.predictions[i], 0.0),
            )
        return pool, sorted(bagged_weights(pool, chosen, Y, FOLDS, 1))

    pool, at_8 = bagged_at(8)
    assert members(pool, [0]) == sorted({*at_8, 0})
    # 9 < 8 * 1.25: the selection on 8 models, joined with the search's members
    pool, _ = bagged_at(9)
    assert members(pool, [8]) == sorted({*at_8, 8})
    pool, at_10 = bagged_at(10)
    assert members(pool, []) == at_10


def test_a_joined_posthoc_run_reports_the_kept_prefix_not_a_warm_start_step():
    # The exact model, then two worse ones: the warm start forces all three in,
    # so the kept ensemble (their mean, Y + 1) is worse than its first step alone.
    source = pool_of([Y, Y + 1.0, Y + 2.0])
    source.history = [
        IterationRecord(2, -1, 2, "ok", "select", 0.0, 0.0, 1, math.nan, 0.0)
    ]
    selected = posthoc_selection(source, Y, FOLDS, max_size=3, warm_start=3)
    assert [r.action for r in selected.history] == ["warm_start"] * 2 + ["add"]
    assert [r.ensemble_loss for r in selected.history] == pytest.approx([0, 0.25, 1])
    joined = join_selection(source, selected)
    assert sorted(joined.members) == [0, 1, 2]
    assert joined.history[-1].ensemble_loss == pytest.approx(1.0)
    assert joined.history[-1].ensemble_size == 3


def test_posthoc_refuses_a_pool_from_other_data_and_unknown_weightings():
    source = smbo_pool(budget=6)
    with pytest.raises(ValueError, match="the saved pool was evaluated on other data"):
        posthoc_selection(source, Y + 1.0, FOLDS)
    with pytest.raises(
        ValueError,
        match="weighting='softmax' is not one of \\['counts', 'bfgs', 'bagged'\\]",
    ):
        posthoc_selection(source, Y, FOLDS, weighting="softmax")


def test_esmbo_matches_a_brute_force_reading_of_algorithm_2():
    n_replicas, budget = 3, 12
    optimizer = RecordingOptimizer(
        SPACE, seed=5, n_initial=4, gp_restarts=1, n_candidates=128
    )
    search = esmbo_search(
        optimizer, synthetic_evaluator, Y, FOLDS, n_replicas=n_replicas, seed=9
    )
    result = search.run(budget)
    predictions, ok = result.pool.predictions, result.pool.ok
    # each replica's weights are a bootstrap of the n samples: counts summing to n
    counts = search.strategy.replica_weights * N_SAMPLES
    np.testing.assert_allclose(counts, np.round(counts))
    assert np.allclose(counts.sum(axis=1), N_SAMPLES)

    def risk(h, v):
        return (
            sum(c * (predictions[h, i] - Y[i]) ** 2 for i, c in enumerate(counts[v]))
            / N_SAMPLES
        )

    for i, record in enumerate(result.history):
        v = i % n_replicas
        assert record.slot == v
        # SMBO of replica v sees the risks on S'_v of every model trained so far
        expected = [risk(h, v) if ok[h] else math.nan for h in range(i)]
        np.testing.assert_allclose(optimizer.retargets[i], expected, rtol=1e-10)
    # the ensemble: each replica's argmin over the whole pool, weight = wins / N
    winners = [
        min((risk(h, v), h) for h in range(budget) if ok[h])[1]
        for v in range(n_replicas)
    ]
    expected_weights = {}
    for h in winners:
        expected_weights[h] = expected_weights.get(h, 0.0) + 1 / n_replicas
    assert result.member_weights == pytest.approx(expected_weights)
    assert sorted(result.members) == sorted(winners)


def test_esmbo_splits_a_tied_replica_evenly():
    def always_the_same(config):
        return TrialResult(Y + 0.1 * BASIS[0], 0.0)  # every model predicts alike

    optimizer = GPEIOptimizer(SPACE, seed=0, n_initial=3)
    result = esmbo_search(optimizer, always_the_same, Y, FOLDS, n_replicas=2).run(4)
    assert result.member_weights == pytest.approx({0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25})
    with pytest.raises(
        ValueError, match="n_replicas must be a positive integer, got 0"
    ):
        esmbo_search(GPEIOptimizer(SPACE), always_the_same, Y, FOLDS, n_replicas=0)


def pool_of(rows):
    pool = Pool(N_SAMPLES)
    for row in rows:
        pool.add(
            {},
            np.zeros(1),
            TrialResult(row, 0.0)
            if row is not None
            else TrialResult(None, 0.0, "boom"),
        )
    singles = np.array(
        [
            brute_force_loss(np.array([r]), [0]) if r is not None else np.nan
            for r in rows
        ]
    )
    return EnsembleSearchResult(pool, [], singles, target=Y)


def test_agnostic_bayes_weights_follow_the_posterior_of_being_best():
    good = Y + 0.05 * BASIS[0]
    bad = Y + 1.5 * BASIS[1]
    source = pool_of([good, bad, None, good.copy()])
    result = agnostic_bayes_selection(source, Y, FOLDS, n_samples=2000, seed=1)
    weights = result.member_weights
    # the two identical good models share the posterior; the bad and the failed get none
    assert set(weights) == {0, 3}
    assert weights[0] == pytest.approx(0.5) and weights[3] == pytest.approx(0.5)
    prediction = sum(w * source.pool.predictions[i] for i, w in weights.items())
    expected = np.mean([np.mean((prediction - Y)[FOLDS == k] ** 2) for k in range(5)])
    assert result.history[-1].ensemble_loss == pytest.approx(expected)


def test_agnostic_bayes_spreads_over_equally_good_different_models():
    rng = np.random.default_rng(7)
    rows = [Y + 0.3 * rng.normal(size=N_SAMPLES) for _ in range(3)]
    for posterior in ("bootstrap", "bayesian_bootstrap", "student_t", "dirichlet"):
        weights = agnostic_bayes_selection(
            pool_of(rows), Y, FOLDS, posterior=posterior, n_samples=300
        ).member_weights
        assert len(weights) == 3 and sum(weights.values()) == pytest.approx(1.0), (
            posterior
        )
        assert max(weights.values()) < 0.95, posterior
    with pytest.raises(ValueError, match="posterior='gibbs' is not one of"):
        agnostic_bayes_selection(pool_of(rows), Y, FOLDS, posterior="gibbs")


def test_argmin_and_softmin_baselines_weigh_a_pool():
    good = Y + 0.05 * BASIS[0]
    fair = Y + 0.3 * BASIS[1]
    bad = Y + 1.5 * BASIS[2]
    source = pool_of([fair, good, None, bad])
    argmin = agnostic_bayes_selection(source, Y, FOLDS, posterior="argmin")
    assert argmin.member_weights == {1: 1.0}
    softmin = agnostic_bayes_selection(source, Y, FOLDS, posterior="softmin")
    weights = softmin.member_weights
    # Gibbs weights decrease with the CV loss; the failed trial gets none
    assert 2 not in weights and sum(weights.values()) == pytest.approx(1.0)
    assert weights[1] >= weights.get(0, 0.0) >= weights.get(3, 0.0)
    # tuning picks the temperature whose ensemble has the lowest CV loss, so it
    # is never worse than the single best model (the smallest temperature)
    assert softmin.history[-1].ensemble_loss <= argmin.history[-1].ensemble_loss + 1e-12


# Classification: 3 classes; each configuration flips a different, smoothly
# varying subset of the labels, so models make different mistakes.
LABELS = np.arange(N_SAMPLES) % 3
NOISE = np.random.default_rng(5).random((2, N_SAMPLES))


def synthetic_classifier(config):
    """Class codes (n,): the true labels with the samples where a noise field exceeds
    a threshold set by (a, b) shifted by one class; a > 0.85 fails."""
    a, b = config["a"], config["b"]
    if a > 0.85:
        return TrialResult(None, 0.0, "ValueError: a too large")
    wrong = NOISE[0] * a + NOISE[1] * (1 - b) > 0.6
    return TrialResult(np.where(wrong, (LABELS + 1) % 3, LABELS).astype(float), 0.001)


def brute_force_squared_margin(pool_predictions, member_indices):
    """SEGO eq. 7 and 9, literally: M = 1/m sum_h [1 - 2 l01(h)], loss (1 - M)^2 / 4."""
    members = pool_predictions[member_indices]
    margin = np.mean([1 - 2 * (member != LABELS) for member in members], axis=0)
    per_sample = (1 - margin) ** 2 / 4
    return np.mean([np.mean(per_sample[FOLDS == k]) for k in range(5)])


def test_sego_matches_a_brute_force_reading_of_its_algorithm_1():
    size, budget = 3, 15
    optimizer = RecordingOptimizer(
        SPACE, seed=2, n_initial=5, gp_restarts=1, n_candidates=256
    )
    result = sego_search(
        optimizer, synthetic_classifier, LABELS, FOLDS, ensemble_size=size
    ).run(budget)
    predictions = result.pool.predictions  # class codes, NaN rows for failures
    assert result.task == "classification"
    assert not all(result.pool.ok)
    slots = [None] * size
    for i, record in enumerate(result.history):
        j = i % size
        others = [s for k, s in enumerate(slots) if k != j and s is not None]
        expected_targets = [
            brute_force_squared_margin(predictions, [*others, h])
            if result.pool.ok[h]
            else math.nan
            for h in range(i)
        ]
        np.testing.assert_allclose(optimizer.retargets[i], expected_targets, rtol=1e-10)
        candidates = [
            (brute_force_squared_margin(predictions, [*others, h]), h)
            for h in range(i + 1)
            if result.pool.ok[h]
        ]
        if not candidates:
            continue
        best_loss, slots[j] = min(candidates)
        assert record.ensemble_loss == pytest.approx(best_loss, rel=1e-10)
        # a single model's loss is its CV error rate
        errors = [
            np.mean([np.mean((predictions[h] != LABELS)[FOLDS == k]) for k in range(5)])
            for h in range(i + 1)
            if result.pool.ok[h]
        ]
        assert record.best_single_loss == pytest.approx(min(errors), rel=1e-10)
    assert sorted(result.members) == sorted(s for s in slots if s is not None)


def test_classification_single_best_esmbo_and_posthoc_use_error_rates():
    def cv_error(row):
        return np.mean([np.mean((row != LABELS)[FOLDS == k]) for k in range(5)])

    single = single_best_search(
        RandomSearch(SPACE, seed=0),
        synthetic_classifier,
        LABELS,
        FOLDS,
        task="classification",
    ).run(12)
    rows = single.pool.predictions
    ok = np.flatnonzero(single.pool.ok)
    assert single.members == [min(ok, key=lambda h: cv_error(rows[h]))]
    np.testing.assert_allclose(
        single.single_losses[ok], [cv_error(rows[h]) for h in ok], rtol=1e-12
    )

    search = esmbo_search(
        RandomSearch(SPACE, seed=0),
        synthetic_classifier,
        LABELS,
        FOLDS,
        n_replicas=4,
        task="classification",
    )
    esmbo = search.run(12)
    rows = esmbo.pool.predictions
    ok = np.flatnonzero(esmbo.pool.ok)
    # Algorithm 2: each replica's argmin of its resampled error rate, ties split
    expected = {}
    for replica in search.strategy.replica_weights:
        risks = {h: float((rows[h] != LABELS) @ replica) for h in ok}
        winners = [h for h in ok if risks[h] == min(risks.values())]
        for h in winners:
            expected[h] = expected.get(h, 0.0) + 1 / (len(winners) * 4)
    assert esmbo.member_weights == pytest.approx(expected)

    posthoc = posthoc_selection(single, LABELS, FOLDS, max_size=5)
    assert posthoc.task == "classification"
    # by default the selection minimizes the CV log-loss of the mean probabilities
    log_loss = objective("classification", "log_loss")
    by_log_loss = greedy_selection_with_replacement(
        single.pool.member_outputs(log_loss.outputs),
        log_loss.target(LABELS),
        FOLDS,
        log_loss.per_sample_loss,
        5,
        0,
    )
    assert posthoc.members == by_log_loss.members.tolist()
    # loss "error": the majority vote's CV error (SEGO eq. 3-4), best prefix kept
    voted = posthoc_selection(single, LABELS, FOLDS, loss="error", max_size=5)
    vote = greedy_vote_selection(single.pool.predictions, LABELS, FOLDS, 5, 0)
    assert voted.members == vote.members.tolist()
    assert (posthoc.objective, voted.objective) == ("log_loss", "error")
    margin = posthoc_selection(single, LABELS, FOLDS, loss="squared_margin", max_size=5)
    assert brute_force_squared_margin(single.pool.predictions, margin.members) == (
        pytest.approx(min(record.ensemble_loss for record in margin.history))
    )
    # agnostic Bayes tunes rho on the weighted vote's CV error
    weighted = agnostic_bayes_selection(single, LABELS, FOLDS, n_samples=200)
    weights = np.zeros(len(single.pool))
    for index, weight in weighted.member_weights.items():
        weights[index] = weight
    assert weighted.history[-1].ensemble_loss == pytest.approx(
        weighted_vote_cv_error(single.pool.predictions, LABELS, FOLDS)(weights)
    )
    with pytest.raises(ValueError, match="evaluated on other data"):
        posthoc_selection(single, (LABELS + 1) % 3, FOLDS)
    with pytest.raises(ValueError, match="'mse' does not apply to classification"):
        posthoc_selection(single, LABELS, FOLDS, loss="mse")


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("f-m", ("fixed", "m")),
        ("g-h", ("growing", "h")),
        ("d-t", ("dynamic", "t")),
        ("best-dynamic-huber", ("dynamic", "huber")),
        ("BG-m", ("growing", "m")),
    ],
)
def test_segor_variant_reads_the_papers_shorthand(variant, expected):
    assert segor_variant(variant) == expected


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("fm", "'fm' is not <sizing>-<loss>"),
        ("x-m", "unknown ensemble size method 'x'"),
        ("f-q", "unknown regression loss 'q'"),
    ],
)
def test_segor_variant_rejects_bad_names(variant, message):
    with pytest.raises(ValueError, match=message):
        segor_variant(variant)


def test_a_bad_variant_names_both_parts_and_shows_the_grammar():
    with pytest.raises(ValueError) as error:
        segor_variant("zz-q")
    message = str(error.value)
    assert "unknown ensemble size method 'zz' and unknown regression loss 'q'" in (
        message
    )
    assert "<sizing>-<loss>: sizing f (fixed, F), g (best-growing, BG)" in message


# --- searches whose trials fail ------------------------------------------------------


def failing_evaluator(errors):
    """Fails every trial, cycling through `errors`; counts its calls."""

    def evaluate(config):
        evaluate.calls += 1
        return TrialResult(None, 0.0, errors[(evaluate.calls - 1) % len(errors)])

    evaluate.calls = 0
    return evaluate


def random_segor(evaluate, **kwargs):
    return segor_search(RandomSearch(SPACE, seed=0), evaluate, Y, FOLDS, 3, **kwargs)


def test_a_search_whose_first_trials_all_fail_stops_listing_their_errors():
    evaluate = failing_evaluator(
        ["ValueError: Input X contains infinity", "RuntimeError: boom"]
    )
    with pytest.raises(AllTrialsFailed) as error:
        random_segor(evaluate).run(30, model_name="svr")
    assert evaluate.calls == MAX_INITIAL_FAILURES == 10
    message = str(error.value)
    assert (
        "the first 10 trials of model 'svr' all failed, so the search stopped "
        "before its budget of 30 (max_initial_failures=10)" in message
    )
    assert (
        "Distinct errors: (1) ValueError: Input X contains infinity [5 trials]; "
        "(2) RuntimeError: boom [5 trials]." in message
    )
    # the failed trials travel with the error, for the trial history
    assert isinstance(error.value, SearchInterrupted)
    result = error.value.result
    assert len(result.pool) == len(result.history) == 10
    assert not result.pool.ok.any() and result.members == []
    assert error.value.errors == [
        "ValueError: Input X contains infinity",
        "RuntimeError: boom",
    ]


def test_the_number_of_initial_failures_is_a_parameter():
    evaluate = failing_evaluator(["RuntimeError: boom"])
    with pytest.raises(AllTrialsFailed, match="the first 3 trials all failed"):
        random_segor(evaluate).run(30, max_initial_failures=3)
    assert evaluate.calls == 3


def test_a_search_that_ends_without_a_success_raises_instead_of_returning():
    for budget, limit in [(5, 10), (12, None)]:
        evaluate = failing_evaluator(["RuntimeError: boom"])
        with pytest.raises(
            AllTrialsFailed, match=f"all {budget} trials failed; there is no model"
        ):
            random_segor(evaluate).run(budget, max_initial_failures=limit)
        assert evaluate.calls == budget


def test_one_success_among_the_first_trials_lets_the_search_go_on():
    def ninth_succeeds(config):
        ninth_succeeds.calls += 1
        if ninth_succeeds.calls == 9 or ninth_succeeds.calls > 12:
            return synthetic_evaluator({**config, "a": min(config["a"], 0.8)})
        return TrialResult(None, 0.0, "RuntimeError: boom")

    ninth_succeeds.calls = 0
    result = random_segor(ninth_succeeds).run(20)
    assert ninth_succeeds.calls == 20 and result.pool.ok.sum() == 9


@pytest.mark.parametrize("value", [0, -1, 2.5, "10", True])
def test_bad_max_initial_failures_and_budgets_are_named(value):
    with pytest.raises(ValueError, match="max_initial_failures must be an integer"):
        random_segor(synthetic_evaluator).run(5, max_initial_failures=value)
    if value != 0:
        with pytest.raises(ValueError, match="budget must be a positive integer"):
            random_segor(synthetic_evaluator).run(value)
