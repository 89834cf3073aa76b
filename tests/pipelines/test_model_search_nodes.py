from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kedro.config import OmegaConfigLoader

from ensemble_bo.core.zoo import model_task
from ensemble_bo.pipelines.model_search.nodes import (
    refit_and_score,
    search_esmbo,
    search_sego,
    search_segor,
    search_single_best,
)

# The project's parameters as Kedro resolves them (methods interpolate segor's optimizer).
CONF = OmegaConfigLoader(
    str(Path(__file__).resolve().parents[2] / "conf"),
    base_env="base",
    default_run_env="base",
)["parameters"]
MODELS, DEFAULTS = CONF["models"], CONF["default_models"]
INFO = {"name": "toy", "task": "regression", "categorical_columns": []}
CLASSES = {"name": "toy", "task": "classification", "categorical_columns": []}
RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3))
Y = X[:, 0] + 0.1 * RNG.normal(size=60)
LABELS = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
FOLDS = np.arange(60) % 5


def fast(method, **optimizer):
    """The conf's method with a short initial design and in-process evaluations."""
    return {
        **CONF[method],
        "optimizer": {**CONF[method]["optimizer"], "n_initial": 3, **optimizer},
        "time_limit": None,
    }


def search(ensemble=None, info=INFO, budget=6, **optimizer):
    return search_segor(
        X,
        Y,
        FOLDS,
        info,
        fast("segor", **optimizer),
        MODELS,
        DEFAULTS,
        {**CONF["ensemble"], **(ensemble or {})},
        budget,
        0,
    )


def test_search_node_builds_a_fixed_size_ensemble_from_the_conf_space():
    assert CONF["ensemble"]["variant"] == "f-m"
    result = search(ensemble={"size": 3})
    assert len(result.pool) == 6 and len(result.members) == 3
    assert result.algorithm == "decision_tree_regressor"
    assert set(result.pool.configs[0]) == {
        "max_depth",
        "max_features",
        "min_samples_split",
        "min_samples_leaf",
    }


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="unknown ensemble size method 'shrinking'"):
        search(ensemble={"variant": "shrinking-m"})


@pytest.mark.parametrize("variant", ["dynamic-huber", "g-t", "d-m"])
def test_sizing_and_loss_variants_run_from_the_conf(variant):
    result = search(ensemble={"variant": variant}, budget=8)
    assert {r.action for r in result.history} <= {"replace", "grow", "shrink"}
    assert result.history[-1].ensemble_size == len(result.members) >= 1


def test_segor_refuses_classification_and_names_sego():
    with pytest.raises(
        ValueError,
        match="'toy' is a classification task and segor builds regression ensembles: "
        "run `kedro run --pipeline=sego`",
    ):
        search(info=CLASSES)


def test_sego_refuses_regression_and_names_segor():
    with pytest.raises(ValueError, match="run `kedro run --pipeline=segor`"):
        search_sego(X, Y, FOLDS, INFO, fast("sego"), MODELS, DEFAULTS, 4, 0)


@pytest.mark.parametrize("mode", ["ml2", "map", "slice"])
def test_gp_hyperparameter_mode_is_a_parameter(mode):
    result = search(ensemble={"size": 3}, hyperparameters=mode)
    # after the 3 initial points the GP chose, so EI values were recorded
    assert all(r.acquisition_value >= 0 for r in result.history[3:])


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="hyperparameters='bayes' is not one of"):
        search(hyperparameters="bayes")


@pytest.mark.parametrize("method", ["smbo", "random_search"])
@pytest.mark.parametrize(("info", "target"), [(INFO, Y), (CLASSES, LABELS)])
def test_single_best_methods_run_from_their_conf_on_both_tasks(method, info, target):
    params = fast(method) if method == "smbo" else {**CONF[method], "time_limit": None}
    assert params["model"] == "auto"
    result = search_single_best(X, target, FOLDS, info, params, MODELS, DEFAULTS, 8, 0)
    assert result.algorithm == DEFAULTS[info["task"]]
    assert len(result.pool) == 8 and result.task == info["task"]
    assert result.members == [int(np.nanargmin(result.single_losses))]
    gp_steps = [r.acquisition_value for r in result.history[3:]]
    if method == "smbo":
        assert all(value >= 0 for value in gp_steps)
    else:  # random search has no acquisition function
        assert all(np.isnan(value) for value in gp_steps)


@pytest.mark.parametrize(("info", "target"), [(INFO, Y), (CLASSES, LABELS)])
def test_esmbo_runs_from_its_conf_on_both_tasks(info, target):
    params = fast("esmbo")
    assert params["n_replicas"] == 10
    result = search_esmbo(X, target, FOLDS, info, params, MODELS, DEFAULTS, 8, 0)
    assert len(result.members) == 10  # one winner per replica
    assert sum(result.member_weights.values()) == pytest.approx(1.0)


def test_sego_runs_from_its_conf_and_scores_an_error_rate():
    params = fast("sego")
    assert params["ensemble_size"] == 12 and params["model"] == "sego_sklearn"
    result = search_sego(
        X,
        LABELS,
        FOLDS,
        CLASSES,
        {**params, "ensemble_size": 3},
        MODELS,
        DEFAULTS,
        8,
        0,
    )
    assert result.task == "classification" and len(result.members) == 3
    names = [f"x{i}" for i in range(3)]
    features = pd.DataFrame(X, columns=names)
    labels = pd.Series(np.array(["low", "mid", "high"])[LABELS])
    model, metrics = refit_and_score(
        result,
        features[:40],
        labels[:40],
        features[40:],
        labels[40:],
        CLASSES,
        {"mean": 0.0, "std": 1.0},
        "hard",
        0,
    )
    predictions = model.predict(features[40:])
    assert set(predictions) <= {"low", "mid", "high"}
    assert metrics["test_error_ensemble"] == pytest.approx(
        np.mean(predictions != labels[40:].to_numpy())
    )
    assert 0.0 <= metrics["test_error_single_best"] <= 1.0


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_model_of_the_conf_runs_through_its_tasks_ensemble_search(model):
    budget = 3
    if model_task(model) == "regression":
        result = search_segor(
            X,
            Y,
            FOLDS,
            INFO,
            {**fast("segor"), "model": model},
            MODELS,
            DEFAULTS,
            {**CONF["ensemble"], "size": 2},
            budget,
            0,
        )
    else:
        params = {**fast("sego"), "model": model, "ensemble_size": 2}
        result = search_sego(
            X, LABELS, FOLDS, CLASSES, params, MODELS, DEFAULTS, budget, 0
        )
    assert all(result.pool.ok), result.pool.errors
    assert set(result.pool.configs[0]) <= set(MODELS[model])


def test_a_model_without_a_search_space_is_named():
    segor = {**fast("segor"), "model": "xgboost"}
    with pytest.raises(
        ValueError, match="model='xgboost' has no search space under `models`"
    ):
        search_segor(X, Y, FOLDS, INFO, segor, MODELS, DEFAULTS, CONF["ensemble"], 3, 0)


def test_a_model_space_of_the_other_task_is_named_with_the_fitting_ones():
    smbo = {**fast("smbo"), "model": "svr"}
    with pytest.raises(
        ValueError,
        match=r"model='svr' is a regression model space but dataset 'toy' is a "
        r"classification task; choose one of \[.*'sego_sklearn'",
    ):
        search_single_best(X, LABELS, FOLDS, CLASSES, smbo, MODELS, DEFAULTS, 3, 0)
