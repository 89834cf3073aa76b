"""Project pipelines: each method runs on the output of data_processing."""

from __future__ import annotations

from kedro.pipeline import Pipeline

from ensemble_bo.pipelines import benchmark, data_processing, model_search

METHODS = ("segor", "sego", "esmbo", "smbo", "random_search")


def register_pipelines() -> dict[str, Pipeline]:
    """`kedro run --pipeline=NAME` for each method; the default is segor."""
    preparation = data_processing.create_pipeline()
    pipelines = {"data_processing": preparation}
    for method in METHODS:
        pipelines[method] = preparation + model_search.create_pipeline(method)
    pipelines["ers"] = preparation + model_search.create_ers_pipeline()
    pipelines["posthoc"] = preparation + model_search.create_posthoc_pipeline()
    # The benchmark prepares each cell's data itself (seeded per repetition).
    pipelines["benchmark"] = benchmark.create_pipeline()
    pipelines["__default__"] = pipelines["segor"]
    return pipelines
