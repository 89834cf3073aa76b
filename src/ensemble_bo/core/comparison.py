"""Statistical comparison of methods across datasets.

Comparison of K methods on N datasets, from a table `losses` with one row per
dataset (or dataset x repetition) and one column per method, lower is better:
expected rank and pairwise win frequency (ESMBO s.6.2), sign test, Wilcoxon
signed-rank test on per-dataset losses averaged over repetitions (SEGO eq. 10),
Friedman test with the Nemenyi post-hoc test (SEGOR s.4.1; Demsar 2006), and the
Poisson-binomial test of Lacoste et al. (2012), with the marks of
significance of the sign and Poisson-binomial tests. ``comparison_table`` lays
them out as a table.

Pure numpy / scipy / pandas: no Kedro, no MLflow, no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from ensemble_bo.core.messages import plain

# --- constants ---------------------------------------------------------------

#: Poisson-binomial probability thresholds (ESMBO s.6.2).
PB_SIGNIFICANT = 0.8
PB_HIGHLY_SIGNIFICANT = 0.9
#: Sign-test p-value thresholds (ESMBO s.6.2).
SIGN_SIGNIFICANT = 0.1
SIGN_HIGHLY_SIGNIFICANT = 0.05

RANK_COLUMN = "E[rank]"

TiesMethod = Literal["average", "max"]


# --- validation helpers ------------------------------------------------------


def _as_finite_vector(values, name: str, min_length: int = 1) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size < min_length:
        raise ValueError(f"{name} needs at least {min_length} values, got {array.size}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(
            f"{name} has a non-finite value {plain(array[bad[0]])!r} at position {bad[0]}"
        )
    return array


def _paired_vectors(a, b, min_length: int = 1) -> tuple[np.ndarray, np.ndarray]:
    a = _as_finite_vector(a, "a", min_length)
    b = _as_finite_vector(b, "b", min_length)
    if a.size != b.size:
        raise ValueError(f"a and b differ in length: {a.size} != {b.size}")
    return a, b


def _validate_losses(losses: pd.DataFrame, min_methods: int = 2) -> pd.DataFrame:
    """Rows = datasets, columns = methods, all finite numbers."""
    if not isinstance(losses, pd.DataFrame):
        raise ValueError(
            f"losses must be a pandas DataFrame, got {type(losses).__name__}"
        )
    if losses.shape[1] < min_methods:
        raise ValueError(
            f"need at least {min_methods} methods (columns), got "
            f"{losses.shape[1]}: {list(losses.columns)}"
        )
    if losses.shape[0] < 1:
        raise ValueError("losses has no rows (datasets)")
    if losses.columns.has_duplicates:
        duplicated = list(losses.columns[losses.columns.duplicated()])
        raise ValueError(f"duplicate method names in losses: {duplicated}")
    non_numeric = [
        column
        for column in losses.columns
        if not pd.api.types.is_numeric_dtype(losses[column])
        or pd.api.types.is_bool_dtype(losses[column])
    ]
    if non_numeric:
        raise ValueError(f"non-numeric method columns in losses: {non_numeric}")
    values = losses.to_numpy(dtype=float)
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        row, column = bad[0]
        raise ValueError(
            f"losses has a non-finite value {plain(values[row, column])!r} at row "
            f"{losses.index[row]!r}, method {losses.columns[column]!r}"
        )
    return losses.astype(float)


def _validate_probabilities(ps, name: str = "ps") -> np.ndarray:
    ps = _as_finite_vector(ps, name, min_length=1)
    outside = np.flatnonzero((ps < 0.0) | (ps > 1.0))
    if outside.size:
        raise ValueError(
            f"{name} must lie in [0, 1]; got {plain(ps[outside[0]])!r} at position "
            f"{outside[0]}"
        )
    return ps


def _validate_count(value, name: str) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer count, got {plain(value)!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {plain(value)!r}")
    return int(value)


# --- ranks and win frequencies across datasets --------------------------------


def rank_table(losses: pd.DataFrame, ties: TiesMethod = "average") -> pd.DataFrame:
    """Rank of each method on each row (1 = lowest loss).

    ties="average" gives tied methods the mean of the ranks they span (Demsar
    2006; what Friedman and Nemenyi assume). ties="max" is the definition of
    ESMBO s.6.2 / AB s.6.2, Rank_i = sum_l I[R(h_l) <= R(h_i)].
    """
    losses = _validate_losses(losses)
    if ties not in ("average", "max"):
        raise ValueError(f"ties must be 'average' or 'max', got {ties!r}")
    return losses.rank(axis=1, method=ties)


def expected_ranks(losses: pd.DataFrame, ties: TiesMethod = "average") -> pd.Series:
    """Average rank of each method over the rows (lower is better), in column order."""
    return rank_table(losses, ties).mean(axis=0).rename(RANK_COLUMN)


def win_frequency(losses: pd.DataFrame) -> pd.DataFrame:
    """(K, K) fraction of rows where the row method has a lower loss than the column method.

    Ties count 0.5 for each side (ESMBO s.6.2, footnote 4), so W + W.T = 1 and
    the diagonal is 0.5.
    """
    losses = _validate_losses(losses)
    values = losses.to_numpy()
    row = values[:, :, None]
    column = values[:, None, :]
    wins = (row < column) + 0.5 * (row == column)
    return pd.DataFrame(wins.mean(axis=0), index=losses.columns, columns=losses.columns)


def average_repetitions(
    frame: pd.DataFrame, by: str = "dataset", repetition: str = "repetition"
) -> pd.DataFrame:
    """Mean loss of each method per dataset over the repetitions (SEGO eq. 10).

    frame: one row per dataset x repetition, one column per method, and the
    dataset in a column or index level named `by`. A column or index level named
    `repetition`, if present, is dropped. Returns rows = datasets (in order of
    first appearance), columns = methods.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(
            f"frame must be a pandas DataFrame, got {type(frame).__name__}"
        )
    index_levels = [name for name in frame.index.names if name in (by, repetition)]
    if index_levels:
        frame = frame.reset_index(level=index_levels)
    if by not in frame.columns:
        raise ValueError(
            f"no column or index level {by!r} in frame; columns: {list(frame.columns)}"
        )
    methods = frame.drop(columns=[c for c in (by, repetition) if c in frame.columns])
    methods = _validate_losses(methods, min_methods=1)
    return methods.groupby(frame[by].to_numpy(), sort=False).mean().rename_axis(by)


