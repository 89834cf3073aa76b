"""The methods from Python, outside Kedro: scikit-learn estimators.

    from ensemble_bo import EnsembleClassifier, EnsembleRegressor, EnsembleSearch

    search = EnsembleSearch(budget=50, cv=5, random_state=0)  # the task from y
    search.fit(X, y).predict(X_new)
    EnsembleRegressor(budget=50).fit(X, y)  # SEGOR; EnsembleClassifier: SEGO

As scikit-learn splits its voting ensembles, a private base holds what the
estimators share and each task has its class, with the task's mixin:
`EnsembleRegressor` and `EnsembleClassifier`. `EnsembleSearch` chooses its task
(from `task`, the method, or the target) and says so in its estimator tags.

Every one runs the same `run_method` as `kedro run`, with the parameters the
Kedro project ships (conf/base, packaged as `ensemble_bo/defaults`), so the same
seed, data and parameters give the same ensemble either way.
"""

from __future__ import annotations

import copy
import functools
import time
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import ClassifierTags, RegressorTags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    check_array,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from ensemble_bo.core.encoding import categorical_columns
from ensemble_bo.core.explanations import (
    PERMUTATION_REPEATS,
    feature_importance,
    leaderboard,
)
from ensemble_bo.core.methods import TASK_METHODS, Callback, parse_method, run_method
from ensemble_bo.core.preparation import (
    TASK_OPTIONS,
    TASKS,
    ModelInput,
    assign_folds,
    check_table,
    infer_task,
    make_model_input,
    search_input,
    target_numbers,
    uniform_labels,
    validate_features,
    validate_target,
)
from ensemble_bo.core.refit import (
    bagging_folds,
    conformal_plan,
    ensemble_estimator,
    final_fit_factor,
    search_stack,
)
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.row_capped import large_data_refit
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.settings import did_you_mean
from ensemble_bo.core.zoo import quiet_iteration_caps

DEFAULTS = Path(__file__).resolve().parent / "defaults"

# Parameters that are an argument of the estimators (or their data): `params`
# may not set them too, so that each setting has one place and get_params
# shows it.
SET_ELSEWHERE = {
    "budget": "the argument budget",
    "time_budget": "the argument time_budget",
    "seed": "the argument random_state",
    "data_processing": "the arguments task (the task) and cv (the folds)",
    "dataset": "the data given to fit",
}


def default_parameters() -> dict[str, Any]:
    """The project's parameters as conf/base declares them (interpolations resolved)."""
    return copy.deepcopy(_packaged_parameters())


@functools.cache
def _packaged_parameters() -> dict[str, Any]:
    # Read once a process: the files ship with the package, and reading them
    # took most of a small search's fit.
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
        return dict(loader["parameters"])


