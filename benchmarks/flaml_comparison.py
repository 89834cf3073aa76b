"""FLAML vs our ensemble searches at equal wall time on the bundled datasets.

Every cell is one (dataset, repetition, tool, time budget T): the project's own
test split of repetition r (the benchmark pipeline's `split_dataset` with seed
repetition_seed(0, r): test_size 0.33, stratified for classes), the tool fitted
on the training part with T seconds of search, then scored on the test part:
MSE of the target standardized by the training part's mean and std (SEGOR s.4)
for regression, error rate for classification. Tools:

- flaml: `flaml.AutoML` (default estimator list, 5-fold CV, mse / accuracy);
- ours: SEGOR (regression) / SEGO (classification) in the multi-family spaces
  segor_sklearn / sego_sklearn, `EnsembleSearch(time_budget=T)`;
- segor_paper (`--with-paper-space`, regression): SEGOR in its paper's default
  space, decision_tree_regressor, at the same T.

Both get the same raw DataFrame (text columns as they are): ours encodes them
(one-hot, or ordinal codes for many values: core.encoding), FLAML makes them
pandas categoricals. Everything runs single-threaded.
FLAML and its learners are dev-only dependencies (benchmarks/requirements-flaml.txt):

    .venv/bin/uv pip install --python .venv/bin/python -r benchmarks/requirements-flaml.txt \\
        --constraint <(grep -E '^[A-Za-z0-9_.-]+==' requirements.lock | sed 's/ *\\\\$//')
    .venv/bin/python benchmarks/flaml_comparison.py --jobs 2          # full grid, hours
    .venv/bin/python benchmarks/flaml_comparison.py --report          # tables only

Each finished cell is appended as one JSON line to
benchmarks/results/flaml_comparison.jsonl; a rerun skips the cells already
there (failed cells are run again), so a killed run resumes. Cells run by
budget: every T=10 cell first, then T=30, then T=120. The report goes to
flaml_comparison.md next to the JSON lines (and is printed).
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# Single-threaded for every tool (our evaluation worker processes inherit this),
# so that equal wall time means equal CPU.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import importlib.util
import json
import math
import sys
import time
from collections import Counter
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
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "flaml_comparison.jsonl"

REGRESSION = [
    "auto_mpg",
    "boston",
    "carseats",
    "concrete",
    "cpu_performance",
    "diabetes",
    "hitters",
    "wage",
]
CLASSIFICATION = [
    "breast_cancer",
    "car_good",
    "digits",
    "german_credit",
    "pima",
    "spambase",
    "titanic",
    "wine",
]
# adult (32,561 rows) and letter (20,000) are left out by default, as in the
# project's results grid (conf/results/parameters_benchmark.yml); --datasets
# may name them.
DEFAULT_DATASETS = REGRESSION + CLASSIFICATION
# A large budget of configurations: the time budget is what ends our searches.
DEFAULT_BUDGET = 10_000
N_FOLDS = 5
TOOLS = ("flaml", "ours", "segor_paper")
TOOL_LABELS = {
    "flaml": "FLAML",
    "ours": "ours",
    "segor_paper": "segor, paper space",
}
# The column of EnsembleSearch.members_ that names a member's family, by space.
FAMILY_COLUMNS = ("regressor", "classifier")
# Whose versions every record names.
PACKAGES = (
    "flaml",
    "lightgbm",
    "xgboost",
    "scikit-learn",
    "numpy",
    "pandas",
    "ensemble-bo",
)


# --------------------------------------------------------------------------- cells


def tool_setup(tool: str, task: str, args: argparse.Namespace) -> dict[str, Any]:
    """What a tool runs with on a task (method, space, budget); {}: not for the task."""
    if tool == "flaml":
        return {"estimator_list": "auto", "eval_method": "cv", "n_splits": N_FOLDS}
    if tool == "segor_paper":
        if task != "regression":
            return {}
        return {
            "method": "segor",
            "model": "decision_tree_regressor",
            "budget": args.budget,
        }
    if task == "regression":
        return {
            "method": "segor",
            "model": args.regression_space,
            "budget": args.budget,
        }
    return {"method": "sego", "model": args.classification_space, "budget": args.budget}


# --------------------------------------------------------------------------- tools


def fit_flaml(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series
) -> tuple[Any, dict[str, Any]]:
    from flaml import AutoML  # noqa: PLC0415 - a dev-only dependency

    automl = AutoML()
    start = time.perf_counter()
    automl.fit(
        X,
        y,
        task=cell.task,
        time_budget=cell.time_budget,
        metric="mse" if cell.task == "regression" else "accuracy",
        eval_method="cv",
        n_splits=N_FOLDS,
        seed=cell.seed,
        n_jobs=1,
        verbose=0,
        mlflow_logging=False,
    )
    fit_seconds = time.perf_counter() - start
    # FLAML's clock after its search, before it retrains the best configuration
    # on all of X (with eval_method="cv" it always does, outside its budget).
    search_seconds = getattr(getattr(automl, "_state", None), "time_from_start", None)
    return automl, {
        "fit_wall_seconds": fit_seconds,
        "search_seconds": None if search_seconds is None else float(search_seconds),
        "n_trials": getattr(automl, "modelcount", None),
        "stopped_by": "time_budget",
        "best_estimator": automl.best_estimator,
        "best_config": automl.best_config,
        "cv_loss": float(automl.best_loss),
    }


def _time_budget_supported() -> bool:
    return "time_budget" in EnsembleSearch().get_params()


def fit_ours(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series
) -> tuple[Any, dict[str, Any]]:
    setup = dict(cell.setup)
    kwargs: dict[str, Any] = {
        "method": setup["method"],
        "model": setup["model"],
        "budget": setup["budget"],
        "cv": N_FOLDS,
        "random_state": cell.seed,
    }
    if _time_budget_supported():
        kwargs["time_budget"] = cell.time_budget
    search = EnsembleSearch(**kwargs)
    start = time.perf_counter()
    search.fit(X, y)
    fit_seconds = time.perf_counter() - start
    result = search.result_
    members = search.members_
    family_column = next((c for c in FAMILY_COLUMNS if c in members.columns), None)
    if family_column is None:  # a single-family space: the space is the family
        families = {setup["model"]: float(members["weight"].sum())}
    else:
        families = {
            str(family): float(weight)
            for family, weight in members.groupby(family_column)["weight"].sum().items()
        }
    history = getattr(result, "history", [])
    return search, {
        "fit_wall_seconds": fit_seconds,
        "search_seconds": getattr(result, "search_seconds", None),
        "refit_seconds": getattr(search, "refit_seconds_", None),
        "n_trials": len(result.pool),
        "stopped_by": getattr(result, "stopped_by", None),
        "time_budget_applied": "time_budget" in kwargs,
        "ensemble_size": int(history[-1].ensemble_size)
        if history
        else len(result.members),
        "ensemble_members_distinct": len(members),
        "n_families": len(families),
        "families": families,  # family -> summed weight of its members
        "cv_loss": float(search.cv_loss_),
    }


FITTERS = {"flaml": fit_flaml, "ours": fit_ours, "segor_paper": fit_ours}


def run_cell(
    cell: ToolCell, raw: pd.DataFrame, data_processing: dict[str, Any]
) -> dict[str, Any]:
    """Split, fit, score one cell, in a worker process: its JSON record."""
    scripts.quiet_learners()
    return run_tool_cell(cell, raw, data_processing, FITTERS[cell.tool])


# --------------------------------------------------------------------------- report


def _paired(frame: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Cells where both tools finished: columns a and b (test losses), by dataset, r."""
    wide = frame.pivot_table(
        index=["dataset", "repetition"], columns="tool", values="test_loss"
    )
    if a not in wide or b not in wide:
        return pd.DataFrame(columns=[a, b])
    return wide[[a, b]].dropna()


