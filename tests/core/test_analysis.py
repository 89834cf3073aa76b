import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ensemble_bo.core.comparison import (
    average_repetitions,
    disagreement_counts,
    expected_ranks,
    friedman_test,
    nemenyi_critical_difference,
    nemenyi_test,
    outcome_probabilities,
    pairwise_sign_test,
    pairwise_test_probabilities,
    pairwise_wilcoxon,
    pb_significance_mark,
    poisson_binomial_matrix,
    poisson_binomial_pmf,
    poisson_binomial_test,
    probability_a_better_classification,
    probability_a_better_regression,
    sign_test,
    sign_test_mark,
    wilcoxon_test,
    win_frequency,
)
from ensemble_bo.core.comparison_table import comparison_table, markdown_table
from ensemble_bo.core.diversity import (
    MAX_PAIRWISE_MUTUAL_INFORMATION,
    correlation_matrix,
    ensemble_mutual_information,
    mean_pairwise_disagreement,
    mutual_information_matrix,
    pairwise_disagreement,
)

# --- diversity -----------------------------------------------------------------


def test_mutual_information_of_correlated_gaussians():
    rho = 0.6
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2, 20_000))
    x = z[0]
    y = rho * z[0] + math.sqrt(1 - rho**2) * z[1]
    information = mutual_information_matrix(np.vstack([x, y]))
    sample_rho = np.corrcoef(x, y)[0, 1]
    # closed form from the sample correlation
    assert information[0, 1] == pytest.approx(-0.5 * math.log(1 - sample_rho**2))
    assert information[1, 0] == information[0, 1]
    # population value -1/2 log(1 - 0.36) = -1/2 log 0.64 = 0.22314
    assert information[0, 1] == pytest.approx(0.22314, abs=0.02)


def test_identical_and_anticorrelated_members_get_the_finite_cap():
    x = np.array([0.3, 1.2, -0.7, 2.0, 0.1])
    information = mutual_information_matrix(np.vstack([x, x, -2 * x + 1]))
    # |rho| clipped to 1 - 1e-12: -1/2 log(1 - (1 - 1e-12)^2) = -1/2 log(2e-12) ~ 13.47
    assert MAX_PAIRWISE_MUTUAL_INFORMATION == pytest.approx(13.469, abs=1e-3)
    assert np.all(np.isfinite(information))
    np.testing.assert_allclose(information, MAX_PAIRWISE_MUTUAL_INFORMATION)


def test_constant_members_are_finite_with_documented_correlations():
    predictions = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0], [5.0, 5.0, 5.0]])
    rho = correlation_matrix(predictions)
    # constant vs varying: rho := 0; constant vs constant: rho := 1
    assert rho[0, 1] == 0.0 and rho[1, 2] == 0.0 and rho[0, 2] == 1.0
    information = mutual_information_matrix(predictions)
    assert np.all(np.isfinite(information))
    assert information[0, 1] == 0.0
    assert information[0, 2] == pytest.approx(MAX_PAIRWISE_MUTUAL_INFORMATION)


def test_ensemble_mutual_information_three_members_by_hand():
    u = np.array([1.0, 1.0, -1.0, -1.0])  # u, v, w orthogonal and centered
    v = np.array([1.0, -1.0, 1.0, -1.0])
    w = np.array([1.0, -1.0, -1.0, 1.0])
    predictions = np.vstack([u, u + v, v + w])
    # rho(u, u+v) = 4 / (2 * sqrt 8) = 1/sqrt2 -> MI = -1/2 log(1/2) = 1/2 log 2
    # rho(u, v+w) = 0 -> MI = 0
    # rho(u+v, v+w) = 4 / 8 = 1/2 -> MI = -1/2 log(3/4) = 1/2 log(4/3)
    information = mutual_information_matrix(predictions)
    assert information[0, 1] == pytest.approx(0.5 * math.log(2))
    assert information[0, 2] == pytest.approx(0.0, abs=1e-12)
    assert information[1, 2] == pytest.approx(0.5 * math.log(4 / 3))
    # each unordered pair once, / m^2 = 9: (1/2 log 2 + 1/2 log 4/3) / 9 = log(8/3) / 18
    assert ensemble_mutual_information(predictions) == pytest.approx(
        math.log(8 / 3) / 18
    )


