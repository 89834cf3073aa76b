"""Test loss against the inference budget on the bundled datasets.

Every cell is one (dataset, repetition): the project's own test split of
repetition r (seed repetition_seed(0, r), 33% test, stratified for classes)
and the default method and space (SEGOR in segor_sklearn, SEGO in
sego_sklearn) with the project's parameters and `--budget` configurations.
The search runs first without limits; its ensemble's prediction seconds per
1,000 rows, C, is the sum of its distinct members' as their trials measured
them (core.inference_budget). The same search then runs again with
`inference.max_seconds_per_1000_rows` at each fraction of C in
`--fractions`; beside it, the unconstrained search's pool selected again
under each limit by greedy post-hoc selection (no training). For each
ensemble the cell records the test loss (MSE of the
standardized target; error rate and log-loss for classification), the cost
its members' trials measured, and the final model's own measured prediction
seconds per 1,000 test rows and size (core.refit.serving_costs).

    .venv/bin/python benchmarks/inference_budget.py                 # the table
    .venv/bin/python benchmarks/inference_budget.py --report        # tables only

Each finished cell is one JSON line of benchmarks/results/inference_budget.jsonl
(a rerun skips those), the report goes to inference_budget.md beside it.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.grid import ToolCell
from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.refit import refit_and_score
from ensemble_bo.core.selection.stages import posthoc_selection

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "inference_budget.jsonl"
PACKAGES = ("scikit-learn", "numpy", "ensemble-bo")


def _scored(result, split, data, voting, seed) -> dict[str, Any]:
    """A search's final ensemble refit and scored, and what it costs."""
    _, metrics, _ = refit_and_score(
        result,
        split.train_features,
        split.train_target,
        split.test_features,
        split.test_target,
        data.encoding,
        data.target_scaling,
        voting,
        seed,
    )
    loss = (
        "test_error_ensemble" if data.task == "classification" else "test_mse_ensemble"
    )
    record = {
        "test_loss": metrics[loss],
        "trial_seconds_per_1000": float(
            InferenceBudget().ensemble_cost(result.pool, list(result.member_weights))[0]
        ),
        "measured_seconds_per_1000": metrics["ensemble_predict_seconds_per_1000"],
        "model_mb": metrics["ensemble_model_mb"],
        "members_distinct": len(result.member_weights),
        "skipped": result.search_metrics.get("inference_budget_skipped", 0.0),
    }
    if data.task == "classification":
        record["test_log_loss"] = metrics["test_log_loss_ensemble"]
    return record


def run_cell(cell: ToolCell, raw: pd.DataFrame, parameters: dict[str, Any]) -> dict:
    """The unconstrained search, then one per fraction of its ensemble's cost."""
    record = cell.coordinates
    start = time.perf_counter()
    setup = dict(cell.setup)
    try:
        split, data = prepare(
            raw, cell.dataset, parameters["data_processing"], cell.seed
        )
        settings = {**parameters, "budget": setup["budget"]}
        voting = settings["voting"]
        unlimited = run_method(setup["method"], data, settings, cell.seed)
        free = _scored(unlimited, split, data, voting, cell.seed)
        record["free"] = free
        record["limited"], record["posthoc"] = {}, {}
        for fraction in setup["fractions"]:
            limit = fraction * free["trial_seconds_per_1000"]
            limited = {**settings, "inference": {**settings["inference"]}}
            limited["inference"]["max_seconds_per_1000_rows"] = limit
            searched = run_method(setup["method"], data, limited, cell.seed)
            record["limited"][str(fraction)] = _scored(
                searched, split, data, voting, cell.seed
            )
            # the alternative: the unconstrained pool, selected again under
            # the budget by greedy post-hoc selection
            selected = posthoc_selection(
                unlimited,
                data.target,
                data.fold_ids,
                loss=unlimited.objective or "auto",
                budget=InferenceBudget(max_seconds_per_1000_rows=limit),
            )
            record["posthoc"][str(fraction)] = _scored(
                selected, split, data, voting, cell.seed
            )
        record.update(status="ok", test_loss=free["test_loss"])
    except Exception as error:  # noqa: BLE001 - a failed cell is a result to report
        record.update(status="failed", error=f"{type(error).__name__}: {error}")
    record["cell_wall_seconds"] = time.perf_counter() - start
    return record


# --------------------------------------------------------------------------- report


def _curve(
    ok: list[dict[str, Any]], task: str, loss: str, variant: str
) -> list[list[str]]:
    rows = []
    cells = [r for r in ok if r["task"] == task and variant in r]
    fractions = sorted({f for r in cells for f in r[variant]}, key=float, reverse=True)
    for fraction in ["1.0", *fractions]:
        parts = [
            r["free"] if fraction == "1.0" else r[variant][fraction] for r in cells
        ]
        losses = np.array([p[loss] for p in parts])
        free = np.array([r["free"][loss] for r in cells])
        # relative rise of the mean loss over the cells, and cell by cell
        rise = losses.mean() / free.mean() - 1
        within = np.array([p["trial_seconds_per_1000"] for p in parts]) / np.array(
            [r["free"]["trial_seconds_per_1000"] for r in cells]
        )
        measured = np.array([p["measured_seconds_per_1000"] for p in parts]) / np.array(
            [r["free"]["measured_seconds_per_1000"] for r in cells]
        )
        rows.append(
            [
                f"{float(fraction):.2f}",
                tables.fmt(losses.mean()),
                f"{rise:+.1%}",
                f"{np.mean(losses > free + 1e-12):.0%}",
                f"{np.median(within):.2f}",
                f"{np.median(measured):.2f}",
                f"{np.mean([p['members_distinct'] for p in parts]):.1f}",
            ]
        )
    return rows


def report(records: dict[str, dict[str, Any]], output: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Test loss against the inference budget",
        scripts.shown(output, PROJECT),
        ok,
        failed,
        "Per cell, the search without limits, then again with its ensemble's "
        "prediction time capped at each fraction of the unconstrained "
        "ensemble's (as the trials measured it).",
    )
    header = [
        "budget (of free)",
        "mean test loss",
        "rise",
        "cells worse",
        "trial-measured time (median ratio)",
        "final model's measured time (median ratio)",
        "distinct members",
    ]
    for variant, how in (
        ("limited", "the search keeps the budget"),
        ("posthoc", "post-hoc selection under the budget from the unconstrained pool"),
    ):
        for task, loss, name in (
            ("regression", "test_loss", "MSE"),
            ("classification", "test_loss", "error"),
            ("classification", "test_log_loss", "log-loss"),
        ):
            if any(r["task"] == task and variant in r for r in ok):
                lines += [
                    "",
                    f"## {task}: test {name}; {how}",
                    "",
                    tables.markdown_table(header, _curve(ok, task, loss, variant)),
                ]
    lines += tables.failed_lines(failed)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.75, 0.5, 0.25])
    scripts.add_search_grid_arguments(parser, DEFAULT_OUTPUT, repetitions=2)
    args = scripts.parse_search_grid(parser)
    if not all(0 < f < 1 for f in args.fractions):
        sys.exit(f"--fractions must lie in (0, 1), got {args.fractions}")
    scripts.search_grid_main(
        args,
        PROJECT,
        {**default_parameters(), "conformal": False},
        lambda tasks: scripts.default_search_cells(
            args.datasets,
            tasks,
            args.repetitions,
            "inference_budget",
            (
                ("budget", args.budget),
                ("fractions", tuple(args.fractions)),
                ("variants", ("search", "posthoc")),
            ),
        ),
        run_cell,
        report,
        PACKAGES,
    )


if __name__ == "__main__":
    main()