def _comparison_rows(frame: pd.DataFrame, tools: list[str]) -> list[list[str]]:
    pairs = [(tool, "flaml") for tool in tools if tool != "flaml"]
    if "ours" in tools and "segor_paper" in tools:
        pairs.append(("ours", "segor_paper"))
    rows = []
    for a, b in pairs:
        paired = _paired(frame, a, b)
        if paired.empty:
            continue
        x, y = paired[a].to_numpy(), paired[b].to_numpy()
        won = tables.wins(x, y)
        means = paired.groupby(level="dataset").mean()
        dataset_wins = tables.wins(means[a], means[b])
        rows.append(
            [
                f"{TOOL_LABELS[a]} vs {TOOL_LABELS[b]}",
                str(len(paired)),
                f"{won / len(paired):.2f} ({won:g}/{len(paired)})",
                tables.fmt(tables.wilcoxon_p(x, y), 3),
                f"{dataset_wins / len(means):.2f} ({dataset_wins:g}/{len(means)})",
                tables.fmt(
                    tables.wilcoxon_p(means[a].to_numpy(), means[b].to_numpy()), 3
                ),
            ]
        )
    return rows


def _timing_rows(frame: pd.DataFrame, tools: list[str]) -> list[list[str]]:
    rows = []
    for tool in tools:
        part = frame[frame["tool"] == tool]
        if part.empty:
            continue
        fit = pd.to_numeric(part["fit_wall_seconds"], errors="coerce")
        search = pd.to_numeric(part["search_seconds"], errors="coerce")
        # FLAML's time after its search is its retrain on all of X; ours times
        # its refit (refit_seconds_), and the rest is start-up (the evaluation
        # worker's) and bookkeeping outside the search clock.
        if tool == "flaml" or "refit_seconds" not in part:
            refit = fit - search
        else:
            refit = pd.to_numeric(part["refit_seconds"], errors="coerce")
        stopped = Counter(part["stopped_by"].fillna("?"))
        rows.append(
            [
                TOOL_LABELS[tool],
                str(len(part)),
                tables.fmt(tables.mean_of(fit), 1),
                tables.fmt(tables.mean_of(search), 1),
                tables.fmt(tables.mean_of(refit), 1),
                tables.fmt(tables.mean_of(fit - search - refit), 1),
                tables.fmt(tables.mean_of(part["n_trials"]), 1),
                ", ".join(f"{k} {v}" for k, v in sorted(stopped.items())),
            ]
        )
    return rows