def test_single_member_has_zero_ensemble_mutual_information():
    assert ensemble_mutual_information(np.array([[1.0, 2.0, 3.0]])) == 0.0


def test_pairwise_disagreement_by_hand():
    labels = np.array([[0, 1, 1, 0], [0, 1, 0, 0], [1, 1, 0, 0]])
    # members 0/1 differ at sample 2; 0/2 at samples 0, 2; 1/2 at sample 0
    expected = np.array([[0, 0.25, 0.5], [0.25, 0, 0.25], [0.5, 0.25, 0]])
    np.testing.assert_allclose(pairwise_disagreement(labels), expected)
    assert mean_pairwise_disagreement(labels) == pytest.approx(1 / 3)


def test_pairwise_disagreement_on_string_labels():
    labels = np.array([["a", "b"], ["a", "c"]])
    assert mean_pairwise_disagreement(labels) == pytest.approx(0.5)


# --- ranks and win frequencies -------------------------------------------------

# d1: A < B < C          ranks A 1,  B 2,   C 3
# d2: C < A = B (tie)    ranks A 2.5, B 2.5, C 1
# d3: B < C < A          ranks A 3,  B 1,   C 2
# d4: A < C < B          ranks A 1,  B 3,   C 2
HAND_LOSSES = pd.DataFrame(
    {"A": [0.1, 0.2, 0.3, 0.1], "B": [0.2, 0.2, 0.1, 0.3], "C": [0.3, 0.1, 0.2, 0.2]},
    index=["d1", "d2", "d3", "d4"],
)


def test_expected_ranks_average_ties_by_hand():
    ranks = expected_ranks(HAND_LOSSES)
    # A (1 + 2.5 + 3 + 1) / 4 = 1.875; B (2 + 2.5 + 1 + 3) / 4 = 2.125; C 8 / 4 = 2
    assert ranks.to_dict() == pytest.approx({"A": 1.875, "B": 2.125, "C": 2.0})


def test_expected_ranks_with_the_papers_max_rank_ties():
    # ESMBO: Rank_i = #{l : R_l <= R_i}, so the tie in d2 gives A and B rank 3
    ranks = expected_ranks(HAND_LOSSES, ties="max")
    assert ranks.to_dict() == pytest.approx({"A": 2.0, "B": 2.25, "C": 2.0})


def test_win_frequency_by_hand_with_a_tie():
    wins = win_frequency(HAND_LOSSES)
    # A vs B: d1 1, d2 tie 0.5, d3 0, d4 1 -> 2.5 / 4 = 0.625
    assert wins.loc["A", "B"] == pytest.approx(0.625)
    assert wins.loc["B", "A"] == pytest.approx(0.375)
    # A vs C: win d1, d4; lose d2, d3 -> 0.5. B vs C: win d1, d3 -> 0.5
    assert wins.loc["A", "C"] == pytest.approx(0.5)
    assert wins.loc["B", "C"] == pytest.approx(0.5)
    np.testing.assert_allclose(np.diag(wins), 0.5)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=8
    )
)
def test_win_frequencies_complement_and_ranks_sum(rows):
    losses = pd.DataFrame(rows, columns=list("ABCD"), dtype=float)
    wins = win_frequency(losses).to_numpy()
    np.testing.assert_allclose(wins + wins.T, 1.0)
    assert expected_ranks(losses).sum() == pytest.approx(4 * 5 / 2)


def test_average_repetitions_from_columns_and_index():
    frame = pd.DataFrame(
        {
            "dataset": ["x", "x", "y", "y", "y"],
            "repetition": [0, 1, 0, 1, 2],
            "A": [1.0, 3.0, 0.0, 1.0, 2.0],
            "B": [2.0, 2.0, 4.0, 5.0, 6.0],
        }
    )
    # x: A (1 + 3) / 2 = 2, B 2; y: A (0 + 1 + 2) / 3 = 1, B 5
    expected = pd.DataFrame(
        {"A": [2.0, 1.0], "B": [2.0, 5.0]}, index=pd.Index(["x", "y"], name="dataset")
    )
    pd.testing.assert_frame_equal(average_repetitions(frame), expected)
    indexed = frame.set_index(["dataset", "repetition"])
    pd.testing.assert_frame_equal(average_repetitions(indexed), expected)


