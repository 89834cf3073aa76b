"""Evaluating a configuration: k-fold out-of-fold predictions, failures recorded.

The mathematics only, in the calling process: where an evaluation runs, under
which time limit, is core.workers' (worker processes) and core.runners' (one
at a time, local workers, Dask).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import cloudpickle
import numpy as np
from sklearn.base import BaseEstimator, clone, is_classifier
from sklearn.utils import _safe_indexing

from ensemble_bo.core.trials import TrialRequest, TrialResult
from ensemble_bo.core.zoo import MODEL_FACTORIES, make_model, quiet_iteration_caps

ModelFactory = Callable[[str, dict[str, Any], int], BaseEstimator]


def evaluate_configuration(
    model_factory: ModelFactory,
    model_name: str,
    config: dict[str, Any],
    random_state: int,
    X: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
) -> TrialResult:
    """One configuration's out-of-fold outputs on `folds` (None: all; the
    other folds' rows NaN), or the failed trial saying why.

    model_factory(model_name, config, random_state) builds the unfitted model;
    X (n, p), y (n,), fold_ids (n,), or (R, n) for repeated k-fold: R fold
    assignments of the same rows, evaluated one after the other, their
    outputs side by side ((R * n,), probabilities (R * n, K)), fit seconds
    added up, the costs the first's; the first that fails ends the trial.
    The same in this process, in a worker process and in a Dask task. Any
    error while building, fitting or predicting, and predictions that are
    not finite, make a failed trial.
    """
    if np.ndim(fold_ids) == 2:  # repeated k-fold: one assignment after another
        fixed = (model_factory, model_name, config, random_state, X, y)
        return side_by_side(
            evaluate_configuration(*fixed, split, folds, train_fraction)
            for split in fold_ids
        )
    start = time.perf_counter()
    try:
        model = model_factory(model_name, config, random_state)
        costs = FoldCosts()
        with quiet_iteration_caps():
            predictions, probabilities = out_of_fold_predictions(
                model, X, y, fold_ids, folds, train_fraction, random_state, costs
            )
        evaluated = np.isin(fold_ids, _folds_or_all(fold_ids, folds))
        if not np.all(np.isfinite(predictions[evaluated])) or (
            probabilities is not None
            and not np.all(np.isfinite(probabilities[evaluated]))
        ):
            raise ValueError("the model predicted NaN or infinite values")
    except Exception as error:  # noqa: BLE001 - any training failure is a failed trial
        return TrialResult(
            None, time.perf_counter() - start, f"{type(error).__name__}: {error}"
        )
    return TrialResult(
        np.asarray(predictions, dtype=float),
        time.perf_counter() - start,
        oof_probabilities=probabilities,
        predict_seconds_per_1000=costs.predict_seconds_per_1000,
        model_bytes=costs.model_bytes,
    )


def side_by_side(trials: Iterable[TrialResult]) -> TrialResult:
    """Trials of one configuration on fold assignments of the same rows as
    one: outputs concatenated, fit seconds added up, the first's costs; the
    first failed trial ends it (the rest are not evaluated)."""
    done: list[TrialResult] = []
    for trial in trials:
        if not trial.ok:
            seconds = sum(earlier.fit_seconds for earlier in done)
            return replace(trial, fit_seconds=seconds + trial.fit_seconds)
        done.append(trial)
    probabilities = [trial.oof_probabilities for trial in done]
    return TrialResult(
        np.concatenate([trial.oof_predictions for trial in done]),
        sum(trial.fit_seconds for trial in done),
        oof_probabilities=None
        if any(p is None for p in probabilities)
        else np.concatenate(probabilities),
        predict_seconds_per_1000=done[0].predict_seconds_per_1000,
        model_bytes=done[0].model_bytes,
    )


@dataclass
class FoldCosts:
    """What a configuration's fold models cost to predict with and to keep,
    measured while cross-validation runs (TrialResult's two cost fields)."""

    predict_seconds: float = 0.0
    predicted_rows: int = 0
    model_bytes: float = math.nan

    def measure(self, fitted: BaseEstimator, seconds: float, rows: int) -> None:
        """Add one fold model's prediction time on `rows` rows; the first
        one's pickled size stands for all (the folds' models are alike)."""
        self.predict_seconds += seconds
        self.predicted_rows += rows
        if math.isnan(self.model_bytes):
            self.model_bytes = float(pickled_bytes(fitted))

    @property
    def predict_seconds_per_1000(self) -> float:
        if not self.predicted_rows:
            return math.nan
        return 1000 * self.predict_seconds / self.predicted_rows


def pickled_bytes(obj: Any) -> int:
    """The size of `obj` pickled (protocol 5), counted as it is written
    rather than held: pickle.dumps of a large model would need its size again
    in memory just to be measured.

    cloudpickle writes what pickle writes for an importable class, and also
    pickles one that is not, by value: a model class defined in a script or
    a notebook reaches a worker process that way (loky and Dask send with
    cloudpickle), where pickle's lookup of it fails every trial.
    """
    counter = _ByteCounter()
    cloudpickle.dump(obj, counter, protocol=5)
    return counter.written


class _ByteCounter:
    """A file that keeps only how many bytes were written to it."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.written += size
        return size


def _folds_or_all(fold_ids: np.ndarray, folds: Sequence[int] | None) -> np.ndarray:
    all_folds = np.unique(fold_ids)
    if folds is None:
        return all_folds
    unknown = sorted(set(folds) - set(all_folds.tolist()))
    if unknown:
        raise ValueError(
            f"folds {unknown} are not among the folds {all_folds.tolist()}"
        )
    return np.asarray(sorted(set(folds)))


def out_of_fold_predictions(
    model: BaseEstimator,
    X: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
    random_state: int = 0,
    costs: FoldCosts | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(predictions (n,), class probabilities (n, K) or None) of k-fold CV.

    `folds`: the folds to predict (None: all); the rows of the others are NaN,
    so that a multi-fidelity search can evaluate a configuration on some folds
    and add the rest later (`merge_fold_results`). Each fold's model is fitted
    on the rows of every other fold, whichever folds are predicted, so a fold's
    predictions are the same whether it is evaluated alone or with the rest.
    `train_fraction` < 1 fits each fold's model on that share of its training
    rows (at least 2), a prefix of one seeded shuffle per fold, so a larger
    fraction trains on a superset: the rows resource of a multi-fidelity search.

    Regression: the model's predictions, no probabilities. A classifier, y
    holding codes 0..K-1, gives both its `predict` labels and its
    `predict_proba` from one fit per fold (columns placed by its `classes_`, so
    a fold missing a class leaves that column 0). A classifier without
    predict_proba (an SVC without Platt scaling) gives the one-hot of its
    labels: its hard vote, with no calibration fits added, which the log-loss
    then prices as a sure answer. `costs`, where given, gathers the fold
    models' prediction time and size.
    """
    classifier = is_classifier(model)
    targets = np.asarray(y).astype(int) if classifier else np.asarray(y)
    predictions = np.full(len(targets), np.nan)
    probabilities = None
    if classifier:
        n_classes = int(targets.max()) + 1
        probabilities = np.full((len(targets), n_classes), np.nan)
    for test, fitted in fitted_fold_models(
        model, X, targets, fold_ids, folds, train_fraction, random_state
    ):
        start = time.perf_counter()
        # ravel: CatBoost's classifiers give their labels as a column (m, 1)
        predictions[test] = np.ravel(fitted.predict(X[test]))
        if classifier:
            probabilities[test] = class_probabilities(
                fitted, X[test], n_classes, predictions[test]
            )
        if costs is not None:
            costs.measure(fitted, time.perf_counter() - start, int(test.sum()))
    return predictions, probabilities


# Fewer rows than this for a search's sample or a fold model is refused: a model
# fitted on a handful of rows says little about the one refit on all of them.
MIN_SEARCH_ROWS = 100


def check_row_limit(value: object, name: str = "max_search_rows") -> int | None:
    """The parameter `name`, a limit on rows (max_search_rows: the search's
    training rows; conformal_rows: a conformal fold model's), as an int >=
    MIN_SEARCH_ROWS, or None (all)."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < MIN_SEARCH_ROWS
    ):
        raise ValueError(
            f"{name} must be an integer >= {MIN_SEARCH_ROWS} or null, got {value!r}"
        )
    return int(value)


def fold_row_share(max_rows: int | None, fold_ids: np.ndarray) -> float:
    """The share of each fold's training rows its fold model fits on, so
    that none fits on more than `max_rows` rows (None: 1, every row)."""
    if max_rows is None:
        return 1.0
    _, sizes = np.unique(fold_ids, return_counts=True)
    largest_training_part = len(fold_ids) - int(sizes.min())
    return min(1.0, max_rows / largest_training_part)


def checked_fold_ids(fold_ids: Any, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """`fold_ids` as an array (n_rows,) and its distinct folds; ValueError
    unless it gives each row's fold and names at least two folds (one fold
    leaves no rows to fit on)."""
    fold_ids = np.asarray(fold_ids)
    if fold_ids.ndim != 1 or len(fold_ids) != n_rows:
        raise ValueError(
            f"fold_ids must give the fold of each of the {n_rows} rows, got "
            f"shape {fold_ids.shape}"
        )
    folds = np.unique(fold_ids)
    if len(folds) < 2:
        raise ValueError(
            f"fold_ids must name at least two folds, got {folds.tolist()}; "
            "one fold leaves no rows to fit on"
        )
    return fold_ids, folds


def fitted_fold_models(
    model: BaseEstimator,
    X: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    folds: Sequence[int] | None = None,
    train_fraction: float = 1.0,
    random_state: int = 0,
) -> Iterator[tuple[np.ndarray, BaseEstimator]]:
    """(held-out rows (n,) bool, a clone of `model` fitted on the other folds'
    rows) of each fold of `folds` (None: all), in fold order.

    What cross-validation fits, and what a bagged final model keeps
    (core.bagging): both fit exactly these rows. `train_fraction` < 1 keeps
    that share of each fold's training rows (at least 2), a prefix of a
    seeded_order per fold, stratified for a classifier: any prefix holds each
    class in its share of the rows.
    """
    if not 0 < train_fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction!r}")
    classifier = is_classifier(model)
    for fold in _folds_or_all(fold_ids, folds):
        test = fold_ids == fold
        train = np.flatnonzero(~test)
        if train_fraction < 1:
            order = seeded_order(
                len(train),
                [random_state, int(fold)],
                np.asarray(y)[train] if classifier else None,
            )
            kept = max(2, math.ceil(train_fraction * len(train)))
            train = np.sort(train[order[:kept]])
        yield test, clone(model).fit(_safe_indexing(X, train), y[train])


def seeded_order(n: int, seed: Any, strata: np.ndarray | None = None) -> np.ndarray:
    """A seeded order of n rows (n,) whose every prefix is a random sample:
    a shuffle (numpy's Generator seeded with `seed`), and with `strata` (n,)
    reordered by stratified_order so that every prefix holds each stratum in
    its share. A sample of k rows is np.sort(order[:k])."""
    order = np.random.default_rng(seed).permutation(n)
    if strata is None:
        return order
    return order[stratified_order(np.asarray(strata)[order])]


def stratified_order(labels: np.ndarray) -> np.ndarray:
    """An order of rows (n,) whose every prefix holds each class in its share:
    each row's rank within its class, over the class's size, sorted (stable,
    so each class keeps its given order)."""
    _, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    ranks = np.empty(len(labels))
    for code in range(len(counts)):
        ranks[codes == code] = np.arange(counts[code])
    return np.argsort((ranks + 0.5) / counts[codes], kind="stable")


def class_probabilities(
    fitted: BaseEstimator,
    X: np.ndarray,
    n_classes: int,
    labels: np.ndarray | None = None,
) -> np.ndarray:
    """A classifier's class probabilities, shape (len(X), n_classes), fitted
    on codes 0..n_classes-1: its predict_proba placed by its `classes_` (a
    class it never saw stays 0), or without predict_proba the one-hot of its
    labels (`labels`: its predictions on X, if already made).
    """
    if not hasattr(fitted, "predict_proba"):
        labels = fitted.predict(X) if labels is None else labels
        return np.eye(n_classes)[np.asarray(labels).astype(int)]
    proba = fitted.predict_proba(X)
    probabilities = np.zeros((len(proba), n_classes))
    probabilities[:, np.asarray(fitted.classes_).astype(int)] = proba
    return probabilities


def merge_fold_results(earlier: TrialResult, later: TrialResult) -> TrialResult:
    """One configuration's evaluations on two disjoint sets of folds as one.

    Rows the later evaluation predicted (finite) take its outputs, the others
    keep the earlier ones; fit seconds add up; the costs are the later
    part's (its models are fitted on the same rows as the earlier's), the
    earlier's where it has none. A failed part fails the whole.
    """
    if not later.ok:
        return replace(later, fit_seconds=earlier.fit_seconds + later.fit_seconds)
    if not earlier.ok:
        return earlier
    new_rows = np.isfinite(later.oof_predictions)
    predictions = np.where(new_rows, later.oof_predictions, earlier.oof_predictions)
    probabilities = None
    if later.oof_probabilities is not None:
        probabilities = np.where(
            new_rows[:, None], later.oof_probabilities, earlier.oof_probabilities
        )
    return TrialResult(
        predictions,
        earlier.fit_seconds + later.fit_seconds,
        oof_probabilities=probabilities,
        predict_seconds_per_1000=_known(
            later.predict_seconds_per_1000, earlier.predict_seconds_per_1000
        ),
        model_bytes=_known(later.model_bytes, earlier.model_bytes),
    )


def _known(value: float, fallback: float) -> float:
    return fallback if math.isnan(value) else value


@dataclass(frozen=True, eq=False)
class CrossValidation:
    """k-fold evaluation of configurations of one model over fixed folds.

    Called with a TrialRequest, it evaluates in this process, with no time
    limit (core.workers.WorkerEvaluator runs it in a worker process with one).

    X: (n, p) features; y: (n,) targets (class codes 0..K-1 for
    classification); fold_ids: (n,) fold index of each row, or (R, n): R
    fold assignments, repeated k-fold (evaluate_configuration).
    model_factory(model_name, config, random_state) builds the unfitted model;
    it defaults to the zoo's `make_model` (and only for it, or a partial of it,
    is `model_name` checked against the zoo). For a worker process it must be
    picklable: a module-level function, or a partial of one.
    """

    model_name: str
    X: np.ndarray
    y: np.ndarray
    fold_ids: np.ndarray
    random_state: int = 0
    model_factory: ModelFactory = make_model

    def __post_init__(self) -> None:
        # make_model, or make_model with some of its arguments given (a partial)
        zoo_factory = getattr(self.model_factory, "func", self.model_factory)
        if zoo_factory is make_model and self.model_name not in MODEL_FACTORIES:
            raise ValueError(
                f"unknown model {self.model_name!r}; available: "
                f"{sorted(MODEL_FACTORIES)}"
            )
        if not len(self.X) == len(self.y) == np.shape(self.fold_ids)[-1]:
            raise ValueError(
                f"X, y and fold_ids differ in length: {len(self.X)}, {len(self.y)}, "
                f"{np.shape(self.fold_ids)[-1]}"
            )

    def __call__(self, request: TrialRequest) -> TrialResult:
        return evaluate_configuration(
            self.model_factory,
            self.model_name,
            dict(request.config),
            self.random_state,
            self.X,
            self.y,
            self.fold_ids,
            request.folds,
            request.train_fraction,
        )
