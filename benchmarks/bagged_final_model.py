"""Refit against bagged final models of the same searches on the bundled datasets.

Every cell is one (dataset, repetition): the project's own test split of
repetition r (seed repetition_seed(0, r), 33% test, stratified for classes),
one search of the default method and space (SEGOR in segor_sklearn, SEGO in
sego_sklearn; `--classification-method sego:log_loss` for another objective)
with the project's parameters and `--budget` configurations, then its final
ensemble built both ways from that one search (`final_model`): refit (each
member refit on all training rows) and bagged (each member the mean of its k
fold models, fitted on the search's folds). Each final model is fitted in a
fresh process of its own, which measures:

- test loss: MSE of the target standardized by the training part (SEGOR
  s.4), or error rate, log-loss and Brier score for classification;
- fit seconds (wall and CPU) of the final model on the training part;
- model size: the skops file the run logs to MLflow, and its pickle;
- peak memory of the fit: the process's peak resident memory over what it
  held before the fit (Linux VmHWM, reset by /proc/self/clear_refs);
- prediction seconds per 1,000 rows (CPU; the test rows resampled to 1,000,
  the median of 5 calls).

For the choice of how a bagged model gets its fold models, each cell also
records what keeping them from the search would cost: the mean pickle size
of one configuration's fold models and the seconds to pickle and unpickle
them (the trip from a worker process), times the search's trials.

Everything runs single-threaded (OMP/BLAS threads 1), so CPU seconds compare
across cells. Figures are valid on a quiet machine only.

    .venv/bin/python benchmarks/bagged_final_model.py                # the table
    .venv/bin/python benchmarks/bagged_final_model.py --report       # tables only

Each finished cell is one JSON line of benchmarks/results/bagged_final_model.jsonl
(a rerun skips those), the report goes to bagged_final_model.md beside it.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import multiprocessing
import pickle
import re
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.benchmarking.store import CellLines
from ensemble_bo.core.bagging import FINAL_MODELS
from ensemble_bo.core.grid import ToolCell, dataset_task, repetition_seed
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import DatasetSplit, ModelInput, prepare
from ensemble_bo.core.refit import (
    bagging_folds,
    classification_test_metrics,
    ensemble_estimator,
    test_sample_losses,
)
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.zoo import quiet_iteration_caps

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "bagged_final_model.jsonl"
REGRESSION = ["concrete", "boston", "diabetes", "auto_mpg", "carseats"]
CLASSIFICATION = ["breast_cancer", "pima", "german_credit", "wine", "titanic"]
PACKAGES = ("scikit-learn", "numpy", "skops", "ensemble-bo")
PREDICTION_ROWS = 1000
PREDICTION_REPEATS = 5


# --------------------------------------------------------------------------- cells


def build_cells(
    datasets: list[str],
    tasks: dict[str, str],
    repetitions: int,
    base_seed: int,
    setup: dict[str, Any],
) -> list[ToolCell]:
    return [
        ToolCell(
            dataset,
            repetition,
            repetition_seed(base_seed, repetition),
            "final_models",
            tuple(sorted(setup[tasks[dataset]].items())),
            task=tasks[dataset],
        )
        for repetition in range(repetitions)
        for dataset in datasets
    ]


def _memory_kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", status).group(1))


def _timed(call) -> tuple[float, float]:
    """(wall, CPU) seconds of call()."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure_final_model(
    final_model: str,
    result: EnsembleSearchResult,
    split: DatasetSplit,
    data: ModelInput,
    voting: str,
    seed: int,
) -> dict[str, Any]:
    """One final model of the search, fitted and measured in this (fresh) process."""
    import skops.io  # noqa: PLC0415 - in the measuring process only

    model = ensemble_estimator(
        result, data.encoding, voting, seed, fold_ids=bagging_folds(final_model, data)
    )
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _memory_kib("VmRSS")
    with quiet_iteration_caps():
        fit_wall, fit_cpu = _timed(
            lambda: model.fit(split.train_features, split.train_target)
        )
    peak = _memory_kib("VmHWM") - before
    task = split.info["task"]
    record = {
        "test_loss": float(
            test_sample_losses(
                model, split.test_features, split.test_target, task, data.target_scaling
            ).mean()
        ),
        "fit_wall_seconds": fit_wall,
        "fit_cpu_seconds": fit_cpu,
        "peak_memory_mib": peak / 1024,
        "skops_mib": len(skops.io.dumps(model)) / 2**20,
        "pickle_mib": len(pickle.dumps(model)) / 2**20,
    }
    if task == "classification":
        record |= classification_test_metrics(
            model, split.test_features, split.test_target
        )
    rows = split.test_features.sample(PREDICTION_ROWS, replace=True, random_state=0)
    record["predict_cpu_seconds_per_1000"] = statistics.median(
        _timed(lambda: model.predict(rows))[1] for _ in range(PREDICTION_REPEATS)
    )
    if final_model == "bagged":
        record |= _shipping_cost(model, task)
    return record


