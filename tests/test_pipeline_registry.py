"""Pipelines come from the method registry: each is wired, and a new method needs one entry."""

from pathlib import Path

import numpy as np
import pytest
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from ensemble_bo.api import default_parameters
from ensemble_bo.core import methods
from ensemble_bo.core.grid import expand_grid, parameter_blocks, parse_settings
from ensemble_bo.core.methods import METHODS, Method, SearchParts, run_method
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.strategies import SingleBest, SingleBestSettings, Strategy
from ensemble_bo.pipeline_registry import register_pipelines
from tests.support import cheap_parameters

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def context():
    bootstrap_project(PROJECT)
    with KedroSession.create(project_path=PROJECT) as session:
        yield session.load_context()


@pytest.fixture(scope="module")
def catalog(context):
    # Built once: each read of context.catalog builds a new one, a MemoryDataset
    # for every one of the ~1,450 parameters (about a second each time).
    return context.catalog


def test_every_method_and_saved_pool_selection_is_a_pipeline():
    pipelines = register_pipelines()
    assert set(pipelines) == {
        *METHODS,
        *(selection.name for selection in methods.SAVED_POOL_SELECTIONS),
        "benchmark",
        "data_processing",
        "__default__",
    }
    assert pipelines["__default__"] is pipelines["segor"]


@pytest.mark.parametrize("name", sorted({*METHODS, "posthoc", "benchmark"}))
def test_every_free_input_is_a_parameter_or_a_catalog_dataset(context, catalog, name):
    pipeline = register_pipelines()[name]
    for dataset in pipeline.inputs():
        if dataset.startswith("params:"):
            assert dataset.removeprefix("params:").split(".")[0] in context.params, (
                dataset
            )
        else:
            # a dataset the catalog names that reads from somewhere: a free input
            # left to memory would be empty when the pipeline reads it
            assert dataset in catalog, dataset
            assert type(catalog.get(dataset)).__name__ != "MemoryDataset", dataset
    # every method's outputs resolve through the dataset factories (files, not memory)
    for output in pipeline.outputs():
        assert type(catalog.get(output)).__name__ != "MemoryDataset", output


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_s_pipeline_searches_with_its_own_blocks(name):
    method = METHODS[name]
    (search,) = [
        n for n in register_pipelines()[name].nodes if n.name == f"{name}_search"
    ]
    assert search.func.__name__ == f"search_{name}"
    assert set(search.inputs) == {
        "search_input",
        "model_input",  # all training rows: what the final model fits
        "params:seed",
        "params:resume",
        "search_journals",
        *(f"params:{block}" for block in method.params),
        # the final model a time budget keeps time for, as the refit node's
        "params:final_model",
        "params:conformal",
        "params:conformal_rows",
        "params:split_conformal_above",
    }
    assert search.outputs == [f"{name}_search_result"]


def _best_of_random(parts: SearchParts) -> Strategy:
    """A toy method: the random search's pool, its best model."""
    return SingleBest(
        parts.data.target, parts.data.fold_ids, loss="auto", task=parts.data.task
    )


TOY = Method(
    "toy_best_of_random",
    "a toy method for this test",
    frozenset({"regression"}),
    "random_search",  # reads parameters_random_search.yml
    SingleBestSettings,
    _best_of_random,
)


def test_a_registered_method_becomes_a_pipeline_a_benchmark_method_and_runs(
    monkeypatch,
):
    monkeypatch.setitem(METHODS, TOY.name, TOY)
    pipelines = register_pipelines()
    assert TOY.name in pipelines
    names = {node.name for node in pipelines[TOY.name].nodes}
    assert {
        f"{TOY.name}_search",
        f"{TOY.name}_refit_and_score",
        f"{TOY.name}_report",
    } <= names
    assert "random_search" in parameter_blocks()

    parameters = default_parameters()
    settings = parse_settings(
        {
            **parameters["benchmark"],
            "datasets": ["concrete", "pima"],
            "methods": [TOY.name],
        }
    )
    cells = expand_grid(
        settings,
        {"concrete": "regression", "pima": "classification"},
        {"concrete": "0" * 64, "pima": "1" * 64},
        parameters["data_processing"],
        parameters,
        {"concrete": 1030, "pima": 768},
    )
    # a regression-only method: cells for the regression dataset alone
    assert {cell.dataset for cell in cells} == {"concrete"}
    assert {cell.method for cell in cells} == {TOY.name}

    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 2))
    data = ModelInput(
        features,
        features[:, 0],
        np.arange(40) % 4,
        "regression",
        {"mean": 0.0, "std": 1.0},
        {"name": "toy", "categorical_columns": []},
    )
    toy_parameters = {
        **cheap_parameters(),  # random_search's model is auto: the cheap tree
        "budget": 4,
        "random_search": {**parameters["random_search"], "time_limit": None},
    }
    result = run_method(TOY.name, data, toy_parameters, seed=0)
    assert result.members == [int(np.nanargmin(result.single_losses))]