def merged(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`defaults` with `overrides` merged in, nested mappings key by key.

    An override key the defaults lack is refused, naming it: a typo would
    otherwise be ignored silently.
    """
    result = dict(defaults)
    for key, value in overrides.items():
        if key not in defaults:
            raise ValueError(
                f"params: unknown parameter {key!r}{did_you_mean([key], defaults)}; "
                f"known here: {sorted(defaults)}"
            )
        if isinstance(value, Mapping) and isinstance(defaults[key], Mapping):
            if key == "models":  # models may be added, not only changed
                result[key] = {**defaults[key], **value}
            else:
                result[key] = merged(defaults[key], value)
        else:
            result[key] = value
    return result


def _refuse_arguments(params: Mapping[str, Any]) -> None:
    """ValueError naming the first key of `params` that an argument sets."""
    for key, place in SET_ELSEWHERE.items():
        if key in params:
            raise ValueError(f"params: {key!r} is set by {place}, not in params")
    for block, values in params.items():
        if isinstance(values, Mapping) and "model" in values:
            raise ValueError(
                f"params: {block}.model is set by the argument model, not in params "
                f"(got {values['model']!r})"
            )


def _is_count(cv: Any) -> bool:
    return isinstance(cv, int | np.integer) and not isinstance(cv, bool)


def _fold_ids(
    cv: Any, X: pd.DataFrame, y: pd.Series, groups: Any, task: str, seed: int
) -> np.ndarray:
    """Fold of each row (n,): k seeded folds for an int, else the splitter's test folds."""
    if _is_count(cv):
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


def _target(y: Any, estimator: str) -> pd.Series:
    """y (n,) as a Series named "target"; a column vector (n, 1) is flattened
    with scikit-learn's DataConversionWarning."""
    if y is None:
        raise ValueError(
            f"{estimator} requires y to be passed, but the target y is None"
        )
    target = y if isinstance(y, pd.Series) else pd.Series(column_or_1d(y, warn=True))
    return target.reset_index(drop=True).rename("target")


_PARAMETERS = """\
    method : str, default="auto"
        A name of `ensemble_bo.METHODS` ("segor", "sego", "esmbo",
        "smbo_posthoc", ...), with a variant where the method takes one
        ("segor:g-h"); "auto": the task's ensemble method (SEGOR for
        regression, SEGO for classification).
    model : str, default="auto"
        The model the search tunes, a name in `parameters_models.yml` (e.g.
        "svr", "decision_tree_classifier", "segor_sklearn"); "auto": the task's
        default (`default_models`).
    budget : int, default=50
        Configurations trained (with a fidelity schedule, full-fidelity
        equivalents, which may be a float).
    time_budget : float or None, default=None
        Wall-time budget of the fit in seconds: whichever of `budget` and
        `time_budget` ends first stops the search; a trial still running at
        the end is cut (a failed trial). The search keeps back the time the
        final model's fit will take, estimated from its members' trials, so
        that the fit ends near the budget's end: `result_.search_seconds` is
        the search's time, `refit_seconds_` the final fit's. None: no limit.
    cv : int or scikit-learn splitter, default=5
        k seeded folds (stratified for classes), or a splitter whose test folds
        partition the rows (KFold, StratifiedKFold, GroupKFold, ...). The
        search picks the ensemble by these folds' out-of-fold predictions.
    params : dict or None, default=None
        Overrides of the project's parameters files (conf/base), nested as
        there: e.g. {"ensemble": {"variant": "g-m"}}, {"segor": {"optimizer":
        {"n_initial": 5}, "time_limit": None}}, {"voting": "soft"},
        {"final_model": "bagged"} (each member the mean of its CV fold models),
        {"stacking": True} (a level-2 model combines the members where CV
        says it beats their weighted mean; `stack_` says what it found),
        {"conformal": False} (no fold models: point predictions only, no
        `predict_interval` or `predict_set`),
        {"parallel": {"backend": "dask", "n_workers": 8}}, {"sego":
        {"optimizer": {"portfolio": False}}} (a Sobol start without the
        space's portfolio, conf/base/parameters_portfolios.yml, nor its
        large-data start, parameters_large_data_portfolios.yml). A key the
        files lack is refused, and so is one that an argument sets (budget,
        time_budget, seed, data_processing, dataset, a block's model).
    random_state : int or None, default=None
        Seed of every random choice (folds, optimizer, models); None draws one,
        kept in `seed_`.
    callbacks : list of callables or None, default=None
        Each is called with every iteration's record (`IterationRecord`) as
        it ends.
"""

_ATTRIBUTES = """\
    ensemble_ : estimator
        The final ensemble refit on all of X (or bagged: each member the mean
        of its fold models, `final_model`; stacked where `stack_` was chosen):
        a scikit-learn Pipeline on the raw feature columns (regression
        predicts in the target's units).
    conformal_ : core.conformal.CrossConformalRegressor or CrossConformalClassifier
        With `conformal` (the default), `ensemble_` with the ensemble fitted
        on each CV fold's complement and its out-of-fold residuals or scores:
        what predict_interval and predict_set use. None without.
    stack_ : core.stacking.Stack or None
        With `stacking`, the level-2 model over the ensemble: its CV loss and
        the plain ensemble's on the same folds, and whether it was chosen;
        None without.
    result_ : EnsembleSearchResult
        The search: its pool (every configuration with its out-of-fold
        predictions), history, ensemble, `search_seconds` and `stopped_by`.
    cv_loss_ : float
        CV loss of the final ensemble (regression: MSE of the standardized
        target, or the method's loss; classification: the method's objective;
        a chosen stack: its own, `stack_.metric`).
    members_ : pandas.DataFrame
        One row per distinct member: pool trial, weight, configuration.
    task_ : str
        "regression" or "classification".
    fold_ids_ : ndarray of shape (n_samples,)
        The CV fold of each row.
    seed_ : int
        The seed used.
    refit_seconds_ : float
        Seconds the refit of the final ensemble on all of X took (bagged:
        its fold models; with `conformal`, the fold ensembles too).
    n_features_in_ : int
        Number of feature columns seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of X, where X was a DataFrame with text column names.
"""

_CLASSES = """\
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted (classification).
"""


class _BaseEnsembleSearch(BaseEstimator, metaclass=ABCMeta):
    """What the ensemble searches share: fit, predict and the fitted attributes.

    Not for direct use: use EnsembleRegressor, EnsembleClassifier or
    EnsembleSearch.
    """

    def __init__(
        self,
        *,
        method: str = "auto",
        model: str = "auto",
        budget: float = 50,
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

    @abstractmethod
    def _task_option(self) -> str:
        """The task to fit: "regression", "classification" or "auto" (the target's)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = True  # every model imputes missing features
        return tags

    def _settings(self, method_spec: str) -> dict[str, Any]:
        method, _ = parse_method(method_spec)
        overrides = dict(self.params or {})
        _refuse_arguments(overrides)
        settings = merged(default_parameters(), overrides)
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

    def _features(self, X: Any, reset: bool) -> pd.DataFrame:
        """X (n_samples, n_features) as a DataFrame with text column names.

        An array must be 2-d and numeric (an array's columns are named "0",
        "1", ...); text columns come in a DataFrame. reset: fit records the
        number and names of the columns, later calls must match them.
        """
        if not isinstance(X, pd.DataFrame):
            X = check_array(X, ensure_all_finite=False)
        validate_data(self, X, skip_check_array=True, reset=reset)
        frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(X)
        return frame.rename(columns=str)

    def fit(self, X: Any, y: Any, groups: Any = None):
        """Search the ensemble on (X, y) and refit it on all of them.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            Features; missing values are imputed, a DataFrame's text columns
            one-hot encoded, or ordinal-coded if they have many values
            (core.encoding).
        y : array-like of shape (n_samples,)
            Target: numbers for regression, class labels for classification.
        groups : array-like of shape (n_samples,), default=None
            Group labels for a group splitter as `cv` (GroupKFold).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        features = self._features(X, reset=True).reset_index(drop=True)
        target = _target(y, type(self).__name__)
        if len(features) != len(target):
            raise ValueError(f"X has {len(features)} rows but y has {len(target)}")
        seed = (
            int(np.random.SeedSequence().generate_state(1)[0])
            if self.random_state is None
            else self.random_state
        )
        check_table(features, "X")
        validate_features(features, "X")
        task = self._task_option()
        if task == "classification":
            check_classification_targets(target)
        # A method that serves one task takes the target as that task where it can.
        tasks = TASKS if self.method == "auto" else parse_method(self.method)[0].tasks
        task = infer_task(target, task, "y", tasks)
        method = TASK_METHODS[task] if self.method == "auto" else self.method
        settings = self._settings(method)
        task = validate_target(target, task, "y")
        if task == "regression" and not is_numeric_dtype(target):
            target = target_numbers(target)  # numbers as text: "79.9"
        if task == "classification":
            target = uniform_labels(target)
        dataset = {
            "name": "X",
            "task": task,
            "target": "target",
            "categorical_columns": categorical_columns(features),
        }
        fold_ids = _fold_ids(self.cv, features, target, groups, task, seed)
        data: ModelInput = replace(
            make_model_input(features, target, dataset, fold_ids),
            given_folds=not _is_count(self.cv),
        )
        searched = search_input(data, settings["max_search_rows"], seed)
        conformal = conformal_plan(
            settings["conformal"],
            data,
            settings["conformal_rows"],
            settings["split_conformal_above"],
        )
        result = run_method(
            method,
            searched,
            settings,
            seed,
            self.callbacks or (),
            final_fit_factor=final_fit_factor(
                settings["final_model"], searched, conformal
            ),
        )
        stack = search_stack(settings["stacking"], result, searched, settings["voting"])
        ensemble = ensemble_estimator(
            result,
            data.encoding,
            settings["voting"],
            seed,
            fold_ids=bagging_folds(settings["final_model"], data),
            stack=stack,
            conformal=conformal,
            large_data=large_data_refit(
                settings["max_search_rows"], target, task == "classification"
            ),
        )
        start = time.perf_counter()
        with quiet_iteration_caps():
            ensemble.fit(features, target)
        self.refit_seconds_ = time.perf_counter() - start
        self.conformal_ = ensemble if settings["conformal"] else None
        self.ensemble_ = ensemble.estimator_ if settings["conformal"] else ensemble
        self.result_: EnsembleSearchResult = result
        self.stack_ = stack
        self.cv_loss_ = (
            stack.cv_loss
            if stack is not None and stack.chosen
            else float(result.history[-1].ensemble_loss)
        )
        self.members_ = pd.DataFrame(
            [
                {"trial": trial, "weight": weight, **result.pool.configs[trial]}
                for trial, weight in result.member_weights.items()
            ]
        )
        self.task_ = task
        self.seed_ = seed
        self.fold_ids_ = fold_ids
        if task == "classification":
            self.classes_ = np.unique(target)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predict with the final ensemble.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The columns seen in fit.

        Returns
        -------
        y : ndarray of shape (n_samples,)
            Predictions in the target's units, or class labels.
        """
        check_is_fitted(self)
        return self.ensemble_.predict(self._features(X, reset=False))

    def leaderboard(self) -> pd.DataFrame:
        """Every trained configuration, best CV loss first (core.explanations).

        Returns
        -------
        leaderboard : DataFrame, one row per trial
            trial, family, status, cv_loss (its own), fit_seconds,
            predict_seconds_per_1000, model_mib (one fold model pickled),
            weight (in the final ensemble) and contribution (how much the
            ensemble's CV loss rises without it; NaN outside the ensemble).
        """
        check_is_fitted(self)
        return leaderboard(self.result_)

    def feature_importance(
        self, X: Any, y: Any, n_repeats: int = PERMUTATION_REPEATS
    ) -> pd.DataFrame:
        """Permutation importance of the final ensemble on (X, y): how much
        its score drops when a column is shuffled (scikit-learn's
        permutation_importance). Pass rows it did not train on.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The columns seen in fit.
        y : array-like of shape (n_samples,)
            Their true targets.
        n_repeats : int, default=5
            Shuffles per column.

        Returns
        -------
        importance : DataFrame, one row per column, most important first
            feature, importance (the mean drop of the score: MSE in the
            target's squared units for regression, accuracy for
            classification) and importance_std.
        """
        check_is_fitted(self)
        return feature_importance(
            self.ensemble_,
            self._features(X, reset=False),
            _target(y, type(self).__name__),
            self.task_,
            self.seed_,
            n_repeats,
        )

    def _conformal(self, method: str):
        """The fitted conformal model; ValueError saying why where there is none."""
        check_is_fitted(self)
        if self.conformal_ is None:
            raise ValueError(
                f"{method} needs the fold models that params={{'conformal': True}} "
                "(the default) fits; this search was fitted with conformal=False"
            )
        return self.conformal_


class _Intervals:
    """`predict_interval` of the searches that regress."""

    def predict_interval(
        self, X: Any, coverage: float = 0.9, adaptive: bool = False
    ) -> np.ndarray:
        """Prediction intervals that hold the true target at `coverage`.

        CV+ (core.conformal): from the ensemble fitted on each CV fold's
        complement and its out-of-fold residuals R_i, the interval of x runs
        from the floor((1 - coverage)(n+1))-th smallest of mu_{-k(i)}(x) - R_i
        to the ceil(coverage (n+1))-th smallest of mu_{-k(i)}(x) + R_i over
        the n training rows. For exchangeable data it covers with probability
        at least about 1 - 2 (1 - coverage) (Barber et al. 2021), and close
        to `coverage` in practice; the run's test split measures it.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The columns seen in fit.
        coverage : float in (0, 1), default=0.9
            The share of true targets the intervals should hold.
        adaptive : bool, default=False
            Normalized CV+: each residual divided by how much the ensemble's
            members disagreed on its row (plus their median disagreement)
            and multiplied back by the new row's, so rows the members
            disagree on get wider intervals and the others narrower ones,
            with the same guarantee.

        Returns
        -------
        intervals : ndarray of shape (n_samples, 2)
            Lower and upper bound of each row, in the target's units.
        """
        model = self._conformal("predict_interval")
        return model.predict_interval(
            self._features(X, reset=False), coverage, adaptive=adaptive
        )


class _ClassProbabilities:
    """`predict_proba` of the searches that classify."""

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities of the final ensemble.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The columns seen in fit.

        Returns
        -------
        probabilities : ndarray of shape (n_samples, n_classes)
            In `classes_` order; each row sums to 1 (under hard voting, the
            members' weighted vote shares).
        """
        check_is_fitted(self)
        return self.ensemble_.predict_proba(self._features(X, reset=False))

    def predict_set(self, X: Any, coverage: float = 0.9) -> np.ndarray:
        """Prediction sets that hold the true class at `coverage`.

        Cross-conformal sets (core.conformal, the CV+ construction for
        classes) with the score 1 - p(class): a class is in the set of x while
        fewer than ceil(coverage (n+1)) training rows have an out-of-fold
        score below the one the fold model that held them out gives x and the
        class. For exchangeable data a set holds the true class with
        probability at least about 1 - 2 (1 - coverage), and close to
        `coverage` in practice. A set may be empty or hold every class.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The columns seen in fit.
        coverage : float in (0, 1), default=0.9
            The share of true classes the sets should hold.

        Returns
        -------
        sets : ndarray of bool, shape (n_samples, n_classes)
            True where the class (columns in `classes_` order) is in the set.
        """
        model = self._conformal("predict_set")
        return model.predict_set(self._features(X, reset=False), coverage)


class EnsembleRegressor(RegressorMixin, _Intervals, _BaseEnsembleSearch):
    __doc__ = f"""Search the regression ensemble that generalizes best.

    The target is taken as numbers (a text or boolean target is refused,
    naming a value) and standardized for the search; predictions are in its
    units. `score` is R^2.

    Parameters
    ----------
{_PARAMETERS}
    Attributes
    ----------
{_ATTRIBUTES}
    See Also
    --------
    EnsembleClassifier : the same for classification.
    EnsembleSearch : chooses its task from `task`, the method or the target.
    """

    def _task_option(self) -> str:
        return "regression"


class EnsembleClassifier(ClassifierMixin, _ClassProbabilities, _BaseEnsembleSearch):
    __doc__ = f"""Search the classification ensemble that generalizes best.

    The target is taken as class labels (a continuous one is refused, as
    scikit-learn's classifiers refuse it). `score` is accuracy.

    Parameters
    ----------
{_PARAMETERS}
    Attributes
    ----------
{_ATTRIBUTES}{_CLASSES}
    See Also
    --------
    EnsembleRegressor : the same for regression.
    EnsembleSearch : chooses its task from `task`, the method or the target.
    """

    def _task_option(self) -> str:
        return "classification"


class EnsembleSearch(_BaseEnsembleSearch):
    __doc__ = f"""Search the ensemble that generalizes best, for the task it chooses.

    The task is `task` where given, else the one task the method serves (a
    regression method takes the target as numbers, a classification method
    whole numbers as classes), else the target's: booleans, text and at most
    20 distinct whole numbers are classes, other numbers regression. Its
    estimator tags say the task once it is known (scikit-learn's
    `is_classifier` and `is_regressor`), and it has `predict_proba` unless
    the task is regression.

    Parameters
    ----------
    task : {{"auto", "regression", "classification"}}, default="auto"
        The task; "auto": the method's, or the target's where the method
        serves both tasks (method "auto" included).
{_PARAMETERS}
    Attributes
    ----------
{_ATTRIBUTES}{_CLASSES}
    See Also
    --------
    EnsembleRegressor, EnsembleClassifier : one task each.
    """

    def __init__(
        self,
        *,
        method: str = "auto",
        task: str = "auto",
        model: str = "auto",
        budget: float = 50,
        time_budget: float | None = None,
        cv: Any = 5,
        params: Mapping[str, Any] | None = None,
        random_state: int | None = None,
        callbacks: list[Callback] | None = None,
    ):
        super().__init__(
            method=method,
            model=model,
            budget=budget,
            time_budget=time_budget,
            cv=cv,
            params=params,
            random_state=random_state,
            callbacks=callbacks,
        )
        self.task = task

    def _task_option(self) -> str:
        if self.task not in TASK_OPTIONS:
            raise ValueError(
                f"task must be one of {list(TASK_OPTIONS)}, got {self.task!r}"
            )
        return self.task

    def _known_task(self) -> str | None:
        """The task as far as it is known: `task`, the one task of the method,
        or the one fit found; None while the target is still to choose it."""
        if self.task in TASKS:
            return self.task
        try:
            tasks = parse_method(self.method)[0].tasks
        except ValueError:  # "auto", or a bad name that fit will refuse
            tasks = TASKS
        if len(tasks) == 1:
            return next(iter(tasks))
        return getattr(self, "task_", None)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        task = self._known_task()
        if task == "classification":
            tags.estimator_type = "classifier"
            tags.classifier_tags = ClassifierTags()
        elif task == "regression":
            tags.estimator_type = "regressor"
            tags.regressor_tags = RegressorTags()
        return tags

    def _may_predict_proba(self) -> bool:
        return self._known_task() != "regression"

    predict_proba = available_if(_may_predict_proba)(_ClassProbabilities.predict_proba)
    predict_set = available_if(_may_predict_proba)(_ClassProbabilities.predict_set)

    def _may_predict_interval(self) -> bool:
        return self._known_task() != "classification"

    predict_interval = available_if(_may_predict_interval)(_Intervals.predict_interval)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Accuracy for classification, R^2 for regression, as scikit-learn scores.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            The columns seen in fit.
        y : array-like of shape (n_samples,)
            True targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the samples.

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        mixin = ClassifierMixin if self.task_ == "classification" else RegressorMixin
        return mixin.score(self, X, y, sample_weight)
