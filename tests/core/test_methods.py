"""The method registry and run_method, on the project's own parameters."""

import math

import numpy as np
import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core import methods
from ensemble_bo.core.losses import objective
from ensemble_bo.core.methods import (
    DEFAULT_METHOD,
    METHODS,
    TASK_METHODS,
    method_settings,
    parse_method,
    run_method,
)
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.selection.stages import bagged_weights, ensemble_cv_loss
from ensemble_bo.core.zoo import model_task
from tests.support import CHEAP_MODEL, cheap_parameters

CONF = default_parameters()
# The searches below: CONF with the decision tree as the regression space (segor's
# and the `auto` methods'), as cheap as a search gets.
CHEAP = cheap_parameters()
RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3))
Y = X[:, 0] + 0.1 * RNG.normal(size=60)
LABELS = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
FOLDS = np.arange(60) % 5
IDENTITY = {"mean": 0.0, "std": 1.0}
REGRESSION = ModelInput(
    X, Y, FOLDS, "regression", IDENTITY, {"name": "toy", "categorical_columns": []}
)
CLASSES = ModelInput(
    X,
    LABELS,
    FOLDS,
    "classification",
    IDENTITY,
    {"name": "toy", "categorical_columns": []},
)


def settings(budget=6, **blocks):
    """The conf's parameters: short initial designs, in-process evaluations, the
    tree for regression."""
    chosen = {**CHEAP, "budget": budget}
    for name in ("segor", "sego", "esmbo", "smbo", "random_search", "ers"):
        block = {**chosen[name], "time_limit": None}
        if block["optimizer"]["kind"] == "gp":
            block["optimizer"] = {**block["optimizer"], "n_initial": 3}
        chosen[name] = block
    for name, change in blocks.items():
        chosen[name] = {**chosen[name], **change}
    return chosen


def test_the_default_spaces_are_every_family_for_each_task():
    # searched end to end by tests/test_run.py (regression) and its sego run
    assert CONF["default_models"] == {
        "regression": "segor_sklearn",
        "classification": "sego_sklearn",
    }
    assert CONF["segor"]["model"] == CONF["default_models"]["regression"]
    assert CONF["sego"]["model"] == CONF["default_models"]["classification"]
    for name in ("smbo", "esmbo", "ers", "random_search"):
        assert CONF[name]["model"] == "auto", name


def test_every_method_reads_blocks_the_conf_declares_and_runs_on_its_tasks():
    assert CHEAP["default_models"]["regression"] == CHEAP_MODEL
    for method in METHODS.values():
        assert set(method.params) <= set(CONF), method.name
        for task in method.tasks:
            data = REGRESSION if task == "regression" else CLASSES
            result = run_method(method.name, data, settings(budget=5), seed=0)
            assert result.task == task and len(result.pool) == 5
            # `auto` (and segor's model) resolved to the task's default_models entry
            assert result.model_name == CHEAP["default_models"][task]
            assert [r.iteration for r in result.history] == list(range(5))
            assert math.isfinite(result.history[-1].ensemble_loss)


def test_segor_builds_a_fixed_size_ensemble_from_the_conf_space():
    assert CONF["ensemble"]["variant"] == "f-m"
    # the slots shipped as they are (a bagged weighting would choose again)
    three_slots = settings(ensemble={"size": 3, "weighting": "counts"})
    result = run_method("segor", REGRESSION, three_slots, 0)
    assert len(result.pool) == 6 and len(result.members) == 3
    assert result.model_name == CHEAP_MODEL
    assert set(result.pool.configs[0]) == set(CONF["models"][CHEAP_MODEL])


def test_a_variant_sets_only_the_ensemble_variant():
    chosen = method_settings("segor:d-h", CONF)
    assert chosen["ensemble"] == {**CONF["ensemble"], "variant": "d-h"}
    assert chosen["segor"] == CONF["segor"]
    assert set(chosen) == set(METHODS["segor"].params)


@pytest.mark.parametrize(
    ("method", "block", "data"),
    [("segor", "ensemble", REGRESSION), ("sego", "sego", CLASSES)],
)
def test_a_bagged_weighting_ships_the_bagged_selection_of_the_search_s_pool(
    method, block, data
):
    counts = run_method(method, data, settings(budget=8), seed=3)
    bagged = run_method(
        method, data, settings(budget=8, **{block: {"weighting": "bagged"}}), seed=3
    )
    # the same search; then the ensemble is chosen again from its whole pool
    assert bagged.pool.configs == counts.pool.configs
    chosen = objective(data.task, bagged.objective)
    expected = bagged_weights(
        bagged.pool,
        chosen,
        data.target,
        data.fold_ids,
        derive_seed(3, methods.BAGGING),
    )
    assert bagged.member_weights == pytest.approx(expected)
    assert sum(bagged.member_weights.values()) == pytest.approx(1.0)
    last = bagged.history[-1]
    assert last.action == "bag" and last.ensemble_size == len(expected)
    assert last.ensemble_loss == pytest.approx(
        ensemble_cv_loss(bagged.pool, chosen, data.target, data.fold_ids, expected)
    )

    # every record before the last is the search's own
    def curve(history):
        return [(r.trial, r.action, r.ensemble_loss) for r in history]

    assert curve(bagged.history[:-1]) == curve(counts.history[:-1])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("segro", r"unknown method 'segro'; known methods: \[.*'segor'"),
        ("smbo:f-m", "'smbo' takes no ':<variant>' suffix"),
        ("segor:", "empty variant"),
        ("segor:shrinking-m", "unknown ensemble size method 'shrinking'"),
        ("segor:f-q", "'q'"),
        ("", "is not a method name"),
    ],
)
def test_bad_method_specs_are_named(spec, message):
    with pytest.raises(ValueError, match=message):
        method_settings(spec, CONF)