# --- frequentist tests --------------------------------------------------------


def sign_test(a, b) -> float:
    """One-tailed sign test: p-value of "a is better (lower) than b".

    a, b: paired losses (one per dataset). Ties are dropped (ESMBO s.6.2,
    footnote 4); the number of rows where a < b is tested against Binomial(n,
    1/2) with scipy.stats.binomtest(alternative="greater"). With no untied pair
    there is no evidence either way and the p-value is 1.0.
    """
    a, b = _paired_vectors(a, b)
    wins = int(np.sum(a < b))
    untied = wins + int(np.sum(a > b))
    if untied == 0:
        return 1.0
    return float(stats.binomtest(wins, untied, 0.5, alternative="greater").pvalue)


def wilcoxon_test(
    a, b, alternative: Literal["less", "greater", "two-sided"] = "less"
) -> float:
    """Wilcoxon signed-rank test on paired per-dataset losses, via scipy.stats.wilcoxon.

    Default one-tailed, alternative="less": p-value of "a is better (its losses
    lower) than b", as in SEGOR Tables 4-5 (row outperforms column). Use
    "two-sided" for SEGO's symmetric Tables 3 and 5. Pass one value per dataset:
    average repetitions first (`average_repetitions`, SEGO eq. 10). Zero
    differences are dropped (scipy's default "wilcox"); if every difference is
    zero the p-value is 1.0.
    """
    if alternative not in ("less", "greater", "two-sided"):
        raise ValueError(
            f"alternative must be 'less', 'greater' or 'two-sided', got {alternative!r}"
        )
    a, b = _paired_vectors(a, b)
    if np.all(a == b):
        return 1.0
    return float(stats.wilcoxon(a, b, alternative=alternative).pvalue)


class FriedmanResult(NamedTuple):
    statistic: float
    pvalue: float


def friedman_test(losses: pd.DataFrame) -> FriedmanResult:
    """Friedman chi-square test that all methods (columns) rank alike, via scipy.

    Needs at least 3 methods (scipy.stats.friedmanchisquare). If every row is a
    complete tie, the tie-corrected statistic is 0/0; we return (0.0, 1.0): no
    evidence of any difference.
    """
    losses = _validate_losses(losses, min_methods=3)
    values = losses.to_numpy()
    if np.all(values == values[:, :1]):
        return FriedmanResult(0.0, 1.0)
    result = stats.friedmanchisquare(*values.T)
    return FriedmanResult(float(result.statistic), float(result.pvalue))