# --- frequentist tests ------------------------------------------------------------

A_SIGN = np.array([1, 1, 1, 1, 1, 1, 1, 3, 5, 5], dtype=float)
B_SIGN = np.array([2, 2, 2, 2, 2, 2, 2, 2, 5, 5], dtype=float)


def test_sign_test_drops_ties_and_matches_scipy():
    # 7 wins, 1 loss, 2 ties dropped -> Pr(X >= 7 | n=8) = (8 + 1) / 256
    assert sign_test(A_SIGN, B_SIGN) == pytest.approx(9 / 256)
    assert sign_test(A_SIGN, B_SIGN) == pytest.approx(
        stats.binomtest(7, 8, 0.5, alternative="greater").pvalue
    )
    # the other direction: Pr(X >= 1 | n=8) = 255 / 256
    assert sign_test(B_SIGN, A_SIGN) == pytest.approx(255 / 256)


def test_sign_test_all_ties_is_no_evidence():
    assert sign_test([1.0, 2.0], [1.0, 2.0]) == 1.0


def test_wilcoxon_is_one_sided_and_matches_scipy():
    b = np.array([0.30, 0.25, 0.40, 0.35, 0.50, 0.45])
    a = b - np.array([0.01, 0.02, 0.03, 0.04, 0.05, 0.06])
    # every difference a - b < 0, all |d| distinct: exact p = 1 / 2^6
    assert wilcoxon_test(a, b) == pytest.approx(1 / 64)
    assert wilcoxon_test(b, a) > 0.9
    mixed = b + np.array([-0.05, 0.01, -0.03, -0.02, 0.04, -0.06])
    for alternative in ("less", "two-sided"):
        assert wilcoxon_test(mixed, b, alternative) == pytest.approx(
            stats.wilcoxon(mixed, b, alternative=alternative).pvalue
        )


def test_friedman_matches_scipy_and_hand_value():
    # A always rank 1, B 2, C 3 on N = 4: chi2 = 12 N / (k (k+1)) * (sum R^2 - k (k+1)^2 / 4)
    # = 4 * (14 - 12) = 8; chi2 with 2 df: p = exp(-8 / 2)
    losses = pd.DataFrame(
        {
            "A": [1.0, 2.0, 3.0, 4.0],
            "B": [2.0, 3.0, 4.0, 5.0],
            "C": [3.0, 4.0, 5.0, 6.0],
        }
    )
    statistic, pvalue = friedman_test(losses)
    assert statistic == pytest.approx(8.0)
    assert pvalue == pytest.approx(math.exp(-4))
    expected = stats.friedmanchisquare(*(HAND_LOSSES[c] for c in HAND_LOSSES))
    assert tuple(friedman_test(HAND_LOSSES)) == pytest.approx(
        (expected.statistic, expected.pvalue)
    )


def test_friedman_all_ties_is_no_evidence():
    losses = pd.DataFrame({"A": [1.0, 2.0], "B": [1.0, 2.0], "C": [1.0, 2.0]})
    assert tuple(friedman_test(losses)) == (0.0, 1.0)


def test_nemenyi_critical_difference_against_demsar_table():
    # Demsar 2006 Table 5: q_0.05 = 2.569 for k = 4; CD = 2.569 * sqrt(4 * 5 / (6 * 18))
    assert nemenyi_critical_difference(4, 18) == pytest.approx(1.1055, abs=5e-4)
    # q_0.10 = 2.291 for k = 4
    assert nemenyi_critical_difference(4, 18, alpha=0.10) == pytest.approx(
        2.291 * math.sqrt(20 / 108), abs=5e-4
    )


