"""First quality table: test MSE of each regression method per dataset and seed.

Runs the real pipelines in-process (each an MLflow run in experiment
`quality_table`): s-m (smbo), s-m-ph (posthoc over smbo's pool), ESMBO, ERS,
and SEGOR f-m / g-m / d-m, with the same budget and seed for all. Prints the
per-run table and the mean rank of each method, and writes them to
benchmarks/results/quality_table.{md,csv}.

    .venv/bin/python benchmarks/quality_table.py --datasets concrete boston --seeds 0 1 2 --budget 50
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"

# Method label -> (pipeline, extra runtime parameters).
METHODS = {
    "s-m": ("smbo", {}),
    "s-m-ph": ("posthoc", {"posthoc_source": "smbo"}),
    "esmbo": ("esmbo", {}),
    "ers": ("ers", {}),
    "f-m": ("segor", {"ensemble": {"size_method": "fixed"}}),
    "g-m": ("segor", {"ensemble": {"size_method": "growing"}}),
    "d-m": ("segor", {"ensemble": {"size_method": "dynamic"}}),
}


def test_mse(pipeline: str, params: dict) -> float:
    with KedroSession.create(project_path=PROJECT, runtime_params=params) as session:
        session.run(pipeline_names=[pipeline])
    metrics = PROJECT / "data" / "08_reporting" / f"{pipeline}_test_metrics.json"
    return json.loads(metrics.read_text())["test_mse_ensemble"]


def markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = [
        "| "
        + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row)
        + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["concrete", "boston"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("DO_NOT_TRACK", "true")
    os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", "quality_table")
    bootstrap_project(PROJECT)

    rows = []
    for dataset in args.datasets:
        for seed in args.seeds:
            row = {"dataset": dataset, "seed": seed}
            for label, (pipeline, extra) in METHODS.items():
                params = {
                    "dataset": dataset,
                    "seed": seed,
                    "budget": args.budget,
                    **extra,
                }
                row[label] = test_mse(pipeline, params)
            rows.append(row)
    table = pd.DataFrame(rows)
    labels = list(METHODS)
    ranks = table[labels].rank(axis=1).mean().sort_values()
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / "quality_table.csv", index=False)
    report = "\n".join(
        [
            f"Test MSE (standardized target), budget {args.budget}, "
            f"DecisionTree space, seeds {args.seeds}",
            "",
            markdown(table),
            "",
            "Mean rank over datasets x seeds (1 = best)",
            "",
            markdown(
                ranks.rename("mean rank")
                .reset_index()
                .rename(columns={"index": "method"})
            ),
            "",
        ]
    )
    (RESULTS / "quality_table.md").write_text(report)
    print(report)  # noqa: T201 - a benchmark prints its table


if __name__ == "__main__":
    main()