def _nemenyi_scale(k: int, n: int) -> float:
    return math.sqrt(k * (k + 1) / (6.0 * n))


def nemenyi_critical_difference(k: int, n: int, alpha: float = 0.05) -> float:
    """Critical difference of mean ranks for the Nemenyi test (Demsar 2006, s.3.2.2).

    CD = q_alpha / sqrt(2) * sqrt(k (k + 1) / (6 n)), q_alpha the upper-alpha
    quantile of the studentized range of k means with infinite degrees of
    freedom (scipy.stats.studentized_range). k methods, n datasets.
    """
    k = _validate_count(k, "k")
    n = _validate_count(n, "n")
    if k < 2:
        raise ValueError(f"k (number of methods) must be >= 2, got {k}")
    if n < 1:
        raise ValueError(f"n (number of datasets) must be >= 1, got {n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {plain(alpha)!r}")
    q = stats.studentized_range.ppf(1.0 - alpha, k, np.inf) / math.sqrt(2.0)
    return float(q * _nemenyi_scale(k, n))


def nemenyi_test(losses: pd.DataFrame) -> pd.DataFrame:
    """(K, K) Nemenyi p-values for each pair of methods (two-sided), diagonal 1.

    With average ranks R (ties averaged) over n rows, the pair (i, j) has
    p = Pr(studentized range of K > |R_i - R_j| * sqrt(2) / sqrt(K (K+1) / (6n))),
    the test whose critical value is `nemenyi_critical_difference`.
    """
    losses = _validate_losses(losses)
    k, n = losses.shape[1], losses.shape[0]
    ranks = expected_ranks(losses).to_numpy()
    difference = np.abs(ranks[:, None] - ranks[None, :])
    upper = np.triu_indices(k, k=1)
    statistic = difference[upper] * math.sqrt(2.0) / _nemenyi_scale(k, n)
    pvalues = np.ones((k, k))
    pvalues[upper] = np.clip(stats.studentized_range.sf(statistic, k, np.inf), 0, 1)
    pvalues[(upper[1], upper[0])] = pvalues[upper]
    return pd.DataFrame(pvalues, index=losses.columns, columns=losses.columns)


def _pairwise_matrix(losses: pd.DataFrame, test, diagonal: float) -> pd.DataFrame:
    losses = _validate_losses(losses)
    methods = list(losses.columns)
    matrix = pd.DataFrame(diagonal, index=losses.columns, columns=losses.columns)
    for row in methods:
        for column in methods:
            if row != column:
                matrix.loc[row, column] = test(losses[row], losses[column])
    return matrix


def pairwise_sign_test(losses: pd.DataFrame) -> pd.DataFrame:
    """(K, K) one-tailed sign-test p-values that the row method beats the column one."""
    return _pairwise_matrix(losses, sign_test, diagonal=1.0)


def pairwise_wilcoxon(
    losses: pd.DataFrame, alternative: Literal["less", "two-sided"] = "less"
) -> pd.DataFrame:
    """(K, K) Wilcoxon p-values, row vs column (SEGOR Tables 4-5 with "less").

    Rows of `losses` must be datasets (average repetitions first).
    """
    return _pairwise_matrix(
        losses, lambda a, b: wilcoxon_test(a, b, alternative), diagonal=1.0
    )


# --- the Poisson-binomial test (Lacoste et al. 2012) --------------------------


def disagreement_counts(y_true, pred_a, pred_b) -> tuple[int, int]:
    """(#A right and B wrong, #B right and A wrong) on one dataset's test labels."""
    y_true, pred_a, pred_b = (np.asarray(x) for x in (y_true, pred_a, pred_b))
    for name, array in (("pred_a", pred_a), ("pred_b", pred_b)):
        if array.shape != y_true.shape:
            raise ValueError(
                f"{name} has shape {array.shape}, y_true has shape {y_true.shape}"
            )
    a_right, b_right = pred_a == y_true, pred_b == y_true
    return int(np.sum(a_right & ~b_right)), int(np.sum(b_right & ~a_right))


