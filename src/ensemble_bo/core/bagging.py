"""Bagged members: one configuration's k fold models, predicting by their mean.

A bagged final ensemble (the `final_model: bagged` parameter) ships, for each
member, the k models cross-validation fits (fitted by core.evaluation's
`fitted_fold_models`, the same rows the search's trials fitted) instead of one
model refit on all rows: the predictions the ensemble was selected on are,
fold by fold, those of the models it ships. A regressor predicts the mean of
its fold models' predictions; a classifier the mean of their class
probabilities (the one-hot of the labels of a model without predict_proba, as
in the search's out-of-fold probabilities), and the class that mean favours.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, is_classifier
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import get_tags
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ensemble_bo.core.evaluation import (
    checked_fold_ids,
    class_probabilities,
    fitted_fold_models,
)
from ensemble_bo.core.losses import vote_winners

# What a search's final model is made of: each member refit on all training
# rows, or each member's k fold models from cross-validation, averaged.
FINAL_MODELS = ("refit", "bagged")


class _BaggedFoldModels(BaseEstimator):
    """What both bagged members share: the fold models and their fit.

    Parameters
    ----------
    estimator : estimator
        The unfitted model each fold fits a clone of.
    fold_ids : array-like of shape (n_samples,)
        The fold of each row of the X given to fit; a fold's model fits every
        other fold's rows. At least two folds.

    Attributes
    ----------
    estimators_ : list of estimator, one per fold in sorted fold order
        estimators_[j] was fitted on the rows outside the j-th fold.
    folds_ : ndarray of shape (n_folds,)
        The sorted fold ids.
    """

    def __init__(self, estimator, fold_ids):
        self.estimator = estimator
        self.fold_ids = fold_ids

    def _fit_folds(self, X, y) -> None:
        fold_ids, self.folds_ = checked_fold_ids(self.fold_ids, len(y))
        self.estimators_ = [
            fitted for _, fitted in fitted_fold_models(self.estimator, X, y, fold_ids)
        ]
        if hasattr(self.estimators_[0], "n_features_in_"):
            self.n_features_in_ = self.estimators_[0].n_features_in_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # X goes to the fold models unchanged: they decide what it may hold.
        inner = get_tags(self.estimator).input_tags
        tags.input_tags.allow_nan = inner.allow_nan
        tags.input_tags.sparse = inner.sparse
        return tags


class BaggedRegressor(RegressorMixin, _BaggedFoldModels):
    """The mean prediction of a regressor's fold models.

    Parameters and attributes: see `_BaggedFoldModels`.
    """

    def fit(self, X, y):
        """Fit one clone of `estimator` per fold, on the rows of the other folds."""
        self._fit_folds(X, column_or_1d(y, warn=True))
        return self

    def predict(self, X):
        """The fold models' mean prediction, shape (n_samples,)."""
        check_is_fitted(self)
        return np.mean([model.predict(X) for model in self.estimators_], axis=0)


class BaggedClassifier(ClassifierMixin, _BaggedFoldModels):
    """The mean class probabilities of a classifier's fold models.

    Parameters and attributes: see `_BaggedFoldModels`; also `classes_`, the
    sorted labels seen at fit. Fold models are fitted on codes
    0..n_classes-1; one whose training rows lacked a class gives it
    probability 0.
    """

    def fit(self, X, y):
        """Fit one clone of `estimator` per fold, on the rows of the other folds."""
        if not is_classifier(self.estimator):
            raise ValueError(
                f"BaggedClassifier needs a classifier, got {self.estimator!r}"
            )
        encoder = LabelEncoder().fit(column_or_1d(y, warn=True))
        self.classes_ = encoder.classes_
        self._fit_folds(X, encoder.transform(column_or_1d(y)))
        return self

    def predict_proba(self, X):
        """Mean class probabilities, shape (n_samples, n_classes), `classes_` order."""
        check_is_fitted(self)
        return np.mean(
            [
                class_probabilities(model, X, len(self.classes_))
                for model in self.estimators_
            ],
            axis=0,
        )

    def predict(self, X):
        """The class of the largest mean probability (ties: the lowest in `classes_`)."""
        return self.classes_[vote_winners(self.predict_proba(X))]


def bagged(estimator: BaseEstimator, fold_ids: np.ndarray) -> _BaggedFoldModels:
    """`estimator` bagged over `fold_ids`: a BaggedClassifier or BaggedRegressor."""
    if is_classifier(estimator):
        return BaggedClassifier(estimator, fold_ids)
    return BaggedRegressor(estimator, fold_ids)
