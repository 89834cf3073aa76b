from pathlib import Path

import numpy as np
import pytest
from kedro.config import OmegaConfigLoader

from ensemble_bo.pipelines.model_search.nodes import (
    search_ensemble,
    search_esmbo,
    search_single_best,
)

# The project's parameters as Kedro resolves them (smbo interpolates segor's space).
CONF = OmegaConfigLoader(
    str(Path(__file__).resolve().parents[2] / "conf"),
    base_env="base",
    default_run_env="base",
)["parameters"]
INFO = {"name": "toy", "task": "regression"}
RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3))
Y = X[:, 0] + 0.1 * RNG.normal(size=60)
FOLDS = np.arange(60) % 5


def search(ensemble=None, info=INFO, budget=6, **optimizer):
    segor = {
        **CONF["segor"],
        "optimizer": {**CONF["segor"]["optimizer"], "n_initial": 3, **optimizer},
    }
    return search_ensemble(
        X,
        Y,
        FOLDS,
        info,
        segor,
        CONF["models"],
        {**CONF["ensemble"], **(ensemble or {})},
        budget,
        0,
    )


def test_search_node_builds_a_fixed_size_ensemble_from_the_conf_space():
    result = search(ensemble={"size": 3})
    assert len(result.pool) == 6 and len(result.members) == 3
    assert set(result.pool.configs[0]) == {
        "max_depth",
        "max_features",
        "min_samples_split",
        "min_samples_leaf",
    }


def test_unknown_size_method_is_named():
    with pytest.raises(ValueError, match="unknown ensemble size method 'shrinking'"):
        search(ensemble={"size_method": "shrinking"})


@pytest.mark.parametrize(("size_method", "loss"), [("dynamic", "huber"), ("g", "t")])
def test_sizing_and_loss_variants_run_from_the_conf(size_method, loss):
    result = search(ensemble={"size_method": size_method, "loss": loss}, budget=8)
    assert {r.action for r in result.history} <= {"replace", "grow", "shrink"}
    assert result.history[-1].ensemble_size == len(result.members) >= 1


def test_classification_data_is_refused():
    with pytest.raises(
        ValueError,
        match="dataset 'toy' is a classification task; the SEGOR pipeline builds regression",
    ):
        search(info={"name": "toy", "task": "classification"})


@pytest.mark.parametrize("mode", ["ml2", "map", "slice"])
def test_gp_hyperparameter_mode_is_a_parameter(mode):
    result = search(ensemble={"size": 3}, hyperparameters=mode)
    # after the 3 initial points the GP chose, so EI values were recorded
    assert all(r.acquisition_value >= 0 for r in result.history[3:])


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="hyperparameters='bayes' is not one of"):
        search(hyperparameters="bayes")


@pytest.mark.parametrize("method", ["smbo", "random_search"])
def test_single_best_methods_run_from_their_conf(method):
    params = CONF[method]
    assert params["model"] == CONF["segor"]["model"]
    if method == "smbo":
        params = {**params, "optimizer": {**params["optimizer"], "n_initial": 3}}
    result = search_single_best(X, Y, FOLDS, INFO, params, CONF["models"], 8, 0)
    assert len(result.pool) == 8
    assert result.members == [int(np.nanargmin(result.single_losses))]
    gp_steps = [r.acquisition_value for r in result.history[3:]]
    if method == "smbo":
        assert all(value >= 0 for value in gp_steps)
    else:  # random search has no acquisition function
        assert all(np.isnan(value) for value in gp_steps)


def test_esmbo_runs_from_its_conf():
    params = {
        **CONF["esmbo"],
        "optimizer": {**CONF["esmbo"]["optimizer"], "n_initial": 3},
    }
    assert params["n_replicas"] == 10
    result = search_esmbo(X, Y, FOLDS, INFO, params, CONF["models"], 8, 0)
    assert len(result.members) == 10  # one winner per replica
    assert sum(result.member_weights.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("model", sorted(CONF["models"]))
def test_every_model_of_the_conf_runs_through_segor(model):
    segor = {
        **CONF["segor"],
        "model": model,
        "optimizer": {**CONF["segor"]["optimizer"], "n_initial": 2},
    }
    result = search_ensemble(
        X, Y, FOLDS, INFO, segor, CONF["models"], {**CONF["ensemble"], "size": 2}, 3, 0
    )
    assert all(result.pool.ok), result.pool.errors
    assert set(result.pool.configs[0]) <= set(CONF["models"][model])


def test_a_model_without_a_search_space_is_named():
    segor = {**CONF["segor"], "model": "xgboost"}
    with pytest.raises(
        ValueError, match="model='xgboost' has no search space under `models`"
    ):
        search_ensemble(
            X, Y, FOLDS, INFO, segor, CONF["models"], CONF["ensemble"], 3, 0
        )