def _shipping_cost(model, task: str) -> dict[str, float]:
    """What keeping each trial's fold models from its worker would cost, from
    the members' fold models: mean pickle MiB and pickle+unpickle seconds."""
    pipeline = model.regressor_ if task == "regression" else model
    members = pipeline.named_steps["ensemble"].estimators_
    sizes, seconds = [], []
    for member in members:
        start = time.perf_counter()
        pickled = pickle.dumps(member.estimators_)
        pickle.loads(pickled)  # noqa: S301 - made just above
        seconds.append(time.perf_counter() - start)
        sizes.append(len(pickled) / 2**20)
    return {
        "fold_models_mib_per_configuration": float(np.mean(sizes)),
        "fold_models_transfer_seconds_per_configuration": float(np.mean(seconds)),
    }


def run_cell(
    cell: ToolCell, raw: pd.DataFrame, parameters: dict[str, Any]
) -> dict[str, Any]:
    """The cell's search, then each final model measured in a fresh process."""
    record = cell.coordinates
    cell_start = time.perf_counter()
    setup = dict(cell.setup)
    settings = {**parameters, "budget": setup["budget"]}
    try:
        split, data = prepare(
            raw, cell.dataset, parameters["data_processing"], cell.seed
        )
        start = time.perf_counter()
        result = run_method(setup["method"], data, settings, cell.seed)
        record["search_seconds"] = time.perf_counter() - start
        spawn = multiprocessing.get_context("spawn")
        for final_model in FINAL_MODELS:
            with ProcessPoolExecutor(1, mp_context=spawn) as process:
                measured = process.submit(
                    measure_final_model,
                    final_model,
                    result,
                    split,
                    data,
                    parameters["voting"],
                    cell.seed,
                ).result()
            record[final_model] = measured
        record.update(
            status="ok",
            test_loss=record["refit"]["test_loss"],
            trials=len(result.pool),
            members_distinct=len(result.member_weights),
            folds=int(len(np.unique(data.fold_ids))),
        )
    except Exception as error:  # noqa: BLE001 - a failed cell is a result to report
        record.update(status="failed", error=f"{type(error).__name__}: {error}")
    record["cell_wall_seconds"] = time.perf_counter() - cell_start
    return record


# --------------------------------------------------------------------------- report

# (record field, column title, digits) of the per-dataset table, per final model.
MEASURES = (
    ("fit_cpu_seconds", "fit CPU s", 2),
    ("skops_mib", "skops MiB", 2),
    ("peak_memory_mib", "peak MiB", 1),
    ("predict_cpu_seconds_per_1000", "predict s / 1,000 rows", 3),
)


def _frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for record in records:
        row = {
            key: record[key]
            for key in ("dataset", "task", "repetition", "trials", "members_distinct")
        }
        for final_model in FINAL_MODELS:
            for name, value in record[final_model].items():
                row[f"{final_model}.{name}"] = value
        rows.append(row)
    return pd.DataFrame(rows)


