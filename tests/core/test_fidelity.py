"""Multi-fidelity schedules: brackets against hand-worked tables (Li et al.
2017's R = 81, folds, rows), promotion, the bracket driver walking a whole
Hyperband schedule, resource budgets, BOHB's model budget and the `fidelity`
block's validation."""

import math
import re

import pytest

from ensemble_bo.core.fidelity import (
    full_fidelity_equivalents,
    hyperband_brackets,
    max_bracket_index,
    successive_halving_rungs,
    total_resource,
)


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
