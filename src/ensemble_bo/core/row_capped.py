"""Members refit on more rows than the search trained them on.

Kernel machines, Gaussian processes and nearest neighbours cost more than
linearly in their training rows: an SVR's fit grows at least as the square
of its rows (scikit-learn's SVR documentation: "hard to scale to datasets
with more than a couple of 10000 samples"), a Gaussian process's as their
cube, and a neighbour model's prediction as the rows it stores. A search of
large data trains on a sample of `max_search_rows` rows, so its
cross-validation measured such a member at that size; refit on every row
instead, one SVR on 670,000 rows ran past 15 minutes without ending. Such a
member is refit on a seeded sample of at most that many rows (every class
kept), and every other member on every row.

Histogram gradient boosting's rounds are the one hyperparameter whose best
value grows with the rows: the search fixes them (max_iter 100) and measured
each configuration on the sample, where more rounds overfit. Refit on every
row, such a member boosts for up to as many times its rounds as it has times
the search's rows, stopped early when a held-out tenth of its rows stops
improving (scikit-learn's own early stopping). On 670,000 rows of Friedman's
function (benchmarks/scaling_rows.py's `friedman`), four configurations of
100 rounds averaged to a test MSE of 0.0459 (standardized; noise floor
0.0403); grown so, 0.0410, each member fitting in 9-18 s on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassifierMixin,
    RegressorMixin,
    clone,
    is_classifier,
)
from sklearn.discriminant_analysis import (
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)
from sklearn.ensemble import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
)
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import (
    ElasticNet,
    LinearRegression,
    LogisticRegression,
    Ridge,
)
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.svm import SVC, SVR, NuSVC, NuSVR
from sklearn.utils import _safe_indexing
from sklearn.utils._available_if import available_if
from sklearn.utils.validation import check_is_fitted

from ensemble_bo.core.evaluation import seeded_order
from ensemble_bo.core.zoo import final_estimator

# Models whose fit grows at least as the square of their rows.
KERNEL_MACHINES = (
    SVR,
    SVC,
    NuSVR,
    NuSVC,
    KernelRidge,
    GaussianProcessRegressor,
    GaussianProcessClassifier,
)
SUPERLINEAR = (*KERNEL_MACHINES, KNeighborsRegressor, KNeighborsClassifier)


def fits_superlinearly(model: BaseEstimator) -> bool:
    """Whether `model` (a zoo model) is a kernel machine or a Gaussian
    process, whose fit grows at least as the square of its rows."""
    return isinstance(final_estimator(model), KERNEL_MACHINES)


def costs_more_than_linearly(model: BaseEstimator) -> bool:
    """Whether `model` (a zoo model: an estimator, or a pipeline ending in
    one) fits or predicts at a cost that grows faster than its rows."""
    final = final_estimator(model)
    return isinstance(final, SUPERLINEAR)


HISTOGRAM_BOOSTING = (HistGradientBoostingRegressor, HistGradientBoostingClassifier)

# Models whose fitted size does not grow with their training rows: a fixed
# number of trees of bounded leaves (LightGBM and CatBoost, named so that
# their optional packages need not be imported), or coefficients (linear
# models (Lasso is an ElasticNet), networks, discriminant analysis, naive
# Bayes).
BOUNDED_SIZE = (
    ElasticNet,
    Ridge,
    LinearRegression,
    LogisticRegression,
    MLPRegressor,
    MLPClassifier,
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
    GaussianNB,
)
_BOUNDED_SIZE_NAMES = {
    "LGBMRegressor",
    "LGBMClassifier",
    "CatBoostRegressor",
    "CatBoostClassifier",
}


def size_growth(model: BaseEstimator) -> str:
    """How the size of `model` (a zoo model) grows when it is refit on more
    rows than its fold model had: "capped" for a member refit on at most
    max_search_rows rows (costs_more_than_linearly), "rounds" for histogram
    boosting, whose trees are as many as its rounds (LargeDataRefit grows
    them), "bounded" where its size does not depend on its rows
    (BOUNDED_SIZE), else "rows": trees grown to their leaves and forests of
    them, boosting of such trees, which grow with their rows (assumed of any
    other model too)."""
    final = final_estimator(model)
    if costs_more_than_linearly(final):
        return "capped"
    if isinstance(final, HISTOGRAM_BOOSTING):
        return "rounds"
    if isinstance(final, BOUNDED_SIZE) or type(final).__name__ in _BOUNDED_SIZE_NAMES:
        return "bounded"
    return "rows"


def capped_rows(y: np.ndarray, max_rows: int, seed: int, stratify: bool) -> np.ndarray:
    """Indices (sorted) of a seeded sample of at most `max_rows` of the rows
    of `y`; with `stratify`, each class in its share and every class at
    least once. All rows when there are no more than `max_rows`."""
    n = len(y)
    if n <= max_rows:
        return np.arange(n)
    order = seeded_order(n, seed, y if stratify else None)
    if not stratify:
        return np.sort(order[:max_rows])
    # a class too rare for its share of the sample still keeps a row
    _, first = np.unique(np.asarray(y)[order], return_index=True)
    return np.union1d(order[:max_rows], order[first])


class _RowCapped(BaseEstimator):
    """`estimator` fitted on a seeded sample of at most `max_rows` rows.

    Parameters
    ----------
    estimator : estimator
        The unfitted model.
    max_rows : int
        The most rows it is fitted on.
    random_state : int, default=0
        The seed of the sample.

    Attributes
    ----------
    estimator_ : estimator
        `estimator` fitted on the sample.
    n_rows_ : int
        The rows it was fitted on.
    """

    def __init__(self, estimator, max_rows, random_state=0):
        self.estimator = estimator
        self.max_rows = max_rows
        self.random_state = random_state

    def fit(self, X, y):
        """Fit a clone of `estimator` on the sample of (X, y)."""
        y = np.asarray(y)
        rows = capped_rows(y, self.max_rows, self.random_state, is_classifier(self))
        self.estimator_ = clone(self.estimator).fit(_safe_indexing(X, rows), y[rows])
        self.n_rows_ = len(rows)
        if hasattr(self.estimator_, "classes_"):
            self.classes_ = self.estimator_.classes_
        return self

    def predict(self, X):
        """The fitted estimator's predictions, shape (n_samples,)."""
        check_is_fitted(self)
        return self.estimator_.predict(X)


