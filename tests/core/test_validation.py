"""Parameter checks made before anything is trained (core/validation.py)."""

import copy

import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core.methods import METHODS
from ensemble_bo.core.validation import (
    InvalidInput,
    check_data_processing,
    check_default_models,
    check_model_spaces,
    check_seed,
    check_settings,
)

PARAMETERS = default_parameters()


def changed(path, value, parameters=PARAMETERS):
    """A deep copy of `parameters` with the dotted `path` set to `value`."""
    result = copy.deepcopy(parameters)
    *blocks, key = path.split(".")
    target = result
    for block in blocks:
        target = target[block]
    target[key] = value
    return result


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_shipped_parameters_pass_for_every_method(method):
    check_settings(method, PARAMETERS, seed=0)


@pytest.mark.parametrize(
    ("method", "path", "value", "message"),
    [
        ("segor", "budget", "abc", "budget='abc' is not an integer >= 1"),
        ("segor", "budget", 0, "budget=0 is not an integer >= 1"),
        ("segor", "budget", 2.5, "budget=2.5 is not an integer >= 1"),
        ("segor", "budget", True, "budget=True is not an integer >= 1"),
        (
            "segor",
            "ensemble.variant",
            "zz-q",
            "ensemble.variant: SEGOR variant 'zz-q': unknown ensemble size method "
            "'zz' and unknown regression loss 'q'; a variant is <sizing>-<loss>: "
            "sizing f (fixed, F), g (best-growing, BG) or d (best-dynamic, BD); loss "
            "m (mse), h (huber) or t (tukey)",
        ),
        ("segor", "ensemble.variant", "fm", "'fm' is not <sizing>-<loss>"),
        ("segor", "ensemble.size", 0, "ensemble.size=0 is not an integer >= 1"),
        (
            "segor",
            "segor.model",
            "nosuch",
            "segor.model='nosuch' is not a model of `models` "
            "(conf/base/parameters_models.yml); available: [",
        ),
        (
            "segor",
            "segor.model",
            "svm",
            "segor.model='svm' is a classification model but the data is a "
            "regression task; choose one of ['catboost_regressor', 'decision_tree_regressor',",
        ),
        (
            "segor",
            "segor.optimizer.kind",
            "smac",
            "segor.optimizer={'kind': 'smac',",
        ),
        (
            "segor",
            "segor.optimizer.n_initial",
            0,
            "n_initial must be an integer >= 1, got 0",
        ),
        (
            "segor",
            "segor.optimizer.n_inital",
            5,
            "optimizer options ['n_inital'] are read by no kind",
        ),
        (
            "segor",
            "segor.time_limit",
            -1,
            "segor.time_limit=-1 is not a positive number of seconds or null",
        ),
        ("sego", "sego.loss", "mse", "sego.loss='mse': loss 'mse' does not apply"),
        ("sego", "sego.ensemble_size", -2, "sego.ensemble_size=-2 is not an integer"),
        ("esmbo", "esmbo.n_replicas", 1.5, "esmbo.n_replicas=1.5 is not an integer"),
        ("ers", "ers.posterior", "laplace", "ers.posterior='laplace' is not one of"),
        ("ers", "ers.n_samples", 0, "ers.n_samples=0 is not an integer >= 1"),
        ("smbo", "smbo.loss", "mae", "smbo.loss='mae': unknown regression loss"),
        (
            "smbo_posthoc",
            "posthoc.weighting",
            "equal",
            "posthoc.weighting='equal' is not one of ['counts', 'bfgs', 'bagged']",
        ),
        (
            "smbo_posthoc",
            "posthoc.warm_start",
            -1,
            "posthoc.warm_start=-1 is not an integer >= 0",
        ),
        (
            "smbo",
            "max_initial_failures",
            0,
            "max_initial_failures must be an integer >= 1 or null, got 0",
        ),
        (
            "smbo",
            "default_models.regression",
            "svm",
            "default_models.regression='svm' is a classification model but the "
            "data is a regression task",
        ),
    ],
)
def test_bad_parameters_are_named_with_their_path(method, path, value, message):
    with pytest.raises(InvalidInput) as error:
        check_settings(
            method,
            changed(path, value),
            seed=0,
            task="regression" if method != "sego" else "classification",
        )
    assert message in str(error.value)


