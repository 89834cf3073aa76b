"""benchmark: run the grid of `params:benchmark` cell by cell, then the comparison report.

The pipeline prepares each cell's data itself (core.preparation.prepare with
the repetition's seed), so it runs on its own: `kedro run --pipelines=benchmark`.
Its parameter inputs are every block a method of the registry reads
(core.grid.parameter_blocks).
"""

from kedro.pipeline import Node, Pipeline

from ensemble_bo.core.grid import parameter_blocks
from ensemble_bo.reporting import benchmark_report

from .nodes import run_benchmark


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                run_benchmark,
                inputs={
                    "raw_datasets": "raw_datasets",
                    "cell_store": "benchmark_cells",
                    "journals": "search_journals",
                    "benchmark": "params:benchmark",
                    "data_processing": "params:data_processing",
                    **{name: f"params:{name}" for name in parameter_blocks()},
                },
                outputs="benchmark_cell_records",
                name="run_benchmark_cells",
            ),
            Node(
                benchmark_report,
                inputs="benchmark_cell_records",
                outputs=["benchmark_tables", "benchmark_reports", "benchmark_figures"],
                name="benchmark_report",
            ),
        ]
    )