def _task_section(frame: pd.DataFrame, task: str) -> list[str]:
    part = frame[frame["task"] == task]
    if part.empty:
        return []
    losses = ["test_loss"] + (["log_loss", "brier"] if task == "classification" else [])
    loss_name = "MSE" if task == "regression" else "error"
    header = ["dataset", "r", "members"]
    for loss in losses:
        label = loss_name if loss == "test_loss" else loss
        header += [f"{label} refit", f"{label} bagged"]
    for _, title, _ in MEASURES:
        header += [f"{title} refit", f"{title} bagged"]
    rows = []
    for _, row in part.sort_values(["dataset", "repetition"]).iterrows():
        cells = [row["dataset"], str(row["repetition"]), str(row["members_distinct"])]
        for loss in losses:
            cells += [tables.fmt(row[f"{m}.{loss}"]) for m in FINAL_MODELS]
        for field, _, digits in MEASURES:
            cells += [tables.fmt(row[f"{m}.{field}"], digits) for m in FINAL_MODELS]
        rows.append(cells)
    means = ["mean", "", ""]
    for loss in losses:
        means += [tables.fmt(part[f"{m}.{loss}"].mean()) for m in FINAL_MODELS]
    for field, _, digits in MEASURES:
        means += [tables.fmt(part[f"{m}.{field}"].mean(), digits) for m in FINAL_MODELS]
    rows.append(means)
    lines = ["", f"## {task}", "", tables.markdown_table(header, rows), ""]
    for loss in losses:
        bagged, refit = part[f"bagged.{loss}"], part[f"refit.{loss}"]
        label = loss_name if loss == "test_loss" else loss
        lines.append(
            f"- {label}: bagged lower on {tables.wins(bagged, refit):g} of "
            f"{len(part)} cells, Wilcoxon p (two-sided) "
            f"{tables.fmt(tables.wilcoxon_p(bagged, refit), 3)}"
        )
    ratios = {
        title: (part[f"bagged.{field}"] / part[f"refit.{field}"]).median()
        for field, title, _ in MEASURES
    }
    lines.append(
        "- bagged / refit, median over cells: "
        + ", ".join(f"{title} {ratio:.2f}x" for title, ratio in ratios.items())
    )
    return lines


def _shipping_section(frame: pd.DataFrame) -> list[str]:
    size = frame["bagged.fold_models_mib_per_configuration"]
    seconds = frame["bagged.fold_models_transfer_seconds_per_configuration"]
    total = size * frame["trials"]
    return [
        "",
        "## Keeping every trial's fold models instead",
        "",
        "Per configuration of the final ensembles: its k fold models pickled, as "
        "a worker process would return them; times the search's trials, what the "
        "search would carry.",
        "",
        tables.markdown_table(
            ["", "median", "max"],
            [
                [
                    "MiB per configuration",
                    tables.fmt(size.median(), 2),
                    tables.fmt(size.max(), 2),
                ],
                [
                    "pickle + unpickle s per configuration",
                    tables.fmt(seconds.median(), 3),
                    tables.fmt(seconds.max(), 3),
                ],
                [
                    "MiB for all trials of a search",
                    tables.fmt(total.median(), 0),
                    tables.fmt(total.max(), 0),
                ],
            ],
        ),
    ]


def report(records: dict[str, dict[str, Any]], output: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Refit against bagged final models",
        scripts.shown(output, PROJECT),
        ok,
        failed,
        "One search per cell, its final ensemble built both ways. Losses on the "
        "held-out test split (MSE of the standardized target; error rate); CPU "
        "seconds single-threaded.",
    )
    if ok:
        frame = _frame(ok)
        setups = sorted({str(r["setup"]) for r in ok})
        lines += ["", "Setups: " + "; ".join(setups) + "."]
        lines += _task_section(frame, "regression")
        lines += _task_section(frame, "classification")
        lines += _shipping_section(frame)
    lines += tables.failed_lines(failed)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=REGRESSION + CLASSIFICATION)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--regression-method", default="segor")
    parser.add_argument("--classification-method", default="sego")
    scripts.add_run_arguments(parser, DEFAULT_OUTPUT)
    args = parser.parse_args()
    output = args.output.resolve()
    if not args.report:
        if args.repetitions < 1 or args.budget < 1:
            sys.exit("--repetitions and --budget must be at least 1")
        if args.jobs != 1:
            # Cells side by side would time and measure each other's work.
            sys.exit(
                f"--jobs must be 1 (got {args.jobs}): cells are measured one at a time"
            )
        scripts.quiet_learners()
        parameters = default_parameters()
        frames = scripts.raw_datasets(args.datasets, PROJECT)
        tasks = {
            name: dataset_task(frame, name, parameters["data_processing"])
            for name, frame in frames.items()
        }
        setup = {
            "regression": {"method": args.regression_method, "budget": args.budget},
            "classification": {
                "method": args.classification_method,
                "budget": args.budget,
            },
        }
        scripts.run_grid(
            build_cells(
                args.datasets,
                tasks,
                args.repetitions,
                int(parameters["benchmark"]["seed"]),
                setup,
            ),
            run_cell,
            CellLines(output),
            PROJECT,
            frames=frames,
            arguments=(parameters,),
            jobs=args.jobs,
            stamp=scripts.provenance(PACKAGES, PROJECT),
        )
    records = CellLines(output).records()
    tables.write_report(report(records, output), output.with_suffix(".md"))


if __name__ == "__main__":
    main()
