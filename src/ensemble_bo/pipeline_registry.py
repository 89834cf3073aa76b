"""Project pipelines, generated from the method registry (core/methods.py).

`kedro run --pipelines=NAME`: every method in METHODS runs on the output of
data_processing; every selection that runs over a saved pool
(SAVED_POOL_SELECTIONS, e.g. posthoc) too; the benchmark prepares each cell's
data itself. The default is DEFAULT_METHOD.
"""

from __future__ import annotations

from kedro.pipeline import Pipeline

from ensemble_bo.core.methods import DEFAULT_METHOD, METHODS, SAVED_POOL_SELECTIONS
from ensemble_bo.pipelines import benchmark, data_processing, model_search


def register_pipelines() -> dict[str, Pipeline]:
    preparation = data_processing.create_pipeline()
    pipelines = {"data_processing": preparation}
    for name, method in METHODS.items():
        pipelines[name] = preparation + model_search.create_pipeline(method)
    for selection in SAVED_POOL_SELECTIONS:
        pipelines[selection.name] = (
            preparation + model_search.create_selection_pipeline(selection)
        )
    pipelines["benchmark"] = benchmark.create_pipeline()
    pipelines["__default__"] = pipelines[DEFAULT_METHOD]
    return pipelines
