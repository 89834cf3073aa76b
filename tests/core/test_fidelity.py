"""Multi-fidelity schedules: brackets against hand-worked tables (Li et al.
2017's R = 81, folds, rows), promotion, the bracket driver walking a whole
Hyperband schedule, resource budgets, BOHB's model budget and the `fidelity`
block's validation."""

import itertools
import math
import re

import numpy as np
import pytest

from ensemble_bo.core.fidelity import (
    BOHB_RANDOM_FRACTION,
    BracketRun,
    BracketSchedule,
    HyperbandSchedule,
    Rung,
    bohb_model_budget,
    full_fidelity_equivalents,
    hyperband_brackets,
    max_bracket_index,
    promote,
    successive_halving_rungs,
    total_resource,
)
from ensemble_bo.core.settings import FidelitySettings


def table(brackets):
    """Brackets as lists of (n_configs, resource) pairs, to compare with tables."""
    return [
        [(rung.n_configs, rung.resource) for rung in bracket] for bracket in brackets
    ]


# Li et al. 2017's worked table for R = 81, eta = 3, in units of r_min = 1.
HYPERBAND_81 = [
    [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
    [(34, 3), (11, 9), (3, 27), (1, 81)],
    [(15, 9), (5, 27), (1, 81)],
    [(8, 27), (2, 81)],
    [(5, 81)],
]


def test_hyperband_matches_the_papers_table_for_r_81_and_eta_3():
    assert table(hyperband_brackets(1, 81, 3)) == HYPERBAND_81
    assert table(hyperband_brackets(1, 81, 3, integer=True)) == HYPERBAND_81
    # The same brackets in other units: resources scale, counts do not.
    scaled = table(hyperband_brackets(0.5, 40.5, 3))
    assert scaled == [[(n, r / 2) for n, r in bracket] for bracket in HYPERBAND_81]


def test_the_number_of_brackets_is_exact_at_powers_of_eta():
    # log(243) / log(3) is 4.999999999999999 and log(1000) / log(10) is
    # 2.9999999999999996 in floating point; 0.6 / 0.2 is 2.9999999999999996.
    assert math.floor(math.log(243) / math.log(3)) == 4
    assert max_bracket_index(1, 81, 3) == 4
    assert max_bracket_index(1, 243, 3) == 5
    assert max_bracket_index(1, 1000, 10) == 3
    assert max_bracket_index(0.2, 0.6, 3) == 1
    assert max_bracket_index(1, 80, 3) == 3
    assert max_bracket_index(5, 5, 3) == 0
    assert len(hyperband_brackets(1, 243, 3)) == 6
    assert table(hyperband_brackets(0.2, 0.6, 3))[0] == [(3, 0.2), (1, 0.6)]


def test_hyperband_on_five_folds_rounds_rungs_down_to_whole_folds():
    # eta 2: s_max = floor(log2 5) = 2. s=2: n = ceil(3/3 * 4) = 4 at 5/4,
    # 5/2, 5 folds -> 1, 2, 5; s=1: n = ceil(3/2 * 2) = 3 at 5/2 -> 2;
    # s=0: n = ceil(3/1 * 1) = 3 at 5.
    assert table(hyperband_brackets(1, 5, 2, integer=True)) == [
        [(4, 1), (2, 2), (1, 5)],
        [(3, 2), (1, 5)],
        [(3, 5)],
    ]
    # eta 3: s_max = 1. s=1: n = ceil(2/2 * 3) = 3 at 5/3 -> 1; s=0: n = 2.
    assert table(hyperband_brackets(1, 5, 3, integer=True)) == [
        [(3, 1), (1, 5)],
        [(2, 5)],
    ]
    # Without rounding the same brackets keep the published fractions.
    assert table(hyperband_brackets(1, 5, 2))[0] == [(4, 1.25), (2, 2.5), (1, 5.0)]
    for bracket in hyperband_brackets(1, 5, 2, integer=True):
        assert all(isinstance(rung.resource, int) for rung in bracket)


def test_hyperband_on_row_fractions_aligns_rungs_on_all_rows():
    # 0.1 .. 1 with eta 3: s_max = 2; rungs at 1/9, 1/3 and 1 of the rows
    # (aligned on max_resource, so the first is 1/9, not 0.1).
    # s=2: n = 9; s=1: n = ceil(3/2 * 3) = 5; s=0: n = 3.
    expected = [
        [(9, 1 / 9), (3, 1 / 3), (1, 1.0)],
        [(5, 1 / 3), (1, 1.0)],
        [(3, 1.0)],
    ]
    for got, want in zip(table(hyperband_brackets(0.1, 1.0, 3)), expected, strict=True):
        assert [n for n, _ in got] == [n for n, _ in want]
        assert [r for _, r in got] == pytest.approx([r for _, r in want], rel=1e-15)
    assert table(hyperband_brackets(1 / 9, 1.0, 3)) == table(
        hyperband_brackets(0.1, 1.0, 3)
    )
    assert hyperband_brackets(0.1, 1.0, 3)[0][-1].resource == 1.0


def test_successive_halving_is_hyperbands_most_exploratory_bracket():
    assert table([successive_halving_rungs(81, 1, 81, 3)]) == HYPERBAND_81[:1]
    assert table([successive_halving_rungs(34, 3, 81, 3)]) == HYPERBAND_81[1:2]
    assert table([successive_halving_rungs(100, 1, 81, 3)]) == [
        [(100, 1), (33, 3), (11, 9), (3, 27), (1, 81)]
    ]


def test_successive_halving_moves_its_last_rung_up_to_max_resource():
    # 1 .. 10 with eta 3: min * eta^i gives 1, 3, 9; the last rung goes to
    # 10 (a final factor of 10/3) rather than adding a rung at 10 after 9.
    assert table([successive_halving_rungs(9, 1, 10, 3)]) == [
        [(9, 1.0), (3, 3.0), (1, 10.0)]
    ]
    # Five folds, eta 2: 1, 2, then 5 (not 4, then 5).
    assert table([successive_halving_rungs(4, 1, 5, 2, integer=True)]) == [
        [(4, 1), (2, 2), (1, 5)]
    ]
    assert table([successive_halving_rungs(8, 1, 5, 2, integer=True)]) == [
        [(8, 1), (4, 2), (2, 5)]
    ]
    # A ratio below eta leaves one rung, at full fidelity.
    assert table([successive_halving_rungs(3, 4, 5, 2)]) == [[(3, 5.0)]]
    # Rows: 0.1, 0.3, then all rows (0.9 moved up to 1).
    rungs = successive_halving_rungs(9, 0.1, 1.0, 3)
    assert [r.n_configs for r in rungs] == [9, 3, 1]
    assert [r.resource for r in rungs] == pytest.approx([0.1, 0.3, 1.0])
    assert rungs[-1].resource == 1.0


def test_successive_halving_needs_a_configuration_left_at_the_top():
    with pytest.raises(ValueError, match="n_configs=80 .* needs n_configs >= 81"):
        successive_halving_rungs(80, 1, 81, 3)
    with pytest.raises(ValueError, match="n_configs must be an integer, got 8.5"):
        successive_halving_rungs(8.5, 1, 81, 3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, 81, 1), "eta must be a finite number > 1, got 1"),
        ((1, 81, 0.5), "eta must be a finite number > 1, got 0.5"),
        ((1, 81, float("inf")), "eta must be a finite number > 1, got inf"),
        ((0, 81, 3), "min_resource must be a finite number > 0, got 0"),
        ((1, -2, 3), "max_resource must be a finite number > 0, got -2"),
        ((9, 3, 3), "min_resource=9 must be <= max_resource=3"),
    ],
)
def test_bracket_arithmetic_refuses_bad_scales_naming_them(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        hyperband_brackets(*args)
    with pytest.raises(ValueError, match=re.escape(message)):
        successive_halving_rungs(1000, *args)


def test_whole_units_refuse_an_eta_that_puts_two_rungs_at_one_resource():
    # 5 / 1.1^k rounded down repeats 2 folds and 1 fold.
    with pytest.raises(ValueError, match="two rungs at resource"):
        hyperband_brackets(1, 5, 1.1, integer=True)
    assert len(hyperband_brackets(1, 5, 1.1)) == 17  # fractions are fine


def test_total_resource_and_full_fidelity_equivalents():
    brackets = hyperband_brackets(1, 81, 3)
    # Each bracket spends about (s_max + 1) * R = 405, as Li et al. intend.
    assert [total_resource(b) for b in brackets] == [405, 363, 351, 378, 405]
    assert full_fidelity_equivalents(brackets[0], 81) == 5
    assert full_fidelity_equivalents(brackets[1], 81) == pytest.approx(363 / 81)
    # Reusing lower rungs' work: 81*1 + 27*(3-1) + 9*(9-3) + 3*(27-9) + 1*(81-27).
    assert total_resource(brackets[0], reuse=True) == 297
    folds = hyperband_brackets(1, 5, 2, integer=True)[0]  # 4@1, 2@2, 1@5
    assert total_resource(folds) == 13
    assert full_fidelity_equivalents(folds, 5) == pytest.approx(2.6)
    assert full_fidelity_equivalents(folds, 5, reuse=True) == pytest.approx(1.8)
    with pytest.raises(ValueError, match="max_resource must be > 0, got 0"):
        full_fidelity_equivalents(folds, 0)


def test_a_full_fidelity_budget_starts_only_the_brackets_that_fit():
    schedule = HyperbandSchedule(1, 81, 3)
    # Costs 5, 4.48, 4.33, 4.67, 5 full-fidelity equivalents, then again.
    assert schedule.brackets_within(4) == []
    assert schedule.brackets_within(5) == [schedule.bracket(0)]
    assert schedule.brackets_within(10) == schedule.brackets[:2]
    within = schedule.brackets_within(30)
    assert within == [*schedule.brackets, schedule.bracket(5)]
    assert sum(full_fidelity_equivalents(b, 81) for b in within) <= 30
    with pytest.raises(ValueError, match="full_fidelity_budget .* got 0"):
        schedule.brackets_within(0)


def test_hyperband_schedule_runs_brackets_s_max_down_to_0_and_cycles():
    schedule = HyperbandSchedule(1, 81, 3)
    assert schedule.s_max == 4 and len(schedule) == 5
    assert [schedule.s(k) for k in range(7)] == [4, 3, 2, 1, 0, 4, 3]
    first_seven = list(itertools.islice(schedule, 7))
    assert table(first_seven) == HYPERBAND_81 + HYPERBAND_81[:2]
    assert schedule.bracket(6) == schedule.brackets[1]
    with pytest.raises(ValueError, match="at least one bracket"):
        BracketSchedule([])


def test_promote_takes_the_lowest_losses_ties_by_index_and_never_nan():
    losses = [0.3, 0.1, math.nan, 0.1, 0.2]
    assert promote(losses, 2) == [1, 3]
    assert promote(losses, 3) == [1, 3, 4]
    assert promote(losses, 10) == [1, 3, 4, 0]  # the NaN stays out
    assert promote(np.array(losses), 0) == []
    assert promote([math.nan, math.nan], 1) == []
    assert promote([math.inf, math.nan, 1.0], 2) == [2, 0]
    assert promote([], 3) == []
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=f"got {bad!r}"):
            promote(losses, bad)


