"""benchmark: run the grid of `params:benchmark` cell by cell, then the comparison report.

The pipeline prepares each cell's data itself (the data_processing node
functions with the repetition's seed), so it runs on its own:
`kedro run --pipeline=benchmark`.
"""

from kedro.pipeline import Node, Pipeline

from .nodes import benchmark_report, run_benchmark

# The project parameter blocks the benchmark's methods read (see nodes.METHODS).
METHOD_PARAMETERS = (
    "smbo",
    "random_search",
    "posthoc",
    "esmbo",
    "ers",
    "segor",
    "ensemble",
    "sego",
    "voting",
)


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                run_benchmark,
                inputs={
                    "raw_datasets": "raw_datasets",
                    "cell_store": "benchmark_cells",
                    "benchmark": "params:benchmark",
                    "data_processing": "params:data_processing",
                    "models": "params:models",
                    "default_models": "params:default_models",
                    **{name: f"params:{name}" for name in METHOD_PARAMETERS},
                },
                outputs="benchmark_cell_records",
                name="run_benchmark_cells",
            ),
            Node(
                benchmark_report,
                inputs="benchmark_cell_records",
                outputs=[
                    "benchmark_tables",
                    "benchmark_reports",
                    "benchmark_figures",
                ],
                name="benchmark_report",
            ),
        ]
    )
