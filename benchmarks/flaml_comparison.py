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

Both get the same raw DataFrame (text columns as they are): ours one-hot encodes
them, FLAML makes them pandas categoricals. Everything runs single-threaded.
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
# so that equal wall time means equal CPU on this shared 2-core machine.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import datetime
import importlib.util
import json
import math
import multiprocessing
import platform
import sys
import time
import traceback
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ensemble_bo.api import EnsembleSearch, default_parameters
from ensemble_bo.core.grid import repetition_seed
from ensemble_bo.core.preparation import split_dataset
from ensemble_bo.validation import load_raw_dataset

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
RAW_DATA = PROJECT / "data" / "01_raw"
DEFAULT_OUTPUT = RESULTS / "flaml_comparison.jsonl"

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


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    dataset: str
    task: str
    repetition: int
    seed: int
    tool: str
    time_budget: float
    setup: tuple[tuple[str, Any], ...]  # what the tool runs with, checked on resume

    @property
    def key(self) -> str:
        return cell_key(self.dataset, self.repetition, self.tool, self.time_budget)

    def coordinates(self) -> dict[str, Any]:
        """What names the cell in its record."""
        return {
            "key": self.key,
            "dataset": self.dataset,
            "task": self.task,
            "repetition": self.repetition,
            "seed": self.seed,
            "tool": self.tool,
            "time_budget": self.time_budget,
            "setup": dict(self.setup),
        }


def cell_key(dataset: str, repetition: int, tool: str, time_budget: float) -> str:
    return f"{dataset}/r{repetition}/{tool}/T{time_budget:g}"


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


def _test_loss(
    predictions: np.ndarray, test_target: pd.Series, task: str, train_std: float
) -> float:
    predicted, actual = np.asarray(predictions), np.asarray(test_target)
    if predicted.shape != actual.shape:
        raise ValueError(f"predictions {predicted.shape} vs targets {actual.shape}")
    if task == "classification":
        return float(np.mean(predicted != actual))
    residuals = (predicted.astype(float) - actual.astype(float)) / train_std
    return float(np.mean(np.square(residuals)))


def fit_flaml(cell: Cell, X: pd.DataFrame, y: pd.Series) -> tuple[Any, dict[str, Any]]:
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


def fit_ours(cell: Cell, X: pd.DataFrame, y: pd.Series) -> tuple[Any, dict[str, Any]]:
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


def run_cell(cell: Cell, data_processing: dict[str, Any]) -> dict[str, Any]:
    """Split, fit, score one cell, in a worker process: its JSON record."""
    # Learners' convergence chatter is not a result; PYTHONWARNINGS reaches our
    # evaluation worker processes too.
    warnings.filterwarnings("ignore")
    os.environ["PYTHONWARNINGS"] = "ignore"
    record = cell.coordinates()
    start = time.perf_counter()
    try:
        raw = load_raw_dataset(cell.dataset, RAW_DATA, project_path=PROJECT)
        # The benchmark pipeline's split of repetition r (prepare -> split_dataset).
        split = split_dataset(raw, cell.dataset, data_processing, cell.seed)
        model, info = FITTERS[cell.tool](cell, split.train_features, split.train_target)
        train_std = (
            float(split.train_target.astype(float).std(ddof=0))
            if cell.task == "regression"
            else 1.0
        )
        predictions = model.predict(split.test_features)
        record.update(
            status="ok",
            test_loss=_test_loss(predictions, split.test_target, cell.task, train_std),
            train_rows=len(split.train_target),
            test_rows=len(split.test_target),
            **info,
        )
    except Exception as error:  # noqa: BLE001 - a failed cell is a result to report
        record.update(
            status="failed",
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(limit=-6),
        )
    record["cell_wall_seconds"] = time.perf_counter() - start
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    record["versions"] = _versions()
    record["nproc"] = os.cpu_count()
    return record


