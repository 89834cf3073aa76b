"""The final model of a search: its ensemble refit on all training data, or
bagged over the search's folds, optionally stacked, and its test losses."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.metrics import log_loss, roc_auc_score

from ensemble_bo.core.bagging import bagged
from ensemble_bo.core.conformal import (
    REPORTED_COVERAGES,
    CrossConformalClassifier,
    CrossConformalRegressor,
    conformal_reachable,
    cross_conformal,
    expected_calibration_error,
)
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model, member_spread
from ensemble_bo.core.evaluation import fold_row_share, pickled_bytes
from ensemble_bo.core.losses import brier_loss, zero_one_loss
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.row_capped import LargeDataRefit
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.stacking import Stack, fitted_stack
from ensemble_bo.core.validation import (
    check_conformal,
    check_conformal_rows,
    check_final_model,
    check_split_conformal_above,
    check_stacking,
)
from ensemble_bo.core.zoo import make_model, quiet_iteration_caps


def bagging_folds(final_model: str, data: ModelInput) -> np.ndarray | None:
    """The folds a `final_model` bags its members over: the search's
    (`data.fold_ids`) for "bagged", None for "refit"."""
    check_final_model(final_model)
    return data.fold_ids if final_model == "bagged" else None


@dataclass(frozen=True)
class ConformalPlan:
    """How the final model's intervals or sets are made (core.conformal).

    fold_ids (n_train,): the search's folds; train_fraction: the share of
    its rows each fold model fits on; calibration_folds: the folds that
    calibrate, None: every fold (CV+), or one (split conformal).
    """

    fold_ids: np.ndarray
    train_fraction: float = 1.0
    calibration_folds: tuple[int, ...] | None = None


def conformal_plan(
    conformal: bool,
    data: ModelInput,
    conformal_rows: int | None = None,
    split_conformal_above: int | None = None,
) -> ConformalPlan | None:
    """The final model's conformal plan where `conformal`, else None: over
    the search's folds of `data` (all its training rows), each fold model
    on a sample of at most `conformal_rows` rows (None: all;
    core.evaluation.fold_row_share), and above `split_conformal_above`
    training rows (None: never) split conformal on the first fold: one fold
    model instead of k, which keeps the refit and the logged model small."""
    check_conformal(conformal)
    check_conformal_rows(conformal_rows)
    check_split_conformal_above(split_conformal_above)
    if not conformal:
        return None
    split = (
        split_conformal_above is not None and len(data.fold_ids) > split_conformal_above
    )
    return ConformalPlan(
        data.fold_ids,
        fold_row_share(conformal_rows, data.fold_ids),
        (int(np.min(data.fold_ids)),) if split else None,
    )


def final_fit_factor(
    final_model: str, search_data: ModelInput, conformal: ConformalPlan | None = None
) -> float:
    """The final model's fit seconds per second its members' trials took, by
    the rows it fits (core.time_budget keeps that much back for it).

    A trial of the search on `search_data` fits k fold models on (k-1)/k of
    its rows; the final model fits every training row (more than the search's
    when it searched a sample): refit, one model per member, 1/(k-1) of a
    trial's rows; bagged (`final_model`), k fold models of every row; a
    `conformal` plan adds its fold models (CV+: k, split: one) on their share
    of the rows. Fit time is taken to grow with the rows, which it does at
    least: an estimate, not a bound.
    """
    check_final_model(final_model)
    rows = len(search_data.fold_ids)
    k = len(np.unique(search_data.fold_ids))
    growth = (search_data.sampled_from or rows) / rows
    factor = growth if final_model == "bagged" else growth / (k - 1)
    if conformal is not None:
        calibrating = (
            k
            if conformal.calibration_folds is None
            else len(conformal.calibration_folds)
        )
        factor += growth * conformal.train_fraction * calibrating / k
    return factor


def search_stack(
    stacking: bool, result: EnsembleSearchResult, data: ModelInput, voting: str
) -> Stack | None:
    """The level-2 model over the search's ensemble if `stacking` asks for one
    (core.stacking, cross-validated on the search's folds and compared with
    the ensemble combined by `voting`), else None."""
    check_stacking(stacking)
    return fitted_stack(result, data.fold_ids, voting) if stacking else None


def ensemble_estimator(
    result: EnsembleSearchResult,
    encoding: FeatureEncoding,
    voting: str,
    seed: int,
    weights: Mapping[int, float] | None = None,
    fold_ids: np.ndarray | None = None,
    stack: Stack | None = None,
    conformal: ConformalPlan | None = None,
    large_data: LargeDataRefit | None = None,
) -> BaseEstimator:
    """Unfitted model on raw feature frames: the members `weights` names (pool
    index -> weight; default the search's ensemble), each built with the
    search's model seed and told its columns of category codes (as in its
    cross-validation), the search's feature encoding first.
    `voting` "auto" combines classifiers as the objective the ensemble was
    chosen by does (EnsembleSearchResult.voting). `fold_ids` (n_train,): bag
    each member over these folds (core.bagging), fitting its k fold models
    where the fit refits it on all rows; None: refit. `stack` (search_stack):
    where cross-validation chose it, its members combined by its level-2
    model instead of weights and voting. `conformal` (conformal_plan): wrap
    it in core.conformal's CV+ (or split conformal) model, which also fits the
    ensemble (its members unbagged) on the calibrating folds' complements, so
    that it gives prediction intervals (regression) or prediction sets
    (classification). `large_data` (core.row_capped.large_data_refit): the
    members of a search on a sample, refit on every row: those whose cost
    grows faster than their rows on a sample of the search's size, histogram
    boosting for more rounds.
    """
    stacked = stack is not None and stack.chosen and weights is None
    if stacked:
        weights = dict.fromkeys(stack.members, 1.0)
    weights = result.member_weights if weights is None else weights
    if voting == "auto":
        voting = result.voting
    model_seed = derive_seed(seed, "models")
    members = [
        make_model(
            result.model_name,
            result.pool.configs[i],
            model_seed,
            encoding.categorical_features,
        )
        for i in weights
    ]
    if large_data is not None:
        rows_seed = derive_seed(seed, "member rows")
        members = [large_data.member(m, rows_seed) for m in members]

    def ensemble(members):
        return build_ensemble_model(
            result.task,
            members,
            list(weights.values()),
            encoding,
            voting=voting,
            combiner=stack.combiner if stacked else None,
        )

    final = ensemble(
        members if fold_ids is None else [bagged(m, fold_ids) for m in members]
    )
    if conformal is None:
        return final
    # a bagged final model's folds fit its members unbagged; a refit one's
    # fit the final model itself
    plain = None if fold_ids is None else ensemble(members)
    return cross_conformal(
        final,
        conformal.fold_ids,
        result.task,
        plain,
        member_spread,
        conformal.train_fraction,
        conformal.calibration_folds,
    )


def test_sample_losses(
    model: BaseEstimator,
    features: pd.DataFrame,
    target: pd.Series,
    task: str,
    target_scaling: Mapping[str, float],
) -> np.ndarray:
    """Per-sample test losses (n_test,) of a fitted model on the held-out test split.

    Regression: squared residuals of the standardized target (SEGOR s.4);
    classification: 0/1 errors. Their mean is the run's test metric.
    """
    predictions = model.predict(features)
    if task == "classification":
        return zero_one_loss(predictions, np.asarray(target))
    return np.square((predictions - np.asarray(target)) / target_scaling["std"])


def classification_test_metrics(
    model: BaseEstimator, features: pd.DataFrame, target: pd.Series
) -> dict[str, float]:
    """Log-loss, Brier score, ROC AUC and expected calibration error of a
    fitted classifier's predict_proba.

    Brier: the sum over classes of squared probability errors (losses.brier_loss,
    0 to 2). ROC AUC: binary, or the macro one-vs-rest mean for more classes; NaN
    where the test part lacks a class, which leaves it undefined. ECE: top-label,
    10 bins (conformal.expected_calibration_error).
    """
    probabilities = model.predict_proba(features)
    classes = model.classes_
    labels = np.asarray(target)
    one_hot = (labels[:, None] == classes[None, :]).astype(float)
    if len(classes) == 2:
        auc = roc_auc_score(one_hot[:, 1], probabilities[:, 1])
    else:
        auc = roc_auc_score(labels, probabilities, multi_class="ovr", labels=classes)
    return {
        "log_loss": float(log_loss(labels, probabilities, labels=classes)),
        "brier": float(brier_loss(probabilities - one_hot).mean()),
        "roc_auc": float(auc),
        "ece": expected_calibration_error(
            probabilities, np.searchsorted(classes, labels)
        )[0],
    }


def uncertainty_test_metrics(
    model: BaseEstimator,
    features: pd.DataFrame,
    target: pd.Series,
    target_scaling: Mapping[str, float],
) -> dict[str, float]:
    """Test coverage of a conformal model's intervals or sets, and their size,
    at each of conformal.REPORTED_COVERAGES (e.g. test_interval_coverage_90).

    Regression: the share of test targets inside their interval and the mean
    width in units of the target's standard deviation (comparable across
    datasets, as the test MSE is). Classification: the share of test labels
    in their set and the mean set size (classes). A coverage the training
    rows are too few for is left out.
    """
    metrics = {}
    truth = np.asarray(target)
    # each fold model predicts the test rows once, for every coverage
    coverages = [
        c for c in REPORTED_COVERAGES if conformal_reachable(c, len(model.score_folds_))
    ]
    if hasattr(model, "predict_intervals"):
        for coverage, bounds in model.predict_intervals(features, coverages).items():
            level = round(100 * coverage)
            inside = (bounds[:, 0] <= truth) & (truth <= bounds[:, 1])
            width = (bounds[:, 1] - bounds[:, 0]) / target_scaling["std"]
            metrics[f"test_interval_coverage_{level}"] = float(inside.mean())
            metrics[f"test_interval_width_{level}"] = float(width.mean())
        return metrics
    rows = np.arange(len(truth))
    for coverage, sets in model.predict_sets(features, coverages).items():
        level = round(100 * coverage)
        inside = sets[rows, np.searchsorted(model.classes_, truth)]
        metrics[f"test_set_coverage_{level}"] = float(inside.mean())
        metrics[f"test_set_size_{level}"] = float(sets.sum(axis=1).mean())
    return metrics


def refit_and_score(
    result: EnsembleSearchResult,
    train_features: pd.DataFrame,
    train_target: pd.Series,
    test_features: pd.DataFrame,
    test_target: pd.Series,
    encoding: FeatureEncoding,
    target_scaling: Mapping[str, float],
    voting: str,
    seed: int,
    fold_ids: np.ndarray | None = None,
    stack: Stack | None = None,
    conformal: ConformalPlan | None = None,
    large_data: LargeDataRefit | None = None,
) -> tuple[BaseEstimator, dict[str, float], np.ndarray]:
    """Refit the ensemble and the single best model on all non-test data, or
    bag them over `fold_ids` (bagging_folds); score both. The ensemble is
    stacked where `stack` (search_stack) was chosen; its metrics join the run's.
    With a `conformal` plan (conformal_plan) the ensemble gives intervals or
    sets, and their test coverage and size join the metrics
    (uncertainty_test_metrics); its refit seconds include its fold models'.

    Returns the fitted ensemble, the run's metrics (test MSE of the
    standardized target for regression, error rate for classification, of the
    ensemble and of the single best model, and for classification their
    log-loss, Brier score and ROC AUC too; distinct members; failed trials;
    the time split: the search's seconds and the ensemble's refit seconds
    (bagged: the seconds its fold models took),
    and whether the time budget ended the search) and the ensemble's
    per-sample test losses (n_test,).
    """
    task = result.task

    def fitted_losses(weights: Mapping[int, float] | None):
        model = ensemble_estimator(
            result,
            encoding,
            voting,
            seed,
            weights,
            fold_ids,
            stack,
            conformal if weights is None else None,
            large_data,
        )
        start = time.perf_counter()
        with quiet_iteration_caps():
            model.fit(train_features, train_target)
        fit_seconds = time.perf_counter() - start
        losses = test_sample_losses(
            model, test_features, test_target, task, target_scaling
        )
        return model, losses, fit_seconds

    ensemble, ensemble_losses, refit_seconds = fitted_losses(None)
    single, single_losses, _ = fitted_losses({result.best_single: 1.0})
    name = "test_error" if task == "classification" else "test_mse"
    metrics = {
        f"{name}_ensemble": float(ensemble_losses.mean()),
        f"{name}_single_best": float(single_losses.mean()),
        "ensemble_members_distinct": float(len(result.member_weights)),
        "trials_failed": float((~result.pool.ok).sum()),
        # answered from the journal of a stopped run instead of trained again
        "trials_reused": float(result.trials_reused),
        "trials": float(len(result.pool)),
        "search_seconds": result.search_seconds,
        "refit_seconds": refit_seconds,
        "time_budget_reached": float(result.stopped_by == "time_budget"),
        **result.search_metrics,
        **(stack.metrics() if stack is not None else {}),
    }
    if task == "classification":
        for model, which in ((ensemble, "ensemble"), (single, "single_best")):
            for metric, value in classification_test_metrics(
                model, test_features, test_target
            ).items():
                metrics[f"test_{metric}_{which}"] = value
    if conformal is not None:
        metrics |= uncertainty_test_metrics(
            ensemble, test_features, test_target, target_scaling
        )
    metrics |= serving_costs(ensemble, test_features)
    return ensemble, metrics, ensemble_losses


# The most test rows the final model's prediction time is measured on.
TIMED_ROWS = 10_000


def serving_costs(model: BaseEstimator, features: pd.DataFrame) -> dict[str, float]:
    """What the final model costs to serve: its prediction seconds per 1,000
    rows (the best of 3 predictions of the first TIMED_ROWS rows of
    `features`) and its pickled size in
    MB, of the ensemble alone (a conformal model's fold models serve only
    intervals and sets) and, as logged, with them: the ensemble's pickle plus
    the rest of the conformal model's (fold models, residuals), so that the
    ensemble, often the largest part, is pickled once."""
    conformal = isinstance(model, CrossConformalRegressor | CrossConformalClassifier)
    ensemble = model.estimator_ if conformal else model
    # the rate, not the total: a few thousand rows time it as well as all
    features = features.iloc[:TIMED_ROWS]
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        ensemble.predict(features)
        seconds.append(time.perf_counter() - start)
    ensemble_mb = _pickled_mb(ensemble)
    costs = {
        "ensemble_predict_seconds_per_1000": 1000 * min(seconds) / len(features),
        "ensemble_model_mb": ensemble_mb,
    }
    if conformal:
        rest = copy.copy(model)
        del rest.estimator_
        costs["final_model_mb"] = ensemble_mb + _pickled_mb(rest)
    return costs


def _pickled_mb(model: BaseEstimator) -> float:
    return pickled_bytes(model) / 1e6