def test_a_bracket_run_promotes_the_best_of_each_rung_by_hand():
    bracket = [Rung(4, 1), Rung(2, 2), Rung(1, 4)]
    run = BracketRun(bracket, config_indices=[10, 11, 12, 13])
    assert run.next_jobs() == [(10, 1), (11, 1), (12, 1), (13, 1)]
    for config, loss in zip([10, 11, 12, 13], [0.5, 0.1, 0.3, 0.1], strict=True):
        run.tell(config, 1, loss)
    # 11 and 13 tie at 0.1: both go up, 11 (listed first) ahead.
    assert run.rung == 1 and run.members(1) == [11, 13]
    assert run.next_jobs() == [(11, 2), (13, 2)]
    run.tell(13, 2, 0.2)
    assert run.next_jobs() == [(11, 2)]  # what is left of the rung
    run.tell(11, 2, 0.4)
    assert run.next_jobs() == [(13, 4)]
    assert run.finished() == {}
    run.tell(13, 4, 0.15)
    assert run.done and run.next_jobs() == []
    assert run.finished() == {13: 0.15}
    assert run.resources_of(13) == [1, 2, 4]
    assert run.resources_of(11) == [1, 2]
    assert run.resources_of(10) == [1]
    assert run.history[-1] == (13, 4, 0.15)
    assert run.losses(0) == {10: 0.5, 11: 0.1, 12: 0.3, 13: 0.1}


