"""The methods from Python, outside Kedro: `EnsembleSearch`, a scikit-learn estimator.

    from ensemble_bo import EnsembleSearch

    search = EnsembleSearch(method="segor", budget=50, cv=5, random_state=0)
    search.fit(X, y).predict(X_new)

It runs the same `run_method` as `kedro run`, with the parameters the Kedro
project ships (conf/base, packaged as `ensemble_bo/defaults`), so the same
seed, data and parameters give the same ensemble either way.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils.validation import check_is_fitted

from ensemble_bo.core.methods import (
    DEFAULT_METHOD,
    Callback,
    parse_method,
    run_method,
)
from ensemble_bo.core.preparation import (
    ModelInput,
    assign_folds,
    categorical_columns,
    check_table,
    make_model_input,
    validate_features,
    validate_target,
)
from ensemble_bo.core.refit import ensemble_estimator
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.zoo import quiet_iteration_caps

DEFAULTS = Path(__file__).resolve().parent / "defaults"


def default_parameters() -> dict[str, Any]:
    """The project's parameters as conf/base declares them (interpolations resolved)."""
    # Kedro's own loader, so the files mean exactly what they mean to `kedro run`;
    # imported here because a logged model loads `ensemble_bo` without Kedro.
    from kedro.config import OmegaConfigLoader  # noqa: PLC0415

    with warnings.catch_warnings():
        # Kedro's loader registers its resolvers through a deprecated OmegaConf call.
        warnings.simplefilter("ignore", UserWarning)
        loader = OmegaConfigLoader(
            conf_source=str(DEFAULTS.parent),
            base_env=DEFAULTS.name,
            default_run_env=DEFAULTS.name,
        )
        return copy.deepcopy(dict(loader["parameters"]))


def merged(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`defaults` with `overrides` merged in, nested mappings key by key.

    An override key the defaults lack is refused, naming it: a typo would
    otherwise be ignored silently.
    """
    result = dict(defaults)
    for key, value in overrides.items():
        if key not in defaults:
            raise ValueError(
                f"params: unknown parameter {key!r}; known here: {sorted(defaults)}"
            )
        if isinstance(value, Mapping) and isinstance(defaults[key], Mapping):
            if key == "models":  # model spaces may be added, not only changed
                result[key] = {**defaults[key], **value}
            else:
                result[key] = merged(defaults[key], value)
        else:
            result[key] = value
    return result


def _fold_ids(
    cv: Any, X: pd.DataFrame, y: pd.Series, groups: Any, task: str, seed: int
) -> np.ndarray:
    """Fold of each row (n,): k seeded folds for an int, else the splitter's test folds."""
    if isinstance(cv, int | np.integer) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"cv must be an integer >= 2 or a splitter, got {cv!r}")
        return assign_folds(y, task, int(cv), derive_seed(seed, "cv folds"))
    if not hasattr(cv, "get_n_splits"):
        raise ValueError(
            f"cv must be an integer >= 2 or a scikit-learn splitter, got {cv!r}"
        )
    fold_ids = np.full(len(y), -1)
    for fold, (_, held_out) in enumerate(cv.split(X, y, groups)):
        if (fold_ids[held_out] >= 0).any():
            raise ValueError(
                f"cv={cv!r} holds out some rows in more than one fold; the searches "
                "need each row's out-of-fold prediction exactly once (a K-fold split)"
            )
        fold_ids[held_out] = fold
    if (fold_ids < 0).any():
        raise ValueError(
            f"cv={cv!r} never holds out {int((fold_ids < 0).sum())} rows; the "
            "searches need every row's out-of-fold prediction (a K-fold split)"
        )
    return fold_ids


def _frame(X: Any) -> pd.DataFrame:
    """X as a DataFrame with text column names (an array's columns are "0", "1", ...)."""
    frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(np.asarray(X))
    return frame.rename(columns=str)


