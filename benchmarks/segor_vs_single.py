"""Test MSE of the SEGOR ensemble vs the single best model of the same run.

Runs `kedro run --pipelines=segor` for every dataset x seed (each an MLflow run in
experiment `segor_benchmark` of the project's store), prints a markdown table
and writes it to benchmarks/results/segor_vs_single.md (and .csv).

    .venv/bin/python benchmarks/segor_vs_single.py --datasets concrete boston --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from ensemble_bo.benchmarking.runner import run_cells
from ensemble_bo.core.grid import ToolCell

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"


def run_segor(cell: ToolCell, budget: int | None) -> dict[str, float]:
    """The cell's `kedro run --pipelines=segor`: its test metrics."""
    params = {"dataset": cell.dataset, "seed": cell.seed}
    if budget is not None:
        params["budget"] = budget
    with KedroSession.create(project_path=PROJECT, runtime_params=params) as session:
        # the run's own outputs: versioned by its session id (conf/base/catalog.yml)
        metrics_path = (
            PROJECT
            / "data"
            / "08_reporting"
            / "segor_test_metrics.json"
            / session.session_id
            / "segor_test_metrics.json"
        )
        session.run(pipeline_names=["segor"])
    return json.loads(metrics_path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["concrete", "boston"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=None, help="default: conf/base")
    args = parser.parse_args()

    os.environ.setdefault("DO_NOT_TRACK", "true")
    os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", "segor_benchmark")
    bootstrap_project(PROJECT)
    cells = [
        ToolCell(dataset, seed, seed, "segor")
        for dataset in args.datasets
        for seed in args.seeds
    ]
    # One after the other, in this process: each is a Kedro session of its own.
    ended = run_cells(cells, run_segor, arguments=(args.budget,), jobs=1)
    rows = [
        {"dataset": cell.dataset, "seed": cell.seed, **metrics}
        for cell, metrics in ended
    ]
    table = pd.DataFrame(rows)[
        ["dataset", "seed", "test_mse_ensemble", "test_mse_single_best"]
    ]
    table["ratio"] = table["test_mse_ensemble"] / table["test_mse_single_best"]
    summary = table.groupby("dataset")[
        ["test_mse_ensemble", "test_mse_single_best", "ratio"]
    ].mean()
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "segor_vs_single.csv", index=False)
    report = (
        "Test MSE (standardized target) of SEGOR f-m vs the single best model (s-m)\n\n"
        + table.to_markdown(index=False, floatfmt=".4f")
        + "\n\nMean per dataset\n\n"
        + summary.to_markdown(floatfmt=".4f")
        + "\n"
    )
    (RESULTS / "segor_vs_single.md").write_text(report)
    print(report)  # noqa: T201 - a benchmark prints its table


if __name__ == "__main__":
    main()
