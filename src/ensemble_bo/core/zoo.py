"""Learning algorithms the strategies can tune, by name.

Each factory maps a configuration of the algorithm's search space (the
`models` block of conf/base/parameters_models.yml, from the papers' spaces)
to an unfitted scikit-learn estimator. Algorithms that are sensitive to the
scale of their inputs get a StandardScaler in front, fitted inside each fold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sklearn.base import BaseEstimator
from sklearn.ensemble import (
    ExtraTreesRegressor,
    GradientBoostingRegressor,
    RandomForestRegressor,
)
from sklearn.linear_model import ElasticNet
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR
from sklearn.tree import DecisionTreeRegressor

# Trees per forest and boosting stages: fixed at 100 in ESMBO s.6.1.
N_TREES = 100


def _decision_tree(params: dict[str, Any], seed: int) -> BaseEstimator:
    return DecisionTreeRegressor(random_state=seed, **params)


def _mlp(params: dict[str, Any], seed: int) -> BaseEstimator:
    # SEGOR s.4: learning rate, activation and up to two hidden layers.
    layers = [params["units_1"]] + (
        [params["units_2"]] if params["n_hidden_layers"] == 2 else []
    )
    return make_pipeline(
        StandardScaler(),
        MLPRegressor(
            hidden_layer_sizes=tuple(layers),
            activation=params["activation"],
            learning_rate_init=params["learning_rate_init"],
            max_iter=500,
            random_state=seed,
        ),
    )


def _elastic_net(params: dict[str, Any], seed: int) -> BaseEstimator:
    return make_pipeline(StandardScaler(), ElasticNet(random_state=seed, **params))


def _svr(params: dict[str, Any], seed: int) -> BaseEstimator:
    # ESMBO s.6.1: RBF kernel; C, gamma and the epsilon tube.
    return make_pipeline(StandardScaler(), SVR(kernel="rbf", **params))


def _random_forest(params: dict[str, Any], seed: int) -> BaseEstimator:
    # ESMBO s.6.1: Breiman's forest or extremely randomized trees, bootstrap or not.
    forest = (
        ExtraTreesRegressor
        if params["method"] == "extra_trees"
        else RandomForestRegressor
    )
    return forest(
        n_estimators=N_TREES,
        bootstrap=params["bootstrap"],
        max_features=params["max_features"],
        random_state=seed,
    )


def _gradient_boosting(params: dict[str, Any], seed: int) -> BaseEstimator:
    # ESMBO s.6.1 mixes least squares and least absolute deviation; scikit-learn
    # has no convex mix, so the loss is a choice among squared, absolute and
    # Huber (which is that mix at the quantile alpha).
    return GradientBoostingRegressor(n_estimators=N_TREES, random_state=seed, **params)


MODEL_FACTORIES: dict[str, Callable[[dict[str, Any], int], BaseEstimator]] = {
    "decision_tree_regressor": _decision_tree,
    "mlp_regressor": _mlp,
    "elastic_net": _elastic_net,
    "svr": _svr,
    "random_forest_regressor": _random_forest,
    "gradient_boosting_regressor": _gradient_boosting,
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