# --------------------------------------------------------------------------- storage


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """The latest record of every cell key in the JSON lines file."""
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: that cell reruns
            _log(f"{path.name}:{number}: unreadable line skipped")
            continue
        records[record["key"]] = record
    return records


def append_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as stream:
        stream.write(json.dumps(record, default=_json_default) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


# --------------------------------------------------------------------------- report


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # noqa: T201 - progress


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in (
        "flaml",
        "lightgbm",
        "xgboost",
        "scikit-learn",
        "numpy",
        "pandas",
        "ensemble-bo",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p of paired losses (zero differences dropped)."""
    if len(a) == 0:
        return math.nan
    if np.all(a == b):
        return 1.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(stats.wilcoxon(a, b, alternative="two-sided").pvalue)
    except ValueError:
        return math.nan


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
        wins = float(np.sum(x < y) + 0.5 * np.sum(x == y))
        means = paired.groupby(level="dataset").mean()
        dataset_wins = float(
            np.sum(means[a] < means[b]) + 0.5 * np.sum(means[a] == means[b])
        )
        rows.append(
            [
                f"{TOOL_LABELS[a]} vs {TOOL_LABELS[b]}",
                str(len(paired)),
                f"{wins / len(paired):.2f} ({wins:g}/{len(paired)})",
                _fmt(_p_value(x, y), 3),
                f"{dataset_wins / len(means):.2f} ({dataset_wins:g}/{len(means)})",
                _fmt(_p_value(means[a].to_numpy(), means[b].to_numpy()), 3),
            ]
        )
    return rows


def _mean(values: pd.Series) -> float | None:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


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
                _fmt(_mean(fit), 1),
                _fmt(_mean(search), 1),
                _fmt(_mean(refit), 1),
                _fmt(_mean(fit - search - refit), 1),
                _fmt(_mean(part["n_trials"]), 1),
                ", ".join(f"{k} {v}" for k, v in sorted(stopped.items())),
            ]
        )
    return rows


def _setup_lines(frame: pd.DataFrame, tools: list[str]) -> list[str]:
    lines = []
    for tool in tools:
        setups = {
            json.dumps(setup, sort_keys=True)
            for setup in frame.loc[frame["tool"] == tool, "setup"]
        }
        described = "; ".join(
            ", ".join(f"{k} {v}" for k, v in json.loads(setup).items())
            for setup in sorted(setups)
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
            f"- {TOOL_LABELS[tool]}: {_fmt(_mean(part['n_families']), 2)} families "
            f"per ensemble on average (max {int(part['n_families'].max())}), "
            f"{_fmt(_mean(part['ensemble_members_distinct']), 1)} distinct members; "
            f"ensembles using each family (of {len(part)}): {mix}."
        )
    return lines


def report(records: dict[str, dict[str, Any]], path: Path) -> str:
    ok = [r for r in records.values() if r.get("status") == "ok"]
    failed = [r for r in records.values() if r.get("status") != "ok"]
    lines = [
        "# FLAML vs our ensemble searches at equal wall time",
        "",
        f"From `{_shown(path)}` ({len(ok)} finished cells, {len(failed)} failed), "
        f"reported {datetime.datetime.now().isoformat(timespec='seconds')}.",
        "Test loss: MSE of the target standardized by the training part's mean and "
        "std (regression), error rate (classification), on the project's test split "
        "of repetition r (the benchmark pipeline's split_dataset with seed "
        "repetition_seed(0, r); test_size 0.33, stratified for classes); mean "
        "over repetitions, their number in brackets. Win rate: share of paired (dataset, repetition) cells where "
        "the first tool's test loss is lower (ties count half); p: two-sided "
        "Wilcoxon signed-rank test on those pairs; per dataset: the same on the "
        "datasets' mean losses.",
    ]
    versions = {json.dumps(r.get("versions", {}), sort_keys=True) for r in ok}
    for version in sorted(versions):
        items = json.loads(version).items()
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in items) + ".")
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
                    f"{_fmt(means.at[dataset, tool])} ({int(counts.at[dataset, tool])})"
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
                _markdown(["dataset", *(TOOL_LABELS[t] for t in here)], rows),
            ]
            comparisons = _comparison_rows(part, here)
            if comparisons:
                lines += [
                    "",
                    _markdown(
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
                _markdown(
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
    if failed:
        lines += ["", "## Failed cells", ""]
        lines += [f"- {r['key']}: `{r.get('error', '?')}`" for r in failed]
    return "\n".join([*lines, ""])


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(PROJECT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- main


def _datasets_tasks(
    names: list[str], data_processing: dict[str, Any]
) -> dict[str, str]:
    """Each dataset's task, decided as the pipelines decide it (task auto)."""
    tasks = {}
    for name in names:
        raw = load_raw_dataset(name, RAW_DATA, project_path=PROJECT)
        # A split with any seed validates the table and resolves the task.
        tasks[name] = split_dataset(raw, name, data_processing, 0).info["task"]
    return tasks


def build_cells(
    args: argparse.Namespace, tasks: dict[str, str], base_seed: int
) -> list[Cell]:
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
                        Cell(
                            dataset,
                            task,
                            repetition,
                            repetition_seed(base_seed, repetition),
                            tool,
                            float(budget),
                            tuple(sorted(setup.items())),
                        )
                    )
    return cells


def _check_resumable(cells: list[Cell], stored: dict[str, dict[str, Any]]) -> None:
    """Stop if a stored cell ran with another setup (another space or budget)."""
    for cell in cells:
        record = stored.get(cell.key)
        if record and record.get("setup") not in (None, dict(cell.setup)):
            sys.exit(
                f"{cell.key} is stored with setup {record['setup']}, this run would "
                f"use {dict(cell.setup)}; choose another --output for other settings"
            )


def run_cells(cells: list[Cell], data_processing: dict, output: Path, jobs: int):
    start = time.perf_counter()
    # "spawn" processes set the thread limits on import, and serve every cell: a
    # fresh one per cell would pay the imports (5-8 s here) 600 times, and every
    # cell's own fit is timed inside it, so the imports never count. No
    # max_tasks_per_child: Python 3.11's executor hangs replacing such workers.
    with ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        futures = {pool.submit(run_cell, cell, data_processing): cell for cell in cells}
        for done, future in enumerate(as_completed(futures), 1):
            cell = futures[future]
            try:
                record = future.result()
            except Exception as error:  # noqa: BLE001 - e.g. a worker killed for memory
                record = {
                    **cell.coordinates(),
                    "status": "failed",
                    "error": f"{type(error).__name__}: {error}",
                }
            append_record(output, record)
            outcome = (
                f"test loss {record['test_loss']:.4f}, fit {record['fit_wall_seconds']:.1f} s"
                if record["status"] == "ok"
                else record["error"]
            )
            _log(
                f"[{done}/{len(cells)}] {cell.key}: {outcome} "
                f"({time.perf_counter() - start:.0f} s elapsed)"
            )


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
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells run at once (at most the cores)"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--report", action="store_true", help="only re-read the results and report"
    )
    args = parser.parse_args()
    output = args.output.resolve()
    report_path = output.with_suffix(".md")

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
        tasks = _datasets_tasks(args.datasets, data_processing)
        cells = build_cells(args, tasks, base_seed)
        stored = read_records(output)
        _check_resumable(cells, stored)
        todo = [c for c in cells if stored.get(c.key, {}).get("status") != "ok"]
        _log(
            f"{len(cells)} cells, {len(cells) - len(todo)} already in "
            f"{_shown(output)}, {len(todo)} to run with {args.jobs} job(s)"
        )
        if todo:
            run_cells(todo, data_processing, output, args.jobs)

    text = report(read_records(output), output)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(text)
    print(text)  # noqa: T201 - a benchmark prints its tables
    _log(f"wrote {_shown(report_path)}")


if __name__ == "__main__":
    main()
