"""Coverage of the final model's prediction intervals and sets on the bundled datasets.

Every cell is one (dataset, repetition): the project's own test split of
repetition r (seed repetition_seed(0, r), 33% test, stratified for classes),
one search of the default method and space (SEGOR in segor_sklearn, SEGO in
sego_sklearn) with the project's parameters and `--budget` configurations,
then its final ensemble with conformal fold models (`conformal: true`, CV+ on
the search's folds). On the test split, at 80, 90 and 95% coverage, it
measures:

- regression: the share of test targets inside their interval and the mean
  width in standard deviations of the training target;
- classification: the share of test labels inside their set, the mean set
  size, and the expected calibration error of the probabilities.

Beside ours, MAPIE's CV+ (CrossConformalRegressor, method "plus";
CrossConformalClassifier, agg_scores "crossval") wraps the same ensemble with
the same folds: the width ratio ours / MAPIE's and the share of test rows whose
interval or set differs say whether the two constructions agree.

    .venv/bin/python benchmarks/conformal_coverage.py                 # the table
    .venv/bin/python benchmarks/conformal_coverage.py --report        # tables only

Each finished cell is one JSON line of benchmarks/results/conformal_coverage.jsonl
(a rerun skips those), the report goes to conformal_coverage.md beside it.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import skops.io
from mapie.classification import CrossConformalClassifier as MapieClassifier
from mapie.regression import CrossConformalRegressor as MapieRegressor
from sklearn.model_selection import PredefinedSplit

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.conformal import REPORTED_COVERAGES
from ensemble_bo.core.grid import ToolCell
from ensemble_bo.core.refit import (
    ConformalPlan,
    classification_test_metrics,
    ensemble_estimator,
    uncertainty_test_metrics,
)
from ensemble_bo.core.zoo import quiet_iteration_caps

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "conformal_coverage.jsonl"
PACKAGES = ("scikit-learn", "numpy", "mapie", "skops", "ensemble-bo")


def _mapie(model, fold_ids, X, y, X_test, task: str) -> dict[float, np.ndarray]:
    """MAPIE's CV+ intervals (n, 2) or cross-conformal sets (n, classes) of
    `model` on the same folds, by coverage."""
    splitter = PredefinedSplit(fold_ids)
    levels = list(REPORTED_COVERAGES)
    if task == "regression":
        mapie = MapieRegressor(
            model, confidence_level=levels, method="plus", cv=splitter
        )
        _, bounds = mapie.fit_conformalize(X, y).predict_interval(X_test)
        return {c: bounds[:, :, j] for j, c in enumerate(levels)}
    mapie = MapieClassifier(model, confidence_level=levels, cv=splitter)
    _, sets = mapie.fit_conformalize(X, y).predict_set(X_test, agg_scores="crossval")
    return {c: sets[:, :, j] for j, c in enumerate(levels)}


def run_cell(cell: ToolCell, raw: pd.DataFrame, parameters: dict[str, Any]) -> dict:
    """The cell's search, its conformal final model and MAPIE's on the same folds."""
    record = cell.coordinates
    start = time.perf_counter()
    try:
        split, data, result = scripts.default_search(cell, raw, parameters)
        voting = parameters["voting"]
        X, y = split.train_features, split.train_target
        X_test, y_test = split.test_features, split.test_target
        model = ensemble_estimator(
            result,
            data.encoding,
            voting,
            cell.seed,
            conformal=ConformalPlan(data.fold_ids),
        )
        plain = ensemble_estimator(result, data.encoding, voting, cell.seed)
        with quiet_iteration_caps():
            for name, estimator in (("plain", plain), ("conformal", model)):
                fit_start = time.perf_counter()
                estimator.fit(X, y)
                record[f"{name}_fit_seconds"] = time.perf_counter() - fit_start
                record[f"{name}_skops_mib"] = len(skops.io.dumps(estimator)) / 2**20
            record["fit_wall_seconds"] = record["conformal_fit_seconds"]
            ours = uncertainty_test_metrics(model, X_test, y_test, data.target_scaling)
            theirs = _mapie(plain, data.fold_ids, X, y, X_test, cell.task)
        record["ours"] = ours
        record["mapie"] = {}
        for coverage, answer in theirs.items():
            level = round(100 * coverage)
            if cell.task == "regression":
                mine = model.predict_interval(X_test, coverage)
                width = (answer[:, 1] - answer[:, 0]) / data.target_scaling["std"]
                record["mapie"][f"width_{level}"] = float(width.mean())
                differs = ~np.isclose(mine, answer).all(axis=1)
                adaptive = model.predict_interval(X_test, coverage, adaptive=True)
                truth = np.asarray(y_test)
                record["ours"][f"adaptive_coverage_{level}"] = float(
                    np.mean((adaptive[:, 0] <= truth) & (truth <= adaptive[:, 1]))
                )
                record["ours"][f"adaptive_width_{level}"] = float(
                    np.mean(adaptive[:, 1] - adaptive[:, 0])
                    / data.target_scaling["std"]
                )
            else:
                differs = (model.predict_set(X_test, coverage) != answer).any(axis=1)
            record["mapie"][f"rows_differing_{level}"] = float(differs.mean())
        if cell.task == "classification":
            record["ece"] = classification_test_metrics(model, X_test, y_test)["ece"]
        record.update(
            status="ok",
            test_loss=ours.get("test_interval_width_90", ours.get("test_set_size_90")),
            trials=len(result.pool),
        )
    except Exception as error:  # noqa: BLE001 - a failed cell is a result to report
        record.update(status="failed", error=f"{type(error).__name__}: {error}")
    record["cell_wall_seconds"] = time.perf_counter() - start
    return record


# --------------------------------------------------------------------------- report


def _rows(ok: list[dict[str, Any]], task: str) -> pd.DataFrame:
    rows = []
    for record in ok:
        if record["task"] != task:
            continue
        row = {"dataset": record["dataset"], **record["ours"], **record["mapie"]}
        row["ece"] = record.get("ece", np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def _regression_section(frame: pd.DataFrame) -> list[str]:
    levels = [round(100 * c) for c in REPORTED_COVERAGES]
    by_dataset = frame.groupby("dataset").mean(numeric_only=True)
    header = ["dataset"]
    for level in levels:
        header += [f"cover {level}%", f"width {level}%", f"/ MAPIE {level}%"]
    rows = []
    for name, row in list(by_dataset.iterrows()) + [("mean", by_dataset.mean())]:
        cells = [name]
        for level in levels:
            ratio = row[f"test_interval_width_{level}"] / row[f"width_{level}"]
            cells += [
                tables.fmt(row[f"test_interval_coverage_{level}"], 3),
                tables.fmt(row[f"test_interval_width_{level}"], 3),
                tables.fmt(ratio, 3),
            ]
        rows.append(cells)
    cover = by_dataset["test_interval_coverage_90"]
    differing = frame[[f"rows_differing_{level}" for level in levels]].to_numpy()
    return [
        "",
        "## Regression: CV+ intervals",
        "",
        "Test coverage and mean width (standard deviations of the training "
        "target), means over repetitions; `/ MAPIE`: our width over MAPIE's CV+ "
        "around the same ensemble on the same folds.",
        "",
        tables.markdown_table(header, rows),
        "",
        f"- 90%: mean coverage {cover.mean():.3f} over {len(cover)} datasets, "
        f"lowest {cover.min():.3f} ({cover.idxmin()}); over all "
        f"{len(frame)} cells {frame['test_interval_coverage_90'].min():.3f} to "
        f"{frame['test_interval_coverage_90'].max():.3f}",
        f"- test rows whose interval differs from MAPIE's: {differing.mean():.2%} "
        f"(largest share in a cell {differing.max():.2%})",
        *_adaptive_lines(frame),
    ]


def _adaptive_lines(frame: pd.DataFrame) -> list[str]:
    """Adaptive (normalized) CV+ against plain CV+, cell by cell, at 90%."""
    if "adaptive_width_90" not in frame:
        return []
    ratio = frame["adaptive_width_90"] / frame["test_interval_width_90"]
    by_dataset = frame.groupby("dataset")["adaptive_coverage_90"].mean()
    return [
        f"- adaptive (normalized by the members' spread), 90%: mean coverage "
        f"{frame['adaptive_coverage_90'].mean():.3f} (lowest dataset "
        f"{by_dataset.min():.3f}, {by_dataset.idxmin()}), width / plain CV+'s "
        f"median {ratio.median():.3f}, mean {ratio.mean():.3f}; narrower in "
        f"{int((ratio < 1).sum())} of {len(ratio)} cells, Wilcoxon p "
        f"{tables.fmt(tables.wilcoxon_p(frame['adaptive_width_90'], frame['test_interval_width_90']), 3)}"
    ]


def _classification_section(frame: pd.DataFrame) -> list[str]:
    levels = [round(100 * c) for c in REPORTED_COVERAGES]
    by_dataset = frame.groupby("dataset").mean(numeric_only=True)
    header = ["dataset"]
    for level in levels:
        header += [f"cover {level}%", f"size {level}%"]
    header.append("ECE")
    rows = []
    for name, row in list(by_dataset.iterrows()) + [("mean", by_dataset.mean())]:
        cells = [name]
        for level in levels:
            cells += [
                tables.fmt(row[f"test_set_coverage_{level}"], 3),
                tables.fmt(row[f"test_set_size_{level}"], 2),
            ]
        cells.append(tables.fmt(row["ece"], 3))
        rows.append(cells)
    cover = by_dataset["test_set_coverage_90"]
    differing = frame[[f"rows_differing_{level}" for level in levels]].to_numpy()
    return [
        "",
        "## Classification: cross-conformal sets",
        "",
        "Test coverage and mean set size (classes), means over repetitions; "
        "ECE: top-label expected calibration error of the probabilities (10 "
        "bins).",
        "",
        tables.markdown_table(header, rows),
        "",
        f"- 90%: mean coverage {cover.mean():.3f} over {len(cover)} datasets, "
        f"lowest {cover.min():.3f} ({cover.idxmin()})",
        f"- test rows whose set differs from MAPIE's cross-conformal set: "
        f"{differing.mean():.2%} (largest share in a cell {differing.max():.2%})",
    ]


def _cost_lines(ok: list[dict[str, Any]]) -> list[str]:
    """What the fold models cost: fit seconds and model size, conformal over plain."""
    seconds = [r["conformal_fit_seconds"] / r["plain_fit_seconds"] for r in ok]
    sizes = [r["conformal_skops_mib"] / r["plain_skops_mib"] for r in ok]
    return [
        "",
        "## What the fold models cost",
        "",
        f"- final model fit, conformal / plain: median {np.median(seconds):.2f}x "
        f"(range {min(seconds):.2f}-{max(seconds):.2f}x)",
        f"- model size (skops), conformal / plain: median {np.median(sizes):.2f}x; "
        f"conformal models {np.median([r['conformal_skops_mib'] for r in ok]):.1f} "
        f"MiB median, {max(r['conformal_skops_mib'] for r in ok):.1f} MiB largest",
    ]


def report(records: dict[str, dict[str, Any]], output: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Coverage of prediction intervals and sets",
        scripts.shown(output, PROJECT),
        ok,
        failed,
        "One search per cell, its final ensemble with conformal fold models "
        "(CV+ on the search's folds), measured on the held-out test split.",
    )
    for task, section in (
        ("regression", _regression_section),
        ("classification", _classification_section),
    ):
        frame = _rows(ok, task)
        if not frame.empty:
            lines += section(frame)
    if ok:
        lines += _cost_lines(ok)
    lines += tables.failed_lines(failed)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    scripts.add_search_grid_arguments(parser, DEFAULT_OUTPUT, repetitions=5)
    args = scripts.parse_search_grid(parser)
    scripts.search_grid_main(
        args,
        PROJECT,
        default_parameters(),
        lambda tasks: scripts.default_search_cells(
            args.datasets,
            tasks,
            args.repetitions,
            "conformal",
            (("budget", args.budget),),
        ),
        run_cell,
        report,
        PACKAGES,
    )


if __name__ == "__main__":
    main()