class EnsembleSearch(BaseEstimator):
    """Search the ensemble that generalizes best, by one of the registered methods.

    Parameters
    ----------
    method : str
        A name of `ensemble_bo.METHODS` (e.g. "segor", "sego", "esmbo",
        "smbo_posthoc"), with a variant where the method takes one ("segor:g-h").
    model : str
        A model space of `parameters_models.yml` (e.g. "svr", "sego_sklearn"),
        or "auto" for the task's default.
    budget : int
        Configurations trained.
    time_budget : float or None
        Wall-time budget of the search in seconds: whichever of `budget` and
        `time_budget` ends first stops it; a trial still running at the end is
        cut (a failed trial). The refit is not counted: `result_.search_seconds`
        is the search's time, `refit_seconds_` the refit's. None: no limit.
    cv : int or scikit-learn splitter
        k seeded folds (stratified for classes), or a splitter whose test folds
        partition the rows (KFold, StratifiedKFold, GroupKFold, ...).
    params : dict or None
        Overrides of the project's parameters, with the keys of the method's
        parameters file, e.g. {"ensemble": {"variant": "g-m"}} or
        {"segor": {"optimizer": {"n_initial": 5}}}; also "voting" and
        "data_processing": {"task": ...}.
    random_state : int or None
        Seed of every random choice; None draws one (kept in `seed_`).
    callbacks : sequence of callables or None
        Each gets every iteration's record (`IterationRecord`) as it ends.

    Attributes
    ----------
    ensemble_ : estimator
        The final ensemble, refit on all of X (a scikit-learn Pipeline on raw
        feature columns; regression predicts in the target's units).
    result_ : EnsembleSearchResult
        The search: its pool (every configuration with its out-of-fold
        predictions), history and ensemble.
    cv_loss_ : float
        CV loss of the final ensemble (standardized-target MSE, or the method's
        loss; classification: the method's objective).
    members_ : pandas.DataFrame
        One row per distinct member: pool trial, weight, configuration.
    task_ : str
        "regression" or "classification".
    fold_ids_ : ndarray of shape (n,)
        The CV fold of each row.
    seed_ : int
        The seed used.
    refit_seconds_ : float
        Seconds the final ensemble's refit on all of X took.
    """

    def __init__(
        self,
        method: str = DEFAULT_METHOD,
        model: str = "auto",
        budget: int = 50,
        time_budget: float | None = None,
        cv: Any = 5,
        params: Mapping[str, Any] | None = None,
        random_state: int | None = None,
        callbacks: list[Callback] | None = None,
    ):
        self.method = method
        self.model = model
        self.budget = budget
        self.time_budget = time_budget
        self.cv = cv
        self.params = params
        self.random_state = random_state
        self.callbacks = callbacks

    def _settings(self) -> dict[str, Any]:
        method, _ = parse_method(self.method)
        settings = merged(default_parameters(), dict(self.params or {}))
        if isinstance(self.budget, bool) or not isinstance(
            self.budget, int | np.integer | float | np.floating
        ):
            raise ValueError(
                "budget must be a positive integer (with a fidelity schedule, a "
                f"positive number of full-fidelity equivalents), got {self.budget!r}"
            )
        # the rest (an int unless multi-fidelity) is check_settings'
        settings["budget"] = (
            int(self.budget)
            if isinstance(self.budget, int | np.integer)
            else float(self.budget)
        )
        settings["time_budget"] = self.time_budget
        settings[method.search_params] = {
            **settings[method.search_params],
            "model": self.model,
        }
        return settings

    def fit(self, X: Any, y: Any, groups: Any = None) -> EnsembleSearch:
        """Search on (X, y) and refit the ensemble on all of it.

        X: (n, p) array or DataFrame (text columns are one-hot encoded); y: (n,);
        groups: (n,) group labels for a group splitter as `cv` (GroupKFold).
        """
        features = _frame(X).reset_index(drop=True)
        target = y if isinstance(y, pd.Series) else pd.Series(np.asarray(y))
        target = target.reset_index(drop=True).rename("target")
        if len(features) != len(target):
            raise ValueError(f"X has {len(features)} rows but y has {len(target)}")
        seed = (
            int(np.random.SeedSequence().generate_state(1)[0])
            if self.random_state is None
            else self.random_state
        )
        settings = self._settings()
        check_table(features, "X")
        validate_features(features, "X")
        task = validate_target(target, settings["data_processing"]["task"], "y")
        dataset = {
            "name": "X",
            "task": task,
            "target": "target",
            "categorical_columns": categorical_columns(features),
        }
        fold_ids = _fold_ids(self.cv, features, target, groups, task, seed)
        data: ModelInput = make_model_input(features, target, dataset, fold_ids)
        result = run_method(self.method, data, settings, seed, self.callbacks or ())
        ensemble = ensemble_estimator(
            result, dataset["categorical_columns"], settings["voting"], seed
        )
        start = time.perf_counter()
        with quiet_iteration_caps():
            self.ensemble_ = ensemble.fit(features, target)
        self.refit_seconds_ = time.perf_counter() - start
        self.result_: EnsembleSearchResult = result
        self.cv_loss_ = float(result.history[-1].ensemble_loss)
        self.members_ = pd.DataFrame(
            [
                {"trial": trial, "weight": weight, **result.pool.configs[trial]}
                for trial, weight in result.member_weights.items()
            ]
        )
        self.task_ = task
        self.seed_ = seed
        self.fold_ids_ = fold_ids
        self.n_features_in_ = features.shape[1]
        if isinstance(X, pd.DataFrame):
            self.feature_names_in_ = np.asarray(features.columns, dtype=object)
        if task == "classification":
            self.classes_ = np.unique(target)
        return self

    def _features(self, X: Any) -> pd.DataFrame:
        check_is_fitted(self, "ensemble_")
        return _frame(X)

    def predict(self, X: Any) -> np.ndarray:
        """Predictions (n,): the target's units, or class labels."""
        features = self._features(X)
        return self.ensemble_.predict(features)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (n, n_classes) in `classes_` order (classification)."""
        features = self._features(X)
        if self.task_ != "classification":
            raise AttributeError(
                "predict_proba is for classification; this is regression"
            )
        return self.ensemble_.predict_proba(features)

    def score(self, X: Any, y: Any) -> float:
        """R^2 for regression, accuracy for classification (scikit-learn's convention)."""
        predictions = self.predict(X)
        if self.task_ == "classification":
            return float(accuracy_score(np.asarray(y), predictions))
        return float(r2_score(np.asarray(y), predictions))