def _setup_lines(frame: pd.DataFrame, tools: list[str]) -> list[str]:
    lines = []
    for tool in tools:
        described = "; ".join(
            ", ".join(f"{k} {v}" for k, v in json.loads(setup).items())
            for setup in tables.tool_setups(frame, tool)
        )
        lines.append(f"- {TOOL_LABELS[tool]}: {described}")
    return lines


def _family_lines(frame: pd.DataFrame, tools: list[str]) -> list[str]:
    lines = []
    for tool in tools:
        part = frame[frame["tool"] == tool]
        if part.empty:
            continue
        if tool == "flaml":
            counts = Counter(part["best_estimator"].fillna("?"))
            mix = ", ".join(f"{name} {n}" for name, n in counts.most_common())
            lines.append(f"- {TOOL_LABELS[tool]}: best estimator {mix}.")
            continue
        appears = Counter(f for families in part["families"] for f in families)
        weight = Counter()
        for families in part["families"]:
            weight.update(families)
        mix = ", ".join(
            f"{name} {n} (mean weight {weight[name] / len(part):.2f})"
            for name, n in appears.most_common()
        )
        lines.append(
            f"- {TOOL_LABELS[tool]}: {tables.fmt(tables.mean_of(part['n_families']), 2)} families "
            f"per ensemble on average (max {int(part['n_families'].max())}), "
            f"{tables.fmt(tables.mean_of(part['ensemble_members_distinct']), 1)} distinct members; "
            f"ensembles using each family (of {len(part)}): {mix}."
        )
    return lines


def report(records: dict[str, dict[str, Any]], path: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "FLAML vs our ensemble searches at equal wall time",
        scripts.shown(path, PROJECT),
        ok,
        failed,
        "Test loss: MSE of the target standardized by the training part's mean and "
        "std (regression), error rate (classification), on the project's test split "
        "of repetition r (the benchmark pipeline's split_dataset with seed "
        "repetition_seed(0, r); test_size 0.33, stratified for classes); mean "
        "over repetitions, their number in brackets. Win rate: share of paired (dataset, repetition) cells where "
        "the first tool's test loss is lower (ties count half); p: two-sided "
        "Wilcoxon signed-rank test on those pairs; per dataset: the same on the "
        "datasets' mean losses.",
    )
    if not ok:
        return "\n".join([*lines, "", "No finished cells yet.", ""])
    frame = pd.DataFrame(ok)
    for column in ("families", "n_families", "ensemble_members_distinct"):
        if column not in frame:
            frame[column] = None
    frame["families"] = frame["families"].apply(
        lambda v: v if isinstance(v, dict) else {}
    )
    tools = [tool for tool in TOOLS if tool in set(frame["tool"])]
    for budget in sorted(frame["time_budget"].unique()):
        for task in ("regression", "classification"):
            part = frame[(frame["time_budget"] == budget) & (frame["task"] == task)]
            if part.empty:
                continue
            here = [tool for tool in tools if tool in set(part["tool"])]
            lines += ["", f"## T = {budget:g} s, {task}", ""]
            means = part.pivot_table(
                index="dataset", columns="tool", values="test_loss", aggfunc="mean"
            )
            counts = part.pivot_table(
                index="dataset", columns="tool", values="test_loss", aggfunc="count"
            )
            rows = [
                [dataset]
                + [
                    f"{tables.fmt(means.at[dataset, tool])} ({int(counts.at[dataset, tool])})"
                    if tool in means and not math.isnan(means.at[dataset, tool])
                    else "-"
                    for tool in here
                ]
                for dataset in means.index
            ]
            lines += [
                "Tools:",
                "",
                *_setup_lines(part, here),
                "",
                "Mean test loss (repetitions):",
                "",
                tables.markdown_table(
                    ["dataset", *(TOOL_LABELS[t] for t in here)], rows
                ),
            ]
            comparisons = _comparison_rows(part, here)
            if comparisons:
                lines += [
                    "",
                    tables.markdown_table(
                        [
                            "comparison",
                            "paired cells",
                            "win rate",
                            "Wilcoxon p",
                            "win rate per dataset",
                            "p per dataset",
                        ],
                        comparisons,
                    ),
                ]
            lines += [
                "",
                "Seconds per cell (fit: the whole `.fit`; search: the tool's own "
                "search clock, which the time budget bounds; refit: the final "
                "model's fit on the whole training part (FLAML: fit - search); "
                "other: fit - search - refit, e.g. our evaluation worker's "
                "start-up):",
                "",
                tables.markdown_table(
                    [
                        "tool",
                        "cells",
                        "mean fit s",
                        "mean search s",
                        "mean refit s",
                        "mean other s",
                        "mean trials",
                        "stopped by",
                    ],
                    _timing_rows(part, here),
                ),
                "",
                "Family mix:",
                "",
                *_family_lines(part, here),
            ]
    lines += tables.failed_lines(failed)
    return "\n".join([*lines, ""])