def test_nemenyi_two_methods_is_a_normal_test():
    # k = 2, A always better on N = 4: |R_A - R_B| = 1, scaled by sqrt(2) / sqrt(1/N)
    # studentized range of 2 = sqrt2 |Z|, so p = Pr(|Z| > sqrt N) = 2 (1 - Phi(2))
    losses = pd.DataFrame({"A": [1.0, 1.0, 1.0, 1.0], "B": [2.0, 2.0, 2.0, 2.0]})
    pvalues = nemenyi_test(losses)
    assert pvalues.loc["A", "B"] == pytest.approx(2 * stats.norm.sf(2), abs=1e-6)
    assert pvalues.loc["B", "A"] == pvalues.loc["A", "B"]
    assert pvalues.loc["A", "A"] == 1.0


def test_nemenyi_pvalues_agree_with_the_critical_difference():
    rng = np.random.default_rng(3)
    losses = pd.DataFrame(
        rng.normal(size=(18, 4)) + np.array([0.0, 0.3, 0.8, 1.5]), columns=list("ABCD")
    )
    ranks = expected_ranks(losses).to_numpy()
    significant = np.abs(ranks[:, None] - ranks[None, :]) > nemenyi_critical_difference(
        4, 18
    )
    assert np.array_equal(nemenyi_test(losses).to_numpy() < 0.05, significant)
    assert significant.any() and not significant.all()


def test_pairwise_matrices_are_oriented_row_beats_column():
    losses = pd.DataFrame({"A": A_SIGN, "B": B_SIGN})
    assert pairwise_sign_test(losses).loc["A", "B"] == pytest.approx(9 / 256)
    wilcoxon = pairwise_wilcoxon(losses)
    assert wilcoxon.loc["A", "B"] < 0.05 < wilcoxon.loc["B", "A"]


# --- Poisson-binomial test ------------------------------------------------------


def test_classification_probability_by_hand():
    # Beta(4, 1): Pr(theta > 1/2) = 1 - 0.5^4
    assert probability_a_better_classification(3, 0) == pytest.approx(0.9375)
    assert probability_a_better_classification(0, 3) == pytest.approx(0.0625)
    assert probability_a_better_classification(2, 2) == pytest.approx(0.5)


def test_disagreement_counts():
    y = np.array([0, 1, 1, 0, 1])
    a = np.array([0, 1, 0, 0, 0])  # right on 0, 1, 3
    b = np.array([1, 1, 1, 0, 0])  # right on 1, 2, 3
    assert disagreement_counts(y, a, b) == (1, 1)


def test_regression_probability_student_t_by_hand():
    # d = loss_b - loss_a = [1, 2, 3]: mean 2, sd 1, scale 1/sqrt3, t = 2 sqrt3, 2 df
    # Student-t with 2 df: F(t) = 1/2 + t / (2 sqrt(2 + t^2)) = 1/2 + 2 sqrt3 / (2 sqrt 14)
    expected = 0.5 + 2 * math.sqrt(3) / (2 * math.sqrt(14))
    loss_a, loss_b = [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]
    assert probability_a_better_regression(loss_a, loss_b) == pytest.approx(expected)
    assert probability_a_better_regression(loss_b, loss_a) == pytest.approx(
        1 - expected
    )
    # equal differences: point-mass posterior
    assert probability_a_better_regression([0.0, 0.0], [1.0, 1.0]) == 1.0
    assert probability_a_better_regression([1.0, 1.0], [1.0, 1.0]) == 0.5


def test_pmf_by_hand_and_against_the_binomial():
    # p = (0.5, 0.2): P(0) = 0.5 * 0.8, P(1) = 0.5 * 0.8 + 0.5 * 0.2, P(2) = 0.5 * 0.2
    np.testing.assert_allclose(poisson_binomial_pmf([0.5, 0.2]), [0.4, 0.5, 0.1])
    pmf = poisson_binomial_pmf([0.3] * 10)
    np.testing.assert_allclose(pmf, stats.binom.pmf(np.arange(11), 10, 0.3))
    ps = np.random.default_rng(1).uniform(size=40)
    assert poisson_binomial_pmf(ps).sum() == pytest.approx(1.0)