class RowCappedRegressor(RegressorMixin, _RowCapped):
    """A regressor fitted on at most `max_rows` rows (_RowCapped)."""


class RowCappedClassifier(ClassifierMixin, _RowCapped):
    """A classifier fitted on at most `max_rows` rows, each class in its
    share and every class kept (_RowCapped)."""

    # only where the classifier has it (an SVC without probability estimates
    # does not): the ensemble asks hasattr
    @available_if(lambda self: hasattr(self.estimator, "predict_proba"))
    def predict_proba(self, X):
        """The fitted classifier's class probabilities, (n_samples, n_classes)."""
        check_is_fitted(self)
        return self.estimator_.predict_proba(X)


def row_capped(model: BaseEstimator, max_rows: int | None, seed: int) -> BaseEstimator:
    """`model` itself, or where it costs more than linearly in its rows and
    `max_rows` is set, `model` fitted on a sample of at most `max_rows`."""
    if max_rows is None or not costs_more_than_linearly(model):
        return model
    final = final_estimator(model)
    wrapper = (
        RowCappedClassifier
        if isinstance(final, ClassifierMixin)
        else RowCappedRegressor
    )
    return wrapper(model, max_rows, seed)


# Rounds without improvement of the held-out loss that end a grown member's
# boosting: with scikit-learn's default of 10, boosting at a learning rate of
# 0.1-0.2 stopped at 190-558 rounds on the 670,000 rows of the module's
# docstring, to test MSEs of 0.0433 and 0.0429 against 0.0427 and 0.0424
# with 30 (at 519 and 946 rounds).
PATIENCE = 30
# A grown classifier holds out a stratified tenth of its rows, which needs
# every class in both parts; with a class rarer than this among the training
# rows (a fold model fits four fifths of them) its rounds are not grown.
RAREST_CLASS_TO_GROW = 10


def rounds_growth(searched_rows: int, training_rows: int | None) -> float:
    """How many times its rounds a histogram boosting member may boost when
    refit on `training_rows` (None: the search had every row) after a search
    on `searched_rows`: their ratio, at least 1."""
    if training_rows is None:
        return 1.0
    return max(1.0, training_rows / searched_rows)


def with_rounds_grown(model: BaseEstimator, growth: float) -> BaseEstimator:
    """`model`, or where it is histogram gradient boosting and `growth` > 1,
    a copy that boosts for up to `growth` times its max_iter rounds, early
    stopped on a held-out tenth of its rows after PATIENCE rounds without
    improvement (module docstring)."""
    final = final_estimator(model)
    if growth <= 1 or not isinstance(final, HISTOGRAM_BOOSTING):
        return model
    grown = clone(model)
    final_estimator(grown).set_params(
        max_iter=ceil(final.max_iter * growth),
        early_stopping=True,
        n_iter_no_change=PATIENCE,
    )
    return grown


@dataclass(frozen=True)
class LargeDataRefit:
    """How members are refit on more training rows than a search of large
    data trained them on (core.preparation.search_input).

    searched_rows: the search's sample size (max_search_rows), the most rows
    a member that costs more than linearly in them is refit on (row_capped);
    rounds: how many times its rounds histogram boosting may boost
    (rounds_growth; 1: not grown).
    """

    searched_rows: int
    rounds: float

    def member(self, model: BaseEstimator, seed: int) -> BaseEstimator:
        """The zoo model `model` as it is refit on all the training rows."""
        return row_capped(
            with_rounds_grown(model, self.rounds), self.searched_rows, seed
        )


def large_data_refit(
    max_search_rows: int | None, target: np.ndarray, classification: bool
) -> LargeDataRefit | None:
    """The refit of members searched on a sample of at most `max_search_rows`
    of the training rows whose labels or values are `target` (n_train,);
    None where the search had them all. A classifier's rounds are not grown
    where a class has fewer than RAREST_CLASS_TO_GROW rows."""
    rows = len(target)
    if max_search_rows is None or rows <= max_search_rows:
        return None
    rounds = rounds_growth(max_search_rows, rows)
    if (
        classification
        and np.unique(target, return_counts=True)[1].min() < RAREST_CLASS_TO_GROW
    ):
        rounds = 1.0
    return LargeDataRefit(max_search_rows, rounds)
