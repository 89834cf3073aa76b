"""The final ensemble as scikit-learn estimators on raw features.

Regression uses scikit-learn's `VotingRegressor`: the weighted mean of the
members (SEGOR s.3) is exactly its job (`WeightedMeanRegressor`, which only
stores its fitted members once). Classification uses `WeightedVoteClassifier`,
a weighted plurality vote (SEGO) or a weighted mean of member probabilities,
because its votes must tie where `VotingClassifier`'s do not (see its docstring).
Both fit every member on all of the data they are given: the weights come from
the search, not from the fit. A stacked ensemble (core.stacking) replaces the
weights with a level-2 model fitted on the members' out-of-fold predictions:
`StackedRegressor` and `StackedClassifier`. `build_ensemble_model` wraps any of
them with the feature encoder (core.encoding), so the result fits on raw
feature frames.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import VotingRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import LabelEncoder, StandardScaler
from sklearn.utils import Bunch, get_tags
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import (
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.losses import vote_winners
from ensemble_bo.core.preparation import TASKS
from ensemble_bo.core.stacking import stack_features

VOTING = ("hard", "soft")


def _checked_weights(weights: Sequence[float], n_members: int) -> np.ndarray:
    """`weights` as floats, shape (n_members,); ValueError unless usable.

    Usable: one per member, each finite and non-negative, not all zero.
    """
    weights = list(weights)
    if len(weights) != n_members:
        raise ValueError(
            f"need one weight per estimator, got {n_members} estimators and "
            f"{len(weights)} weights {weights!r}"
        )
    for weight in weights:
        if (
            not isinstance(weight, numbers.Real)
            or not np.isfinite(weight)
            or weight < 0
        ):
            raise ValueError(
                f"weights must be finite and non-negative, got {weight!r} in {weights!r}"
            )
    if not any(weight > 0 for weight in weights):
        raise ValueError(f"weights must not all be zero, got {weights!r}")
    return np.asarray(weights, dtype=float)


class WeightedVoteClassifier(ClassifierMixin, BaseEstimator):
    """Weighted vote, or weighted mean probability, of several classifiers.

    Unlike VotingClassifier, a hard vote whose class totals are equal up to float
    rounding is a tie, which goes to the lowest class index as in the integer-count
    vote that greedy selection chose the ensemble by: with count/size weights
    0.1 + 0.2 for class 1 against 0.3 for class 0, class 0 wins here, whereas
    VotingClassifier's float sums (0.30000000000000004 > 0.3) elect class 1. Also,
    `predict_proba` gives vote shares under hard voting and, under soft voting,
    aligns members that saw fewer classes; VotingClassifier raises in both cases.

    Parameters
    ----------
    estimators : list of (str, estimator)
        Named members, as in VotingClassifier. `get_params`/`set_params` reach a
        member as `name` and its parameters as `name__param`.
    weights : sequence of float of shape (n_estimators,), default=None
        Non-negative weight of each member, not all zero; None weighs all equally.
        Normalized to sum to 1, so only their ratios matter.
    voting : {"hard", "soft"}, default="hard"
        "hard": each member casts its weight for the class it predicts and the
        class with the largest total wins (weighted plurality vote, as in SEGO).
        Ties, up to a relative 1e-9, go to the lowest index in `classes_`.
        "soft": the class with the largest weighted mean of the members'
        `predict_proba` wins, ties again to the lowest index; a member without
        `predict_proba` (an SVC without Platt scaling) contributes the one-hot
        of its prediction, as it does to the search's out-of-fold probabilities.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Sorted class labels seen at fit; predictions are drawn from these.
    estimators_ : list of estimator, length n_estimators
        Fitted clones of the members, fitted on labels encoded as 0..n_classes-1.
    weights_ : ndarray of shape (n_estimators,)
        Normalized weights (sum 1).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X had string column names at fit.
    """

    def __init__(self, estimators, *, weights=None, voting="hard"):
        self.estimators = estimators
        self.weights = weights
        self.voting = voting

    # --- parameters: `name` and `name__param` reach the members ------------------

    def get_params(self, deep=True):
        """Ensemble parameters; if `deep`, also each member (`name`) and its `name__param`."""
        params = super().get_params(deep=False)
        if not deep:
            return params
        for name, member in self._named_members():
            params[name] = member
            if hasattr(member, "get_params") and not isinstance(member, type):
                for key, value in member.get_params(deep=True).items():
                    params[f"{name}__{key}"] = value
        return params

    def set_params(self, **params):
        """Set ensemble parameters, whole members (`name=est`) or member parameters.

        `estimators` is set first, then whole members, then everything else, so
        `name__param` applies to the member that the same call put in place.
        """
        if "estimators" in params:
            self.estimators = params.pop("estimators")
        names = [name for name, _ in self._named_members()]
        replaced = {key: params.pop(key) for key in list(params) if key in names}
        if replaced:
            self.estimators = [
                (name, replaced.get(name, member))
                for name, member in self._named_members()
            ]
        # BaseEstimator routes `name__param` to the member that get_params names.
        super().set_params(**params)
        return self

    def _named_members(self) -> list[tuple[str, object]]:
        """The (name, member) pairs of `estimators`; [] while it is malformed.

        Malformed `estimators` are reported by fit; parameter access and tags
        must not fail first.
        """
        estimators = self.estimators
        if not isinstance(estimators, Sequence) or isinstance(estimators, str):
            return []
        pairs = [
            tuple(pair)
            for pair in estimators
            if isinstance(pair, tuple | list) and len(pair) == 2
        ]
        return pairs if len(pairs) == len(estimators) else []

    # --- fit and predict -----------------------------------------------------------

    def fit(self, X, y):
        """Fit a clone of every member on all of X (n_samples, n_features), y (n_samples,)."""
        if self.voting not in VOTING:
            raise ValueError(f"voting must be one of {VOTING}, got {self.voting!r}")
        _, members = self._validated_members()
        weights = (
            np.ones(len(members))
            if self.weights is None
            else _checked_weights(self.weights, len(members))
        )
        X = self._validate_X(X, reset=True)
        y = column_or_1d(y, warn=True)
        target_type = type_of_target(y, input_name="y")
        if target_type not in ("binary", "multiclass"):
            raise ValueError(
                f"Unknown label type: {target_type}; {type(self).__name__} needs "
                f"binary or multiclass labels"
            )
        # Members see labels 0..n_classes-1, so their votes index classes_ directly.
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        y_codes = encoder.transform(y)
        # Members are fitted clones, so the `estimators` parameter stays unfitted
        # (sklearn convention) and refitting never reuses state.
        self.estimators_ = [clone(member).fit(X, y_codes) for member in members]
        self.weights_ = weights / weights.sum()
        return self

    def predict_proba(self, X):
        """Class scores, shape (n_samples, n_classes), columns in `classes_` order.

        Soft voting: the weighted mean of the members' probabilities.
        Hard voting: the weighted share of the vote each class got. These are
        vote fractions, not calibrated probabilities.
        Each row sums to 1.
        """
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        scores = self._class_scores(X)
        # Weights summing to 1 in exact arithmetic can sum to 1 + a few ulps,
        # which scikit-learn's probability metrics refuse; a share of its own
        # row's float sum never exceeds 1.
        return scores / scores.sum(axis=1, keepdims=True)

    def predict(self, X):
        """Winning class label of every row, shape (n_samples,), from `classes_`."""
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        return self.classes_[vote_winners(self._class_scores(X))]

    def _class_scores(self, X) -> np.ndarray:
        # Summed member by member in `estimators` order: (n_samples, n_classes).
        return sum(
            weight * self._member_scores(member, X)
            for member, weight in zip(self.estimators_, self.weights_)
        )

    def _member_scores(self, member, X) -> np.ndarray:
        """One member's votes (one-hot) or probabilities, shape (n_samples, n_classes)."""
        n_classes = len(self.classes_)
        if self.voting == "hard" or not hasattr(member, "predict_proba"):
            votes = np.asarray(member.predict(X)).astype(int).ravel()
            return np.eye(n_classes)[votes]
        return self._aligned_proba(member, X, n_classes)

    @staticmethod
    def _aligned_proba(member, X, n_classes: int) -> np.ndarray:
        """The member's probabilities in `classes_` columns, shape (n_samples, n_classes).

        A member that saw only some classes has fewer columns; its own `classes_`
        (encoded labels) says where each belongs, the rest stay 0.
        """
        proba = np.asarray(member.predict_proba(X), dtype=float)
        member_classes = getattr(member, "classes_", None)
        if member_classes is None:
            if proba.shape[1] != n_classes:
                raise ValueError(
                    f"{type(member).__name__} has no classes_ and returned "
                    f"{proba.shape[1]} probability columns for {n_classes} classes"
                )
            return proba
        aligned = np.zeros((proba.shape[0], n_classes))
        aligned[:, np.asarray(member_classes, dtype=int)] = proba
        return aligned

    # --- validation ----------------------------------------------------------------

    def _validated_members(self) -> tuple[list[str], list[BaseEstimator]]:
        """Member names and unfitted members, in `estimators` order."""
        estimators = self.estimators
        if (
            not isinstance(estimators, Sequence)
            or isinstance(estimators, str)
            or len(estimators) == 0
        ):
            raise ValueError(
                f"estimators must be a non-empty list of (name, estimator) pairs, "
                f"got {estimators!r}"
            )
        names, members = [], []
        for pair in estimators:
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise ValueError(
                    f"each entry of estimators must be a (name, estimator) pair, got {pair!r}"
                )
            name, member = pair
            if not isinstance(name, str):
                raise ValueError(f"estimator names must be strings, got {name!r}")
            if isinstance(member, type) or not (
                hasattr(member, "fit") and hasattr(member, "predict")
            ):
                raise ValueError(
                    f"estimator {name!r} must be an estimator instance with fit and "
                    f"predict, got {member!r}"
                )
            names.append(name)
            members.append(member)
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(
                f"estimator names must be unique, got duplicates {duplicates}"
            )
        # Such names would make `name__param` in get_params/set_params ambiguous.
        own = super().get_params(deep=False)
        clashing = [name for name in names if "__" in name or name in own]
        if clashing:
            raise ValueError(
                f"estimator names must not contain '__' or equal a parameter name, "
                f"got {clashing}"
            )
        return names, members

    def _validate_X(self, X, *, reset: bool):
        # Members validate X themselves (they may take frames, sparse input or NaN);
        # here only the shape, feature count and names are recorded or checked.
        shape = getattr(X, "shape", None)
        # dtype=object: only the nesting depth matters, not whether values convert.
        ndim = len(shape) if shape is not None else np.asarray(X, dtype=object).ndim
        if ndim != 2:
            raise ValueError(
                f"Expected a 2D array of shape (n_samples, n_features), got "
                f"{ndim}D input instead. Reshape your data, e.g. with "
                f"array.reshape(-1, 1) for a single feature."
            )
        return validate_data(self, X, reset=reset, skip_check_array=True)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        members = [
            member
            for _, member in self._named_members()
            if hasattr(member, "__sklearn_tags__") and not isinstance(member, type)
        ]
        # The ensemble takes what every member takes, since X is passed on unchanged.
        if members:
            tags.input_tags.allow_nan = all(
                get_tags(member).input_tags.allow_nan for member in members
            )
            tags.input_tags.sparse = all(
                get_tags(member).input_tags.sparse for member in members
            )
        return tags