def test_pb_test_certain_wins_and_coin_flips():
    n = 5
    # all p = 1: k = N surely, Pr(Beta(N+1, 1) > 1/2) = 1 - 0.5^(N+1)
    assert poisson_binomial_test([1.0] * n) == pytest.approx(1 - 0.5 ** (n + 1))
    # all p = 0.5: symmetric -> exactly 1/2
    assert poisson_binomial_test([0.5] * 7) == pytest.approx(0.5, abs=1e-12)
    # p = (1, 1, 0): k = 2 of 3, Pr(Beta(3, 2) > 1/2) = 1 - (4 + 1) / 16 = 11/16
    assert poisson_binomial_test([1.0, 1.0, 0.0]) == pytest.approx(11 / 16)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=15))
def test_pb_test_is_antisymmetric(ps):
    ps = np.array(ps)
    total = poisson_binomial_test(ps) + poisson_binomial_test(1.0 - ps)
    assert total == pytest.approx(1.0)


def test_pb_matrix_from_outcomes_and_from_given_probabilities():
    losses = pd.DataFrame({"A": [1.0, 1.0, 1.0], "B": [2.0, 2.0, 2.0]})
    np.testing.assert_array_equal(outcome_probabilities(losses, "A", "B"), [1, 1, 1])
    matrix = poisson_binomial_matrix(losses)
    assert matrix.loc["A", "B"] == pytest.approx(0.9375)  # 1 - 0.5^4
    assert matrix.loc["B", "A"] == pytest.approx(0.0625)
    given_ps = poisson_binomial_matrix(losses, {("B", "A"): [0.5, 0.5, 0.5]})
    assert given_ps.loc["A", "B"] == pytest.approx(0.5)


def test_significance_marks():
    assert [pb_significance_mark(p) for p in (0.95, 0.85, 0.8, 0.5)] == [
        "**",
        "*",
        "",
        "",
    ]
    assert [sign_test_mark(p) for p in (0.01, 0.07, 0.1)] == ["++", "+", ""]


# --- tables ----------------------------------------------------------------------


