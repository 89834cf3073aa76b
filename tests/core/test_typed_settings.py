"""Typed settings: every method block parsed once, unknown keys refused by name."""

import re

import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core import methods
from ensemble_bo.core.methods import (
    METHODS,
    check_parameter_names,
    parameter_blocks,
    parameter_names,
    run_method,
)
from ensemble_bo.core.settings import InvalidInput, did_you_mean
from ensemble_bo.core.strategies import EnsembleSettings, SegoSettings
from ensemble_bo.core.validation import check_data_processing, check_settings
from tests.core.test_journal import DATA
from tests.support import cheap_parameters

PARAMETERS = default_parameters()
TASKS = ("regression", "classification")
BLOCKS = parameter_blocks()


def test_the_typed_blocks_are_the_blocks_the_parameter_files_declare():
    # a field the conf lacks, or a conf key no field reads, fails here
    for name, block in BLOCKS.items():
        parsed = block.parse(name, PARAMETERS[name], TASKS)
        assert {key: getattr(parsed, key) for key in PARAMETERS[name]} == dict(
            PARAMETERS[name]
        )
    assert set(PARAMETERS) == set(parameter_names())
    # every block a method reads is typed
    for method in METHODS.values():
        assert set(method.params) <= set(parameter_names()), method.name


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        (
            "segor",
            {"foo": 1},
            "segor has no parameter 'foo'; its parameters are ['display_name', "
            "'model', 'optimizer', 'time_limit', 'fidelity'] "
            "(conf/base/parameters_segor.yml)",
        ),
        (
            "ensemble",
            {"varient": "d-h"},
            "ensemble has no parameter 'varient' (did you mean 'variant'?); its "
            "parameters are ['size', 'variant', 'weighting'] "
            "(conf/base/parameters_segor.yml)",
        ),
        ("sego", {"ensemble_size": 0}, "sego.ensemble_size=0 is not an integer >= 1"),
        ("sego", {"loss": "mse"}, "sego.loss='mse': loss 'mse' does not apply"),
        ("esmbo", {"rho": 1.5}, "esmbo.rho=1.5 is not 'auto' or a number in (0, 1]"),
        ("ers", {"posterior": "gibbs"}, "ers.posterior='gibbs' is not one of"),
        ("posthoc", {"warm_start": -1}, "posthoc.warm_start=-1 is not an integer >= 0"),
        ("smbo", {"time_limit": 0}, "smbo.time_limit=0 is not a positive number"),
        ("ensemble", {"variant": "q-m"}, "unknown ensemble size method 'q'"),
        ("segor", {"display_name": ""}, "segor.display_name='' is not a text"),
        ("segor", {"optimizer": "gp"}, "segor.optimizer must be a mapping"),
        ("segor", {"fidelity": 3}, "segor.fidelity must be a mapping"),
    ],
)
def test_a_bad_block_is_refused_naming_the_key_or_value(name, changes, message):
    block = {**PARAMETERS[name], **changes}
    with pytest.raises(InvalidInput, match=re.escape(message)):
        BLOCKS[name].parse(
            name, block, ("classification",) if name == "sego" else TASKS
        )


def test_a_missing_key_names_the_parameters_file():
    block = {key: value for key, value in PARAMETERS["sego"].items() if key != "loss"}
    with pytest.raises(
        InvalidInput,
        match=re.escape(
            "sego lacks the parameters ['loss']; see conf/base/parameters_sego.yml"
        ),
    ):
        SegoSettings.parse("sego", block, TASKS)


def test_a_parsed_block_is_typed_and_frozen():
    ensemble = EnsembleSettings.parse("ensemble", PARAMETERS["ensemble"], TASKS)
    assert (ensemble.size, ensemble.variant, ensemble.weighting) == (
        12,
        "f-m",
        "bagged",
    )
    with pytest.raises(AttributeError):
        ensemble.size = 3


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {**PARAMETERS, "time_budjet": 10},
            "unknown parameter 'time_budjet' (did you mean 'time_budget'?); the "
            "parameters are ['benchmark', 'budget', ",
        ),
        (
            {**PARAMETERS, "segor": {**PARAMETERS["segor"], "foo": 1}},
            "segor has no parameter 'foo'",
        ),
    ],
)
def test_a_misspelled_parameter_is_refused_not_ignored(parameters, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        check_parameter_names(parameters)
    check_parameter_names(PARAMETERS)  # the shipped parameters pass


def test_check_settings_returns_what_the_method_reads_typed():
    settings = check_settings("segor", cheap_parameters(), 0, "regression")
    assert set(settings.blocks) == {"segor", "ensemble"}
    assert settings.blocks["ensemble"].variant == "f-m"
    assert settings.budget == cheap_parameters()["budget"]
    assert settings.parallel.serial and settings.time_budget is None


def test_run_method_refuses_an_unknown_key_before_training(monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("a model was trained")

    monkeypatch.setattr(methods, "CrossValidation", no_training)
    parameters = cheap_parameters()
    parameters["segor"] = {**parameters["segor"], "foo": 1}
    with pytest.raises(InvalidInput, match="segor has no parameter 'foo'"):
        run_method("segor", DATA, parameters, 0)


def test_a_misspelled_data_processing_key_is_refused():
    options = {**PARAMETERS["data_processing"], "tsk": "regression"}
    with pytest.raises(
        InvalidInput,
        match=re.escape(
            "data_processing has no parameter 'tsk' (did you mean 'task'?); its "
            "parameters are ['target', 'task', 'test_size', 'n_folds']"
        ),
    ):
        check_data_processing(options)


@pytest.mark.parametrize(
    ("given", "known", "hint"),
    [
        (["time_budjet"], ["time_budget", "budget"], " (did you mean 'time_budget'?)"),
        (["foo"], ["display_name", "model"], ""),
        (
            ["ensembel"],
            ["ensemble", "esmbo", "segor"],
            " (did you mean 'ensemble' or 'esmbo'?)",
        ),
    ],
)
def test_an_unknown_name_comes_with_its_close_matches(given, known, hint):
    assert did_you_mean(given, known) == hint
