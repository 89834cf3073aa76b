"""Learning algorithms the strategies can tune, by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sklearn.base import BaseEstimator
from sklearn.tree import DecisionTreeRegressor

# Each factory takes (hyperparameters, random_state) and returns an unfitted estimator.
MODEL_FACTORIES: dict[str, Callable[[dict[str, Any], int], BaseEstimator]] = {
    "decision_tree_regressor": lambda params, seed: DecisionTreeRegressor(
        random_state=seed, **params
    ),
}


def make_model(
    algorithm: str, params: dict[str, Any], random_state: int
) -> BaseEstimator:
    """An unfitted estimator of `algorithm` with hyperparameters `params`."""
    try:
        factory = MODEL_FACTORIES[algorithm]
    except KeyError:
        raise ValueError(
            f"unknown algorithm {algorithm!r}; available: {sorted(MODEL_FACTORIES)}"
        ) from None
    return factory(params, random_state)