def test_a_bracket_run_refuses_results_that_do_not_belong_to_its_rung():
    run = BracketRun([Rung(2, 1), Rung(1, 3)])
    with pytest.raises(ValueError, match=r"config 5 is not in rung 0: \[0, 1\]"):
        run.tell(5, 1, 0.1)
    with pytest.raises(ValueError, match="told at resource 3; rung 0 runs at 1"):
        run.tell(0, 3, 0.1)
    run.tell(0, 1, 0.1)
    with pytest.raises(ValueError, match="config 0 was already told"):
        run.tell(0, 1, 0.2)
    run.tell(1, 1, 0.2)
    run.tell(0, 3, 0.3)
    with pytest.raises(ValueError, match="the bracket is done"):
        run.tell(1, 3, 0.3)
    with pytest.raises(ValueError, match="2 distinct config indices"):
        BracketRun([Rung(2, 1)], config_indices=[4, 4])
    with pytest.raises(ValueError, match="rungs must go up in resource"):
        BracketRun([Rung(2, 3), Rung(1, 1)])


def test_failed_evaluations_are_never_promoted_and_can_end_a_bracket():
    run = BracketRun([Rung(3, 1), Rung(2, 3), Rung(1, 9)])
    run.tell(0, 1, None)
    run.tell(1, 1, 0.5)
    run.tell(2, 1, math.nan)
    assert run.members(1) == [1]  # one promoted where two were published
    run.tell(1, 3, None)
    assert run.done and run.finished() == {}
    assert run.resources_of(1) == [1, 3]