class _MembersStoredOnce:
    """For VotingRegressor: its fitted members are kept twice over, as
    `estimators_` and by name in `named_estimators_`. pickle stores a shared
    object once, skops (the MLflow model's format) each time it meets it,
    which doubled a forest ensemble's model file (784 MB of arrays for 374 MB
    pickled) and the memory of MLflow's check that loads it back. The names
    are left out of the state and rebuilt on load, as fit builds them."""

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("named_estimators_", None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if "estimators_" in state:
            fitted = iter(self.estimators_)
            self.named_estimators_ = Bunch(
                **{
                    name: member if member == "drop" else next(fitted)
                    for name, member in self.estimators
                }
            )


class WeightedMeanRegressor(_MembersStoredOnce, VotingRegressor):
    """scikit-learn's VotingRegressor (the weighted mean of its members),
    whose fitted members a skops file holds once (_MembersStoredOnce)."""


class StackedRegressor(_MembersStoredOnce, VotingRegressor):
    """Members combined by a fitted level-2 regressor on their predictions.

    Parameters
    ----------
    estimators : list of (str, estimator)
        Named members, as in VotingRegressor; fit fits a clone of each on all rows.
    combiner : fitted estimator
        Maps the members' predictions, (n_samples, n_estimators) in `estimators`
        order, to the ensemble's prediction; fitted on their out-of-fold
        predictions (core.stacking) and frozen, so fit leaves it as it is.
    """

    # The combiner, not weights, combines the members.
    weights = None

    def __init__(self, estimators, *, combiner, n_jobs=None, verbose=False):
        super().__init__(estimators, n_jobs=n_jobs, verbose=verbose)
        self.combiner = combiner

    def predict(self, X):
        """The combiner's prediction from the members', shape (n_samples,)."""
        check_is_fitted(self)
        return self.combiner.predict(stack_features(self.transform(X).T))


class StackedClassifier(WeightedVoteClassifier):
    """Members combined by a fitted level-2 classifier on their probabilities.

    Parameters
    ----------
    estimators : list of (str, estimator)
        Named members, as in WeightedVoteClassifier (one without predict_proba
        contributes the one-hot of its prediction).
    combiner : fitted classifier
        Maps the members' log-probabilities (core.stacking.stack_features of
        their (n_estimators, n_samples, n_classes) probabilities) to class
        probabilities over the class codes 0..n_classes-1; fitted on their
        out-of-fold probabilities and frozen, so fit leaves it as it is.
    """

    # The combiner, not a vote, combines the members' probabilities.
    weights = None
    voting = "soft"

    def __init__(self, estimators, *, combiner):
        self.estimators = estimators
        self.combiner = combiner

    def _class_scores(self, X) -> np.ndarray:
        n_classes = len(self.classes_)
        scores = np.stack([self._member_scores(m, X) for m in self.estimators_])
        proba = np.asarray(self.combiner.predict_proba(stack_features(scores)))
        aligned = np.zeros((proba.shape[0], n_classes))
        aligned[:, np.asarray(self.combiner.classes_, dtype=int)] = proba
        return aligned


def build_ensemble_model(
    task: str,
    members: Sequence[BaseEstimator],
    weights: Sequence[float],
    encoding: FeatureEncoding,
    voting: str = "hard",
    combiner: BaseEstimator | None = None,
) -> Pipeline | TransformedTargetRegressor:
    """Unfitted model on raw feature frames: `encoding`'s encoder, then the ensemble.

    `members` are unfitted estimators, named member_0, member_1, ... (tune one
    with `set_params(ensemble__member_0__...)`, or `regressor__ensemble__...` for
    regression), with one weight each: finite, non-negative, not all zero.
    Regression: a `VotingRegressor`; the target is standardized on fit
    (population std, as in data processing) and predictions come back in the
    target's own units.
    Classification: a `WeightedVoteClassifier`; `voting` is "hard" (SEGO) or "soft".
    `voting` is ignored for regression. `combiner`: a fitted level-2 model
    (core.stacking.Stack.combiner) that replaces weights and voting: a
    `StackedRegressor` or `StackedClassifier`.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {list(TASKS)}")
    if len(members) != len(weights):
        raise ValueError(
            f"need one weight per member, got {len(members)} members and "
            f"{len(weights)} weights"
        )
    # VotingRegressor would take negative weights and fail on all-zero ones only
    # at predict; checked here for both tasks so a bad search result fails now.
    _checked_weights(weights, len(members))
    named = [(f"member_{i}", member) for i, member in enumerate(members)]
    if combiner is not None:
        stacked = StackedClassifier if task == "classification" else StackedRegressor
        ensemble = stacked(named, combiner=combiner)
    elif task == "classification":
        ensemble = WeightedVoteClassifier(named, weights=list(weights), voting=voting)
    else:
        ensemble = WeightedMeanRegressor(named, weights=list(weights))
    model = Pipeline([("encode", encoding.encoder()), ("ensemble", ensemble)])
    if task == "classification":
        return model
    return TransformedTargetRegressor(regressor=model, transformer=StandardScaler())


def member_spread(model: TransformedTargetRegressor, X) -> np.ndarray:
    """How much a fitted regression ensemble's members disagree on each row:
    the weighted standard deviation of their predictions around the
    ensemble's weighted mean, in the target's units, shape (n_samples,).
    0 for a one-member ensemble; for a stacked one, the plain standard
    deviation of its members."""
    pipeline = model.regressor_
    ensemble = pipeline.named_steps["ensemble"]
    predictions = ensemble.transform(pipeline[:-1].transform(X))  # standardized
    weights = np.ones(predictions.shape[1])
    if getattr(ensemble, "weights", None) is not None:
        weights = np.asarray(ensemble.weights, dtype=float)
    weights = weights / weights.sum()
    centre = predictions @ weights
    variance = np.square(predictions - centre[:, None]) @ weights
    return np.sqrt(variance) * float(np.ravel(model.transformer_.scale_)[0])
