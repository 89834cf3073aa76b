"""Every registered pipeline is wired: each input is produced, a parameter, or in the catalog."""

from pathlib import Path

import pytest
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from ensemble_bo.pipeline_registry import register_pipelines

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def context():
    bootstrap_project(PROJECT)
    with KedroSession.create(project_path=PROJECT) as session:
        yield session.load_context()


def test_the_documented_pipelines_are_registered():
    assert {
        "segor",
        "sego",
        "esmbo",
        "ers",
        "smbo",
        "random_search",
        "posthoc",
        "benchmark",
        "data_processing",
    } <= set(register_pipelines())


@pytest.mark.parametrize(
    "name",
    ["segor", "sego", "esmbo", "ers", "smbo", "random_search", "posthoc", "benchmark"],
)
def test_every_free_input_is_a_parameter_or_a_catalog_dataset(context, name):
    pipeline = register_pipelines()[name]
    for dataset in pipeline.inputs():
        if dataset.startswith("params:"):
            assert dataset.removeprefix("params:").split(".")[0] in context.params, (
                dataset
            )
        else:
            assert context.catalog.exists(dataset) is not None, dataset
    # every method's outputs resolve through the dataset factories (files, not memory)
    for output in pipeline.outputs():
        assert type(context.catalog.get(output)).__name__ != "MemoryDataset", output


@pytest.mark.parametrize(
    ("name", "searches"),
    [
        ("segor", {"search_segor"}),
        ("sego", {"search_sego"}),
        ("esmbo", {"search_esmbo"}),
        ("smbo", {"search_single_best"}),
        ("random_search", {"search_single_best"}),
        ("posthoc", {"select_posthoc"}),
        ("ers", {"search_single_best", "select_agnostic_bayes"}),
    ],
)
def test_each_method_runs_its_own_search(name, searches):
    nodes = register_pipelines()[name].nodes
    found = {n.func.__name__ for n in nodes if n.name.endswith(("_search", "_select"))}
    assert found == searches