def test_promotion_by_given_losses_overrides_the_single_model_ranking():
    # The told losses are each candidate's own; the search ranks by the loss
    # of the ensemble with the candidate in the slot, which reverses them.
    run = BracketRun([Rung(3, 1), Rung(1, 5)], auto_promote=False)
    for config, own_loss in enumerate([0.1, 0.2, 0.3]):
        run.tell(config, 1, own_loss)
    assert run.awaiting_promotion and run.next_jobs() == []
    with pytest.raises(ValueError, match=r"config 7 is not in rung 0"):
        run.promote_with({7: 0.0})
    assert run.promote_with({0: 0.50, 1: 0.40, 2: 0.35}) == [2]
    assert run.next_jobs() == [(2, 5)]
    run.tell(2, 5, 0.3)
    assert run.done and not run.awaiting_promotion

    partial = BracketRun([Rung(3, 1), Rung(2, 5)], auto_promote=False)
    with pytest.raises(ValueError, match=r"configs \[0, 1, 2\] are not told"):
        partial.promote_with({})
    for config, own_loss in enumerate([0.1, 0.2, 0.3]):
        partial.tell(config, 1, own_loss)
    # Configs left out keep their told loss; a NaN given is never promoted.
    assert partial.promote_with({2: 0.05, 0: math.nan}) == [2, 1]

    automatic = BracketRun([Rung(1, 1)])
    with pytest.raises(ValueError, match="auto_promote=False"):
        automatic.promote_with({0: 0.1})