def test_a_missing_parameter_block_is_named():
    partial = {name: CONF[name] for name in ("segor", "models", "budget")}
    with pytest.raises(ValueError, match="reads the parameters 'ensemble'"):
        method_settings("segor", partial)


def test_segor_refuses_classification_and_names_the_methods_that_fit():
    with pytest.raises(
        ValueError,
        match=r"'toy' is a classification task and segor builds regression "
        r"ensembles; methods for classification: \[.*'sego'",
    ):
        run_method("segor", CLASSES, settings(), 0)


def test_each_task_s_ensemble_method_serves_that_task_alone():
    assert {task: METHODS[name].tasks for task, name in TASK_METHODS.items()} == {
        "regression": {"regression"},
        "classification": {"classification"},
    }
    assert DEFAULT_METHOD == TASK_METHODS["regression"]


def test_sego_refuses_regression():
    with pytest.raises(ValueError, match=r"methods for regression: \[.*'segor'"):
        run_method("sego", REGRESSION, settings(), 0)


def test_a_model_without_a_search_space_is_named():
    with pytest.raises(
        ValueError,
        match=r"segor.model='xgboost' is not a model of `models` "
        r"\(conf/base/parameters_models.yml\)",
    ):
        run_method("segor", REGRESSION, settings(segor={"model": "xgboost"}), 0)


def test_a_model_space_of_the_other_task_is_named_with_the_fitting_ones():
    with pytest.raises(
        ValueError,
        match=r"smbo.model='svr' is a regression model but the data is a "
        r"classification task; choose one of \[.*'sego_sklearn'",
    ):
        run_method("smbo", CLASSES, settings(smbo={"model": "svr"}), 0)


def test_same_seed_same_ensemble_other_seed_other_pool():
    first = run_method("segor", REGRESSION, settings(), 3)
    second = run_method("segor", REGRESSION, settings(), 3)
    other = run_method("segor", REGRESSION, settings(), 4)
    assert first.members == second.members
    assert first.pool.configs == second.pool.configs
    assert first.pool.configs != other.pool.configs


def test_a_selection_method_ends_its_search_curve_with_the_selected_ensemble():
    heard = []
    search = run_method("smbo", REGRESSION, settings(budget=8), 0)
    selected = run_method(
        "smbo_posthoc", REGRESSION, settings(budget=8), 0, [heard.append]
    )
    # the same search, then the selection: the pools are the same models
    assert selected.pool.configs == search.pool.configs
    assert [r.ensemble_loss for r in selected.history[:-1]] == [
        r.ensemble_loss for r in search.history[:-1]
    ]
    last = selected.history[-1]
    assert last.action == "add" and last.iteration == 7
    assert last.ensemble_loss <= search.history[-1].ensemble_loss
    assert last.ensemble_size == len(selected.members)
    # callbacks heard every iteration, then the last one again with the selection
    assert [r.iteration for r in heard] == [*range(8), 7]
    assert heard[-1] == last


def test_a_failing_selection_keeps_the_search_s_pool(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("selection broke")

    monkeypatch.setattr(methods, "posthoc_selection", broken)
    with pytest.raises(SearchInterrupted, match="selection broke") as stopped:
        run_method("smbo_posthoc", REGRESSION, settings(budget=4), 0)
    assert len(stopped.value.result.pool) == 4


def test_bad_settings_are_refused_before_any_training(monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("a model was trained")

    monkeypatch.setattr(methods, "CrossValidation", no_training)
    bad = settings(budget=4, posthoc={"weighting": "nonsense"})
    with pytest.raises(ValueError, match="posthoc.weighting='nonsense' is not one of"):
        run_method("smbo_posthoc", REGRESSION, bad, 0)
    with pytest.raises(ValueError, match="budget='ten' is not an integer >= 1"):
        run_method("segor", REGRESSION, {**settings(), "budget": "ten"}, 0)
    with pytest.raises(ValueError, match="seed=-1 is not an integer >= 0"):
        run_method("segor", REGRESSION, settings(), -1)


@pytest.mark.parametrize("model", sorted(CONF["models"]))
def test_every_model_space_of_the_conf_runs_through_its_task_s_ensemble_search(model):
    if model_task(model) == "regression":
        chosen = settings(budget=3, segor={"model": model}, ensemble={"size": 2})
        result = run_method("segor", REGRESSION, chosen, 0)
    else:
        chosen = settings(budget=3, sego={"model": model, "ensemble_size": 2})
        result = run_method("sego", CLASSES, chosen, 0)
    assert all(result.pool.ok), result.pool.errors
    assert set(result.pool.configs[0]) <= set(CONF["models"][model])


def test_unknown_gp_mode_is_named():
    chosen = settings(segor={"optimizer": {"kind": "gp", "hyperparameters": "bayes"}})
    with pytest.raises(ValueError, match="hyperparameters='bayes' is not one of"):
        run_method("segor", REGRESSION, chosen, 0)


def test_parse_method_accepts_a_method_record():
    method = METHODS["smbo"]
    assert parse_method(method) == (method, None)
    assert parse_method(" segor:g-m ") == (METHODS["segor"], "g-m")


def test_model_input_checks_its_shapes():
    with pytest.raises(ValueError, match="differ in length: 60, 59, 60"):
        ModelInput(X, Y[:-1], FOLDS, "regression", IDENTITY, {})
    with pytest.raises(ValueError, match="unknown task 'ranking'"):
        ModelInput(X, Y, FOLDS, "ranking", IDENTITY, {})