# --------------------------------------------------------------------------- main


def build_cells(
    args: argparse.Namespace, tasks: dict[str, str], base_seed: int
) -> list[ToolCell]:
    """Every cell, the cheap budgets first: all T=10 cells, then T=30, then T=120."""
    cells = []
    for budget in sorted(args.time_budgets):
        for repetition in range(args.repetitions):
            for dataset, task in tasks.items():
                for tool in args.tools:
                    setup = tool_setup(tool, task, args)
                    if not setup:
                        continue
                    cells.append(
                        ToolCell(
                            dataset,
                            repetition,
                            repetition_seed(base_seed, repetition),
                            tool,
                            tuple(sorted(setup.items())),
                            time_budget=float(budget),
                            task=task,
                        )
                    )
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=DEFAULT_DATASETS,
        help="names in data/01_raw (default: the 16 bundled ones but adult, letter)",
    )
    parser.add_argument(
        "--time-budgets", nargs="+", type=float, default=[10.0, 30.0, 120.0]
    )
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument(
        "--tools",
        nargs="+",
        choices=TOOLS,
        default=["flaml", "ours"],
        help="default: flaml ours",
    )
    parser.add_argument(
        "--with-paper-space",
        action="store_true",
        help="add segor_paper: SEGOR in decision_tree_regressor (regression)",
    )
    parser.add_argument("--regression-space", default="segor_sklearn")
    parser.add_argument("--classification-space", default="sego_sklearn")
    parser.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET,
        help="our configurations per search; the time budget ends it first",
    )
    scripts.add_run_arguments(parser, DEFAULT_OUTPUT)
    args = parser.parse_args()
    output = args.output.resolve()

    if not args.report:
        if args.with_paper_space and "segor_paper" not in args.tools:
            args.tools.append("segor_paper")
        if args.jobs < 1 or args.repetitions < 1:
            sys.exit("--jobs and --repetitions must be at least 1")
        if "flaml" in args.tools and importlib.util.find_spec("flaml") is None:
            sys.exit(
                "flaml is not installed; install the pins of "
                "benchmarks/requirements-flaml.txt (see its header), or leave "
                "flaml out of --tools"
            )
        ours = any(tool != "flaml" for tool in args.tools)
        if ours and not _time_budget_supported() and args.budget == DEFAULT_BUDGET:
            sys.exit(
                "this ensemble_bo's EnsembleSearch has no time_budget: our searches "
                f"would train {DEFAULT_BUDGET} configurations each; pass a small "
                "--budget to test the plumbing"
            )
        parameters = default_parameters()
        data_processing = dict(parameters["data_processing"])
        base_seed = int(parameters["benchmark"]["seed"])
        frames = scripts.raw_datasets(args.datasets, PROJECT)
        tasks = {
            name: dataset_task(frame, name, data_processing)
            for name, frame in frames.items()
        }
        scripts.run_grid(
            build_cells(args, tasks, base_seed),
            run_cell,
            CellLines(output),
            PROJECT,
            frames=frames,
            arguments=(data_processing,),
            jobs=args.jobs,
            stamp=scripts.provenance(PACKAGES),
        )

    records = CellLines(output).records()
    tables.write_report(report(records, output), output.with_suffix(".md"))


if __name__ == "__main__":
    main()