def fake_loss(config, resource):
    """A learning curve per configuration: its final loss plus a gap that
    shrinks with the resource, so rankings change between rungs."""
    rng = np.random.default_rng(config)
    final, gap = rng.uniform(0, 1), rng.uniform(0, 3)
    return final + gap / resource


def test_the_driver_walks_a_whole_hyperband_schedule():
    schedule = HyperbandSchedule(1, 81, 3, integer=True)
    next_index = 0
    for k in range(len(schedule) + 1):  # every bracket, then the first again
        bracket = schedule.bracket(k)
        indices = list(range(next_index, next_index + bracket[0].n_configs))
        next_index += len(indices)
        run = BracketRun(bracket, indices)
        while not run.done:
            for config, resource in run.next_jobs():
                run.tell(config, resource, fake_loss(config, resource))

        # The same bracket, promoted by hand with sorted().
        expected = indices
        for i, rung in enumerate(bracket):
            assert run.members(i) == expected
            if i + 1 < len(bracket):
                expected = sorted(
                    expected, key=lambda c, r=rung.resource: fake_loss(c, r)
                )[: bracket[i + 1].n_configs]
        assert sorted(run.finished()) == sorted(expected)
        assert len(run.finished()) == bracket[-1].n_configs

        # Each configuration ran exactly its rungs' resources, lowest first.
        resources = [rung.resource for rung in bracket]
        reached = [0] * len(bracket)
        for config in indices:
            seen = run.resources_of(config)
            assert seen == resources[: len(seen)]
            reached[len(seen) - 1] += 1
        stopped = [
            rung.n_configs - (bracket[i + 1].n_configs if i + 1 < len(bracket) else 0)
            for i, rung in enumerate(bracket)
        ]
        assert reached == stopped
        assert sum(r for _, r, _ in run.history) == total_resource(bracket)
    assert next_index == 81 + 34 + 15 + 8 + 5 + 81


def test_bohb_models_the_largest_resource_with_enough_observations():
    assert BOHB_RANDOM_FRACTION == pytest.approx(1 / 3)
    # dim 2: N_min = 3, so a budget needs 3 + 2 = 5 observations.
    observed = {1: [0.5] * 9, 3: [0.4, 0.3, math.nan, 0.2, 0.1], 9: [0.2, 0.1]}
    assert bohb_model_budget(observed, dim=2) == 1  # 3 has 4 that finished
    observed[3] = [0.4, 0.3, 0.25, 0.2, 0.1]
    assert bohb_model_budget(observed, dim=2) == 3
    assert bohb_model_budget({1: 9, 3: 5, 9: 2}, dim=2) == 3  # counts work too
    assert bohb_model_budget({1: 4, 3: 2}, dim=2) is None
    assert bohb_model_budget({}, dim=2) is None
    assert bohb_model_budget({9: 3}, dim=5, min_points=1) == 9
    with pytest.raises(ValueError, match="dim must be an integer >= 1, got 0"):
        bohb_model_budget({}, dim=0)
    with pytest.raises(ValueError, match="min_points must be an integer >= 1, got 0"):
        bohb_model_budget({}, dim=2, min_points=0)


def test_fidelity_settings_fill_in_the_defaults():
    assert FidelitySettings.from_block(None) == FidelitySettings()
    assert not FidelitySettings.from_block(None).enabled
    assert FidelitySettings.from_block(None).schedule() is None
    # With no scheduler the other values are not checked.
    off = FidelitySettings.from_block({"scheduler": "none", "eta": 0})
    assert off == FidelitySettings()

    folds = FidelitySettings.from_block({"scheduler": "hyperband"}, n_folds=5)
    assert folds == FidelitySettings("hyperband", "folds", 1, 5, 3)
    assert folds.enabled and folds.integer
    assert table(folds.schedule().brackets) == [[(3, 1), (1, 5)], [(2, 5)]]

    rows = FidelitySettings.from_block(
        {"scheduler": "bohb", "resource": "rows", "min_resource": 0.1}
    )
    assert (rows.max_resource, rows.integer) == (1.0, False)
    assert isinstance(rows.schedule(), HyperbandSchedule)

    halving = FidelitySettings.from_block(
        {"scheduler": "successive_halving", "eta": 2}, n_folds=5
    )
    assert table(halving.schedule().brackets) == [[(4, 1), (2, 2), (1, 5)]]
    iterations = FidelitySettings.from_block(
        {
            "scheduler": "successive_halving",
            "resource": "iterations",
            "min_resource": 10.0,
            "max_resource": 270,
        }
    )
    assert iterations.min_resource == 10 and isinstance(iterations.min_resource, int)
    assert table(iterations.schedule().brackets) == [
        [(27, 10), (9, 30), (3, 90), (1, 270)]
    ]


