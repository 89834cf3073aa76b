"""Stacking: a level-2 model on the ensemble members' out-of-fold predictions.

Instead of a weighted mean of its members, a stacked ensemble combines them
with a model fitted on what the members predicted for rows they never saw
(Wolpert 1992; AutoGluon's stack layer): a ridge regression on the members'
predictions of the standardized target, or a multinomial logistic regression
on the logarithms of their class probabilities. The members are the search's
ensemble; the rows are the search's out-of-fold predictions in its pool.

Whether the stack is worth shipping is decided by the same cross-validation
that chose the ensemble: the level-2 model is cross-validated on the search's
folds (its own out-of-fold predictions of the out-of-fold predictions) and
kept only if its CV loss is below the plain ensemble's on the same rows.

Why not scikit-learn's StackingRegressor/StackingClassifier: they derive the
level-1 out-of-fold predictions by fitting every member k more times, while
the pool already holds them from the search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegressionCV, RidgeCV
from sklearn.model_selection import PredefinedSplit, cross_val_predict

from ensemble_bo.core.losses import brier_loss, vote_winners
from ensemble_bo.core.results import EnsembleSearchResult

# Probabilities are clipped here before their logarithm: a member sure of a
# class (a tree's 0 or 1) gives a large finite feature, not -inf.
PROBABILITY_FLOOR = 1e-4
# The level-2 models' regularization grids, chosen by their own inner CV.
RIDGE_ALPHAS = np.logspace(-4, 3, 15)
LOGISTIC_CS = np.logspace(-3, 2, 6)
INNER_FOLDS = 5


def stack_features(member_outputs: np.ndarray) -> np.ndarray:
    """The level-2 model's input from its members' outputs.

    member_outputs: predictions (m, n) for regression, or class probabilities
    (m, n, K) for classification. Returns (n, m) predictions, or (n, m * K)
    log-probabilities (floored at PROBABILITY_FLOOR), member by member.
    """
    outputs = np.asarray(member_outputs, dtype=float)
    if outputs.ndim == 2:
        return outputs.T
    if outputs.ndim != 3:
        raise ValueError(
            f"member outputs must be (m, n) predictions or (m, n, K) "
            f"probabilities, got shape {outputs.shape}"
        )
    logs = np.log(np.clip(outputs, PROBABILITY_FLOOR, 1.0))
    return logs.transpose(1, 0, 2).reshape(outputs.shape[1], -1)


def level2_model(task: str) -> BaseEstimator:
    """The unfitted level-2 model of a task, its regularization chosen by inner CV."""
    if task == "regression":
        return RidgeCV(alphas=RIDGE_ALPHAS)
    return LogisticRegressionCV(
        Cs=LOGISTIC_CS,
        l1_ratios=(0.0,),
        cv=INNER_FOLDS,
        scoring="neg_log_loss",
        max_iter=2_000,
        use_legacy_attributes=False,
    )


@dataclass(frozen=True)
class Stack:
    """A fitted level-2 model over a search's ensemble, and whether CV keeps it.

    members: the pool indices it combines, in the order of its input columns;
    combiner: the level-2 model fitted on all their out-of-fold rows, frozen
    (cloning the final model keeps it fitted); cv_loss / ensemble_cv_loss: the
    stack's and the plain ensemble's loss on the search's folds, by `metric`.
    """

    members: tuple[int, ...]
    combiner: FrozenEstimator
    cv_loss: float
    ensemble_cv_loss: float
    metric: str

    @property
    def chosen(self) -> bool:
        """Whether the stack beat the plain ensemble in cross-validation."""
        return self.cv_loss < self.ensemble_cv_loss

    def metrics(self) -> dict[str, float]:
        """What a run logs of the choice."""
        return {
            "stacking_cv_loss": self.cv_loss,
            "stacking_ensemble_cv_loss": self.ensemble_cv_loss,
            "stacking_chosen": float(self.chosen),
        }


def comparison_metric(result: EnsembleSearchResult) -> str:
    """How the stack and the ensemble are compared: mse for regression; for
    classification the search's objective where it scores probabilities
    (log_loss, brier), else the error rate."""
    if result.task == "regression":
        return "mse"
    return result.objective if result.objective in ("log_loss", "brier") else "error"


def _loss(metric: str, outputs: np.ndarray, target: np.ndarray) -> float:
    """Mean loss of predictions (n,) or class probabilities (n, K) on `target`."""
    if metric == "mse":
        return float(np.mean(np.square(outputs - target)))
    if metric == "error":
        return float(np.mean(vote_winners(outputs) != target))
    true_class = outputs[np.arange(len(target)), target]
    if metric == "log_loss":
        return float(np.mean(-np.log(np.clip(true_class, PROBABILITY_FLOOR, 1.0))))
    one_hot = np.eye(outputs.shape[1])[target]
    return float(np.mean(brier_loss(outputs - one_hot)))


def _ensemble_outputs(
    result: EnsembleSearchResult, members: list[int], voting: str
) -> np.ndarray:
    """The plain ensemble's out-of-fold predictions (n,) or class scores (n, K),
    combined as its final model combines them by `voting` (vote shares under
    hard voting)."""
    weights = np.array([result.member_weights[i] for i in members], dtype=float)
    weights /= weights.sum()
    if result.task == "regression":
        return weights @ result.pool.predictions[members]
    if voting == "soft":
        scores = result.pool.member_outputs("probabilities")[members]
    else:
        codes = result.pool.member_outputs("class_codes")[members]
        scores = np.eye(result.pool.n_classes)[codes]
    return np.tensordot(weights, scores, axes=1)


def fitted_stack(
    result: EnsembleSearchResult, fold_ids: np.ndarray, voting: str = "auto"
) -> Stack:
    """The level-2 model over `result`'s ensemble, fitted and cross-validated.

    fold_ids (n,): the search's folds, the rows of its pool; the level-2
    model's CV loss comes from these same folds. voting: how the plain
    ensemble it is compared with combines classifiers (the `voting`
    parameter; "auto": as its objective does).

    The plain ensemble's CV loss is the one its members and weights were
    chosen on, so it is optimistic, while the stack's is cross-validated:
    the comparison favours the plain ensemble.
    """
    if voting == "auto":
        voting = result.voting
    members = sorted(result.member_weights)
    target = np.asarray(result.target)
    if result.task == "regression":
        features = stack_features(result.pool.predictions[members])
        method = "predict"
    else:
        target = target.astype(int)
        features = stack_features(result.pool.member_outputs("probabilities")[members])
        method = "predict_proba"
    fold_ids = np.asarray(fold_ids)
    if fold_ids.shape != target.shape:
        raise ValueError(
            f"fold_ids must give the fold of each of the pool's {len(target)} rows, "
            f"got shape {fold_ids.shape}"
        )
    model = level2_model(result.task)
    stacked = cross_val_predict(
        model, features, target, cv=PredefinedSplit(fold_ids), method=method
    )
    metric = comparison_metric(result)
    return Stack(
        members=tuple(members),
        combiner=FrozenEstimator(model.fit(features, target)),
        cv_loss=_loss(metric, stacked, target),
        ensemble_cv_loss=_loss(
            metric, _ensemble_outputs(result, members, voting), target
        ),
        metric=metric,
    )