def test_comparison_table_layout_and_marks():
    losses = pd.DataFrame(
        {
            "worse": [2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
            "better": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        }
    )
    table = comparison_table(losses)
    assert list(table.cells.index) == ["better", "worse"]  # sorted by E[rank]
    numeric = table.to_frame()
    assert list(numeric.columns) == ["better", "worse", "E[rank]"]
    assert numeric.loc["better", "worse"] == 1.0
    assert numeric["E[rank]"].tolist() == [1.0, 2.0]
    # PB: 1 - 0.5^7 > 0.9 -> '**'; sign test p = 1/64 < 0.05 -> '++'
    formatted = table.to_formatted_frame()
    assert formatted.loc["better", "worse"] == "1.00 **++"
    assert formatted.loc["worse", "better"] == "0.00"
    assert formatted.loc["better", "better"] == "-"
    markdown = table.to_markdown()
    assert markdown.splitlines()[0] == "| method | better | worse | E[rank] |"
    assert "| better | - | 1.00 **++ | 1.00 |" in markdown


def test_comparison_table_of_pb_probabilities():
    table = comparison_table(HAND_LOSSES, cell="pb_probability")
    assert list(table.cells.index) == ["A", "C", "B"]  # 1.875 < 2.0 < 2.125
    # A vs B outcomes (1, 0.5, 0, 1) -> PB test of those p_i
    assert table.cells.loc["A", "B"] == pytest.approx(
        poisson_binomial_test([1.0, 0.5, 0.0, 1.0])
    )


def test_markdown_table_escapes_pipes():
    frame = pd.DataFrame({"a|b": ["x|y"]}, index=["r"])
    assert markdown_table(frame) == "|  | a\\|b |\n|---|---:|\n| r | x\\|y |"


# --- bad inputs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mutual_information_matrix([1.0, 2.0]), "must be 2-D"),
        (
            lambda: mutual_information_matrix([[1.0, np.nan], [1.0, 2.0]]),
            "non-finite value nan for member 0, sample 1",
        ),
        (lambda: mutual_information_matrix([[1.0], [2.0]]), "at least 2 samples"),
        (
            lambda: pairwise_disagreement(np.array([[1, None]], dtype=object)),
            "missing value None",
        ),
        (lambda: expected_ranks(HAND_LOSSES[["A"]]), "at least 2 methods"),
        (
            lambda: expected_ranks(HAND_LOSSES.assign(B=[0.1, np.nan, 0.1, 0.1])),
            "non-finite value nan at row 'd2', method 'B'",
        ),
        (lambda: expected_ranks(HAND_LOSSES.to_numpy()), "must be a pandas DataFrame"),
        (lambda: expected_ranks(HAND_LOSSES, ties="min"), "ties must be"),
        (lambda: sign_test([1.0, 2.0, 3.0], [1.0, 2.0]), "differ in length: 3 != 2"),
        (lambda: wilcoxon_test([1.0], [2.0], "bigger"), "alternative must be"),
        (lambda: friedman_test(HAND_LOSSES[["A", "B"]]), "at least 3 methods"),
        (lambda: nemenyi_critical_difference(1, 10), "must be >= 2, got 1"),
        (lambda: nemenyi_critical_difference(4, 10, alpha=1.5), "got 1.5"),
        (lambda: poisson_binomial_pmf([0.5, 1.2]), "got 1.2 at position 1"),
        (lambda: poisson_binomial_test([]), "at least 1 values, got 0"),
        (lambda: probability_a_better_classification(-1, 2), ">= 0, got -1"),
        (lambda: probability_a_better_classification(2.5, 2), "integer count, got 2.5"),
        (lambda: probability_a_better_regression([1.0], [2.0]), "at least 2 values"),
        (
            lambda: poisson_binomial_matrix(HAND_LOSSES, {("A", "Z"): [1.0]}),
            "unknown method 'Z'",
        ),
        (
            lambda: poisson_binomial_matrix(HAND_LOSSES, {("A", "B"): [1.0, 0.5]}),
            "('A', 'B') have 2 values, losses has 4 datasets",
        ),
        (lambda: pb_significance_mark(1.2), "got 1.2"),
        (lambda: comparison_table(HAND_LOSSES, cell="ranks"), "got 'ranks'"),
        (
            lambda: average_repetitions(HAND_LOSSES, by="task"),
            "no column or index level 'task'",
        ),
    ],
)
def test_bad_inputs_raise_naming_the_value(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_pb_probabilities_come_from_the_paired_test_outcomes():
    def cell(method, repetition, losses, task="regression"):
        return {
            "dataset": "d",
            "method": method,
            "repetition": repetition,
            "task": task,
            "test_sample_losses": losses,
        }

    regression = [
        cell("A", 0, [1.0, 2.0, 4.0]),
        cell("A", 1, [3.0, 1.0]),
        cell("B", 1, [5.0, 1.0]),
        cell("B", 0, [2.0, 2.0, 6.0]),
    ]
    # repetition 0: d = B - A = [1, 0, 2], mean 1, sd 1, n = 3 -> t.cdf(sqrt(3), 2);
    # repetition 1: d = [2, 0], mean 1, sd sqrt(2), n = 2 -> t.cdf(1, 1) = 0.75
    expected = (stats.t.cdf(np.sqrt(3), df=2) + 0.75) / 2
    probabilities = pairwise_test_probabilities(regression, ["d"], ["A", "B"])
    assert probabilities == {("A", "B"): [pytest.approx(expected)]}

    classification = [
        cell("A", 0, [0.0, 1.0, 0.0], "classification"),
        cell("B", 0, [1.0, 1.0, 0.0], "classification"),
    ]
    # A alone right once, B alone right never: Pr(Beta(2, 1) > 1/2) = 0.75
    probabilities = pairwise_test_probabilities(classification, ["d"], ["A", "B"])
    assert probabilities == {("A", "B"): [pytest.approx(0.75)]}

    del regression[0]["test_sample_losses"]
    assert pairwise_test_probabilities(regression, ["d"], ["A", "B"]) is None