def probability_a_better_classification(
    a_right_b_wrong: int, b_right_a_wrong: int
) -> float:
    """Pr(theta > 1/2), theta ~ Beta(1 + #A right & B wrong, 1 + #B right & A wrong).

    theta is the probability that, on a test example where exactly one of the two
    classifiers is right, it is A; a uniform Beta(1, 1) prior updated with the
    two counts. "A better" is the high-theta side. Examples where both are right
    or both wrong say nothing about which is better and are not counted.
    """
    wins = _validate_count(a_right_b_wrong, "a_right_b_wrong")
    losses = _validate_count(b_right_a_wrong, "b_right_a_wrong")
    return float(stats.beta.sf(0.5, 1 + wins, 1 + losses))


def probability_a_better_regression(loss_a, loss_b) -> float:
    """Pr(mu > 0 | d), mu the mean per-example loss difference d = loss_b - loss_a.

    loss_a, loss_b: per-example test losses of A and B on one dataset (n >= 2).
    With the noninformative prior p(mu, sigma) proportional to 1/sigma on a
    normal model of d, the posterior of mu is Student-t with n - 1 degrees of
    freedom, location mean(d) and scale std(d, ddof=1) / sqrt(n); mu > 0 means A
    has the lower expected loss. If all differences are equal (std 0) the
    posterior is a point mass: 1.0, 0.0 or 0.5 for mean(d) >, <, = 0.
    """
    loss_a, loss_b = _paired_vectors(loss_a, loss_b, min_length=2)
    difference = loss_b - loss_a
    n = difference.size
    mean = difference.mean()
    scale = difference.std(ddof=1) / math.sqrt(n)
    if scale == 0.0:
        return 1.0 if mean > 0 else 0.0 if mean < 0 else 0.5
    return float(stats.t.cdf(mean / scale, df=n - 1))


def poisson_binomial_pmf(ps) -> np.ndarray:
    """Exact pmf (N+1,) of the number of successes of independent Bernoulli(p_i).

    scipy.stats has no Poisson-binomial distribution, so we run the standard
    O(N^2) recursion: adding trial i, P_i(k) = P_{i-1}(k) (1 - p_i) +
    P_{i-1}(k - 1) p_i.
    """
    ps = _validate_probabilities(ps)
    pmf = np.zeros(ps.size + 1)
    pmf[0] = 1.0
    for i, p in enumerate(ps, start=1):
        pmf[1 : i + 1] = pmf[1 : i + 1] * (1.0 - p) + pmf[:i] * p
        pmf[0] *= 1.0 - p
    return pmf


def poisson_binomial_test(ps) -> float:
    """Pr(A > B) = sum_k PB(k) Pr(Beta(k + 1, N - k + 1) > 1/2)
    (Lacoste et al. 2012).

        ps: (N,) p_i = Pr(A better than B on dataset i). The number of datasets A
        wins is Poisson-binomial(p_1..p_N); with a uniform prior on A's win rate,
        k wins give a Beta(k + 1, N - k + 1) posterior and we integrate its mass
        above 1/2. > 0.8 is significant, > 0.9 highly significant.
    """
    pmf = poisson_binomial_pmf(ps)
    n = pmf.size - 1
    k = np.arange(n + 1)
    probability = float(pmf @ stats.beta.sf(0.5, k + 1, n - k + 1))
    return min(max(probability, 0.0), 1.0)


def outcome_probabilities(losses: pd.DataFrame, a: str, b: str) -> np.ndarray:
    """p_i from per-dataset losses only: 1 where a < b, 0 where a > b, 0.5 on ties.

    The degenerate PB input when per-example test outcomes are not kept: each
    dataset's winner is taken as certain (the PB test then becomes a Bayesian
    sign test with ties split).
    """
    losses = _validate_losses(losses)
    for method in (a, b):
        if method not in losses.columns:
            raise ValueError(
                f"unknown method {method!r}; methods: {list(losses.columns)}"
            )
    la, lb = losses[a].to_numpy(), losses[b].to_numpy()
    return np.where(la < lb, 1.0, np.where(la > lb, 0.0, 0.5))