def test_the_data_s_task_narrows_the_model_and_loss_checks():
    # huber applies to regression only: fine until the data is classification
    huber = changed("smbo.loss", "huber")
    check_settings("smbo", huber)
    with pytest.raises(InvalidInput, match="loss 'huber' does not apply"):
        check_settings("smbo", huber, task="classification")
    with pytest.raises(
        InvalidInput,
        match="segor.model='svm' is a classification model and segor builds "
        "regression ensembles",
    ):
        check_settings("segor", changed("segor.model", "svm"))
    with pytest.raises(
        InvalidInput,
        match="segor builds regression ensembles and the data is a classification task",
    ):
        check_settings("segor", PARAMETERS, task="classification")


def test_missing_blocks_and_unknown_methods_are_named():
    without = {k: v for k, v in PARAMETERS.items() if k != "ensemble"}
    with pytest.raises(InvalidInput, match=r"reads the parameters \['ensemble'\]"):
        check_settings("segor", without)
    with pytest.raises(InvalidInput, match="unknown method 'segr'"):
        check_settings("segr", PARAMETERS)


@pytest.mark.parametrize("seed", [-1, 1.5, "abc", None, True])
def test_seeds_are_non_negative_integers(seed):
    with pytest.raises(InvalidInput, match=f"seed={seed!r} is not an integer >= 0"):
        check_seed(seed)


# --- models --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("space", "parameter", "spec", "message"),
    [
        (
            "svr",
            "C",
            {"type": "float", "low": 1.0e3, "high": 1.0e-2, "log": True},
            "models.svr.C in conf/base/parameters_models.yml (model 'svr'): "
            "parameter 'C': low=1000.0 is greater than high=0.01; swap them",
        ),
        (
            "elastic_net",
            "alpha",
            {"type": "float", "low": 0.0, "high": 10.0, "log": True},
            "models.elastic_net.alpha in conf/base/parameters_models.yml (model "
            "'elastic_net'): parameter 'alpha': log scale needs low > 0, got low=0.0; "
            "give a positive low or drop `log: true`",
        ),
        (
            "svr",
            "C",
            {"type": "float", "low": "small", "high": 1.0},
            "parameter 'C': low='small' is not a number",
        ),
        (
            "svr",
            "C",
            {"type": "float", "low": 1, "hihg": 2},
            "parameter 'C': unknown keys ['hihg'] for a float",
        ),
        (
            "svr",
            "Cc",
            {"type": "float", "low": 1, "high": 2},
            "models.svr in conf/base/parameters_models.yml (model 'svr'): the "
            "configuration",
        ),
        (
            "decision_tree_regressor",
            "max_depth",
            {"type": "int", "low": 1, "high": 30, "log": "yes"},
            "parameter 'max_depth': log='yes' is not true or false",
        ),
    ],
)
def test_bad_model_spaces_name_the_space_the_parameter_and_the_file(
    space, parameter, spec, message
):
    models = changed(f"{space}.{parameter}", spec, PARAMETERS["models"])
    with pytest.raises(InvalidInput) as error:
        check_model_spaces(models)
    assert message in str(error.value)
    # every space is checked, whichever a run uses
    with pytest.raises(InvalidInput):
        check_settings("sego", {**PARAMETERS, "models": models})


def test_default_models_must_name_a_space_of_their_task():
    with pytest.raises(
        InvalidInput,
        match="default_models.classification='svr' is a regression model",
    ):
        check_default_models(
            {"regression": "svr", "classification": "svr"}, PARAMETERS["models"]
        )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("target", "", "data_processing.target='' is not a column name"),
        ("task", "ranking", "data_processing.task: unknown task 'ranking'"),
        ("test_size", 1.5, "data_processing.test_size must be in (0, 1), got 1.5"),
        ("n_folds", "abc", "data_processing.n_folds must be an integer >= 2"),
        ("n_folds", -3, "data_processing.n_folds must be an integer >= 2, got -3"),
    ],
)
def test_bad_data_processing_options_are_named(key, value, message):
    with pytest.raises(InvalidInput) as error:
        check_data_processing({**PARAMETERS["data_processing"], key: value})
    assert message in str(error.value)
