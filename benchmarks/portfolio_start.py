"""Our default searches with and without the portfolio start, at short time budgets.

Every cell is one (dataset, repetition, start, time budget T): the project's
test split of repetition r (as in flaml_comparison.py), then
`EnsembleSearch(time_budget=T)` with the default method and space (SEGOR in
segor_sklearn, SEGO in sego_sklearn) on the training part, its optimizer's
initial design starting with the space's portfolio (`portfolio: true`,
conf/base/parameters_portfolios.yml) or made of Sobol points only
(`portfolio: false`), everything else equal; scored on the test part: MSE of
the standardized target (regression), error rate (classification).

The report marks the datasets the portfolios were built on (in-sample) and the
others (held out: the portfolios never saw them). Single-threaded, one cell at
a time by default:

    nice -n 10 .venv/bin/python benchmarks/portfolio_start.py
    .venv/bin/python benchmarks/portfolio_start.py --report

Each finished cell is one JSON line of benchmarks/results/portfolio_start.jsonl
(a rerun skips the cells already there); the report goes to
portfolio_start.md beside it.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# Single-threaded (the evaluation workers inherit it): equal wall time, equal CPU.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

from ensemble_bo.api import EnsembleSearch, default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.benchmarking.store import CellLines
from ensemble_bo.core.grid import (
    ToolCell,
    dataset_task,
    repetition_seed,
    run_tool_cell,
)

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "portfolio_start.jsonl"
# Two datasets of each task the portfolios were built on (benchmarks/
# build_portfolio.py), and two of each they never saw (over 2,000 rows).
DEFAULT_DATASETS = [
    "concrete",
    "diabetes",
    "wage",
    "german_credit",
    "pima",
    "titanic",
    "spambase",
]
# The datasets the portfolios were built on, from their build's record.
PORTFOLIO_RECORD = PROJECT / "benchmarks" / "results" / "portfolio.json"
TOOLS = {"portfolio": True, "sobol": False}
METHODS = {"regression": "segor", "classification": "sego"}
# A large budget of configurations: the time budget is what ends the searches.
BUDGET = 10_000
N_FOLDS = 5
PACKAGES = ("scikit-learn", "numpy", "pandas", "ensemble-bo")


def fit(cell: ToolCell, X: pd.DataFrame, y: pd.Series) -> tuple[Any, dict[str, Any]]:
    method = METHODS[cell.task]
    search = EnsembleSearch(
        method=method,
        budget=BUDGET,
        time_budget=cell.time_budget,
        cv=N_FOLDS,
        random_state=cell.seed,
        # no conformal fold models: the final model's fit is not compared
        params={
            method: {"optimizer": {"portfolio": TOOLS[cell.tool]}},
            "conformal": False,
        },
    )
    start = time.perf_counter()
    search.fit(X, y)
    return search, {
        "fit_wall_seconds": time.perf_counter() - start,
        "search_seconds": search.result_.search_seconds,
        "n_trials": len(search.result_.pool),
        "cv_loss": float(search.cv_loss_),
    }


def run_cell(
    cell: ToolCell, raw: pd.DataFrame, data_processing: dict[str, Any]
) -> dict[str, Any]:
    scripts.quiet_learners()
    return run_tool_cell(cell, raw, data_processing, fit)


def comparison_row(part: pd.DataFrame, label: str) -> list[str]:
    wide = part.pivot_table(
        index=["dataset", "repetition"], columns="tool", values="test_loss"
    ).dropna()
    if wide.empty or not set(TOOLS) <= set(wide):
        return [label, "0", "-", "-", "-", "-"]
    x, y = wide["portfolio"].to_numpy(), wide["sobol"].to_numpy()
    won = tables.wins(x, y)
    return [
        label,
        str(len(wide)),
        f"{won / len(wide):.2f} ({won:g}/{len(wide)})",
        tables.fmt(tables.wilcoxon_p(x, y), 3),
        tables.fmt(x.mean()),
        tables.fmt(y.mean()),
    ]


def report(records: dict[str, dict[str, Any]], path: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Portfolio start vs Sobol start at short time budgets",
        scripts.shown(path, PROJECT),
        ok,
        failed,
        "Test loss: MSE of the standardized target (regression), error rate "
        "(classification), on the project's test split of repetition r. Win rate: "
        "share of paired (dataset, repetition) cells where the portfolio start's "
        "test loss is lower (ties count half); p: two-sided Wilcoxon signed-rank "
        "test on those pairs. In-sample: a dataset the portfolios were built on "
        "(its training part's CV losses only); held out: one they never saw.",
    )
    if not ok:
        return "\n".join([*lines, "", "No finished cells yet.", ""])
    frame = pd.DataFrame(ok)
    built_on = {
        dataset
        for space in json.loads(PORTFOLIO_RECORD.read_text())["spaces"].values()
        for dataset in space["losses"]
    }
    frame["sample"] = [
        "in-sample" if d in built_on else "held out" for d in frame["dataset"]
    ]
    for budget in sorted(frame["time_budget"].unique()):
        part = frame[frame["time_budget"] == budget]
        rows = []
        for task in ("regression", "classification"):
            of_task = part[part["task"] == task]
            rows.append(comparison_row(of_task, f"{task}, all"))
            for sample in ("in-sample", "held out"):
                rows.append(
                    comparison_row(
                        of_task[of_task["sample"] == sample], f"{task}, {sample}"
                    )
                )
        means = part.pivot_table(
            index=["task", "dataset", "sample"],
            columns="tool",
            values=["test_loss", "n_trials"],
            aggfunc="mean",
        )
        per_dataset = [
            [
                task,
                dataset,
                sample,
                *(
                    tables.fmt(means.loc[(task, dataset, sample)][("test_loss", t)])
                    for t in TOOLS
                ),
                *(
                    tables.fmt(means.loc[(task, dataset, sample)][("n_trials", t)], 1)
                    for t in TOOLS
                ),
            ]
            for task, dataset, sample in means.index
        ]
        lines += [
            "",
            f"## T = {budget:g} s",
            "",
            tables.markdown_table(
                [
                    "cells",
                    "pairs",
                    "portfolio win rate",
                    "Wilcoxon p",
                    "mean loss, portfolio",
                    "mean loss, Sobol",
                ],
                rows,
            ),
            "",
            tables.markdown_table(
                [
                    "task",
                    "dataset",
                    "sample",
                    "test loss, portfolio",
                    "test loss, Sobol",
                    "trials, portfolio",
                    "trials, Sobol",
                ],
                per_dataset,
            ),
        ]
    lines += tables.failed_lines(failed)
    return "\n".join([*lines, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS)
    parser.add_argument("--time-budgets", nargs="+", type=float, default=[10.0, 30.0])
    parser.add_argument("--repetitions", type=int, default=2)
    scripts.add_run_arguments(parser, DEFAULT_OUTPUT)
    args = parser.parse_args()
    output = args.output.resolve()
    if not args.report:
        parameters = default_parameters()
        data_processing = dict(parameters["data_processing"])
        base_seed = int(parameters["benchmark"]["seed"])
        frames = scripts.raw_datasets(args.datasets, PROJECT)
        tasks = {
            name: dataset_task(frame, name, data_processing)
            for name, frame in frames.items()
        }
        cells = [
            ToolCell(
                dataset,
                repetition,
                repetition_seed(base_seed, repetition),
                tool,
                (("portfolio", TOOLS[tool]),),
                time_budget=float(budget),
                task=task,
            )
            for budget in sorted(args.time_budgets)
            for repetition in range(args.repetitions)
            for dataset, task in tasks.items()
            # Each start goes first in every other repetition: the first cell of
            # the run also pays for starting the evaluation worker.
            for tool in (list(TOOLS) if repetition % 2 == 0 else list(TOOLS)[::-1])
        ]
        scripts.run_grid(
            cells,
            run_cell,
            CellLines(output),
            PROJECT,
            frames=frames,
            arguments=(data_processing,),
            jobs=args.jobs,
            stamp=scripts.provenance(PACKAGES, PROJECT),
        )
    tables.write_report(
        report(CellLines(output).records(), output), output.with_suffix(".md")
    )


if __name__ == "__main__":
    main()