HYPERBAND = {"scheduler": "hyperband"}


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ([1, 2], "fidelity must be a mapping, got [1, 2]"),
        (
            {"scheduler": "bohb", "etaa": 3},
            "fidelity has unknown keys ['etaa'] (did you mean 'eta'?); known: scheduler, resource, "
            "min_resource, max_resource, eta",
        ),
        ({"scheduler": "asha"}, "fidelity.scheduler='asha' is not one of"),
        ({**HYPERBAND, "resource": "epochs"}, "fidelity.resource='epochs' is not one"),
        ({**HYPERBAND, "eta": 1}, "fidelity.eta must be a finite number > 1, got 1"),
        (
            {**HYPERBAND, "eta": "3"},
            "fidelity.eta must be a finite number > 1, got '3'",
        ),
        (
            {**HYPERBAND, "eta": True},
            "fidelity.eta must be a finite number > 1, got True",
        ),
        (
            {**HYPERBAND, "min_resource": 0},
            "fidelity.min_resource must be a whole number of folds >= 1, got 0",
        ),
        (
            {**HYPERBAND, "min_resource": 1.5},
            "fidelity.min_resource must be a whole number of folds >= 1, got 1.5",
        ),
        (
            {**HYPERBAND, "min_resource": 6},
            "fidelity.min_resource=6 must be <= max_resource=5",
        ),
        (
            {**HYPERBAND, "max_resource": 4},
            "fidelity.max_resource=4 folds, but the CV has 5",
        ),
        (
            {**HYPERBAND, "resource": "rows", "min_resource": 0},
            "fidelity.min_resource must be a fraction of rows in (0, 1], got 0",
        ),
        (
            {**HYPERBAND, "resource": "rows", "min_resource": 1.5},
            "fidelity.min_resource must be a fraction of rows in (0, 1], got 1.5",
        ),
        (
            {**HYPERBAND, "resource": "rows", "min_resource": 0.1, "max_resource": 0.5},
            "fidelity.max_resource=0.5 of the rows, but full fidelity is every row",
        ),
        (
            # the folds' min_resource kept when switching to rows
            {**HYPERBAND, "resource": "rows", "min_resource": 1},
            "fidelity.min_resource=1 leaves no rung below max_resource=1.0 at eta=3",
        ),
        (
            {**HYPERBAND, "min_resource": 4, "eta": 2},
            "fidelity.min_resource=4 leaves no rung below max_resource=5 at eta=2",
        ),
        (
            {**HYPERBAND, "resource": "rows"},
            "fidelity.min_resource is needed for resource rows",
        ),
        (
            {**HYPERBAND, "resource": "iterations", "min_resource": 10},
            "fidelity.max_resource is needed for resource iterations",
        ),
        ({**HYPERBAND, "eta": 1.1}, "two rungs at resource"),
    ],
)
def test_fidelity_settings_name_the_bad_key_and_value(block, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FidelitySettings.from_block(block, n_folds=5)


def test_folds_need_the_number_of_folds_or_a_max_resource():
    with pytest.raises(ValueError, match="max_resource is needed for resource folds"):
        FidelitySettings.from_block(HYPERBAND)
    settings = FidelitySettings.from_block({**HYPERBAND, "max_resource": 10})
    assert settings.max_resource == 10