def poisson_binomial_matrix(
    losses: pd.DataFrame,
    pairwise_probabilities: Mapping[tuple[str, str], Sequence[float]] | None = None,
) -> pd.DataFrame:
    """(K, K) Pr(row method > column method) by the Poisson-binomial test, diagonal 0.5.

    pairwise_probabilities: {(a, b): p_1..p_N} with p_i = Pr(a better than b on
    dataset i) from `probability_a_better_classification` / `_regression`; the
    pair (b, a) is taken as 1 - p_i when it is not given. Pairs missing both
    ways fall back to `outcome_probabilities` of `losses`.
    """
    losses = _validate_losses(losses)
    methods = list(losses.columns)
    given = dict(pairwise_probabilities or {})
    for a, b in given:
        for method in (a, b):
            if method not in methods:
                raise ValueError(
                    f"pairwise_probabilities names unknown method {method!r}; "
                    f"methods: {methods}"
                )
    matrix = pd.DataFrame(0.5, index=losses.columns, columns=losses.columns)
    for a in methods:
        for b in methods:
            if a == b:
                continue
            if (a, b) in given:
                ps = _validate_probabilities(
                    given[(a, b)], f"probabilities of {(a, b)}"
                )
            elif (b, a) in given:
                ps = 1.0 - _validate_probabilities(
                    given[(b, a)], f"probabilities of {(b, a)}"
                )
            else:
                ps = outcome_probabilities(losses, a, b)
            if ps.size != len(losses):
                raise ValueError(
                    f"pairwise probabilities of {(a, b)} have {ps.size} values, "
                    f"losses has {len(losses)} datasets"
                )
            matrix.loc[a, b] = poisson_binomial_test(ps)
    return matrix


def pairwise_test_probabilities(
    records: Sequence[Mapping], datasets: Sequence[str], methods: Sequence[str]
) -> dict[tuple[str, str], list[float]] | None:
    """{(a, b): [Pr(a better than b on dataset i)]} from benchmark cells' test outcomes.

    records: one per (dataset, method, repetition), with `dataset`, `method`,
    `repetition`, `task` and `test_sample_losses` (per-sample test losses:
    0/1 errors or squared residuals), every method on every dataset and
    repetition. Per dataset and repetition, the per-sample test losses of a
    and b are paired (the methods share each repetition's test split):
    classification counts the samples only one of the two gets right
    (`probability_a_better_classification`), regression compares the mean
    loss difference (`probability_a_better_regression`). p_i averages these
    over the repetitions instead of pooling the samples, whose test splits
    overlap and would make p_i overconfident. None when there are no records
    or one lacks its per-sample losses (cells stored by an older version): the
    PB test then falls back to each dataset's winner (`outcome_probabilities`).
    """
    if not records or any("test_sample_losses" not in record for record in records):
        return None
    outcomes: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    for record in records:
        outcomes.setdefault((record["dataset"], record["method"]), {})[
            record["repetition"]
        ] = np.asarray(record["test_sample_losses"], dtype=float)
    classification = records[0]["task"] == "classification"

    def probability(loss_a: np.ndarray, loss_b: np.ndarray) -> float:
        if classification:
            return probability_a_better_classification(
                int(np.sum((loss_a == 0) & (loss_b == 1))),
                int(np.sum((loss_b == 0) & (loss_a == 1))),
            )
        return probability_a_better_regression(loss_a, loss_b)

    def mean_over_repetitions(dataset: str, a: str, b: str) -> float:
        of_b = outcomes[(dataset, b)]
        return float(
            np.mean(
                [
                    probability(losses, of_b[repetition])
                    for repetition, losses in sorted(outcomes[(dataset, a)].items())
                ]
            )
        )

    return {
        (a, b): [mean_over_repetitions(dataset, a, b) for dataset in datasets]
        for a in methods
        for b in methods
        if a < b
    }


def pb_significance_mark(probability: float) -> str:
    """'**' above 0.9 (highly significant), '*' above 0.8 (significant), else ''."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"probability must lie in [0, 1], got {plain(probability)!r}")
    if probability > PB_HIGHLY_SIGNIFICANT:
        return "**"
    if probability > PB_SIGNIFICANT:
        return "*"
    return ""


def sign_test_mark(pvalue: float) -> str:
    """'++' below 0.05 (highly significant), '+' below 0.1 (significant), else ''."""
    if not 0.0 <= pvalue <= 1.0:
        raise ValueError(f"pvalue must lie in [0, 1], got {plain(pvalue)!r}")
    if pvalue < SIGN_HIGHLY_SIGNIFICANT:
        return "++"
    if pvalue < SIGN_SIGNIFICANT:
        return "+"
    return ""
