"""Benchmark cells: what one is, the pipeline's grid of them, and one cell's run.

A cell is one run of a benchmark, named by its coordinates and its key: the
`Cell` protocol, which the cell store and the runner (ensemble_bo.benchmarking)
take. Two kinds:

- `MethodCell`, the benchmark pipeline's: one (dataset, model, method,
  repetition). Its data are prepared with the repetition's seed (the same test
  split and folds for every method), its method runs with the benchmark's budget
  on the cell's model, and the ensemble is refit and scored on the test
  split. Its key names its coordinates and hashes everything else that changes
  its result, so a store of finished cells can be reused across runs.
- `ToolCell`, the benchmark scripts': one tool (a search of ours, or another
  library's) fitted on a repetition's training part, with its setup, scored on
  the same test split as the pipeline's cells.

The evaluation protocol, for both: repetition r holds out a seeded test split
(`data_processing.test_size`, a third by default; stratified for classes), the
searches cross-validate on the rest (`n_folds`, 5 by default), and the test
loss is the MSE of the target standardized on the training part (regression)
or the error rate (classification).

Pure: no Kedro, no MLflow, no files; the methods come from the registry
(core/methods.py).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import re
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ensemble_bo.core.journal import JournalFolder
from ensemble_bo.core.methods import (
    ANY_TASK,
    METHODS,
    SHARED_PARAMS,
    method_settings,
    parse_method,
    run_method,
)
from ensemble_bo.core.preparation import (
    dataset_fingerprint,
    prepare,
    search_input,
    split_dataset,
    validate_dataset,
)
from ensemble_bo.core.refit import (
    bagging_folds,
    classification_test_metrics,
    final_fit_factor,
    refit_and_score,
    search_stack,
    test_sample_losses,
)
from ensemble_bo.core.results import interrupted_by_user
from ensemble_bo.core.row_capped import large_data_refit
from ensemble_bo.core.time_budget import effective_trial_share
from ensemble_bo.core.zoo import model_task

# Parameters every cell reads besides its method's: the final model's combiner
# and what its members are.
REFIT_PARAMS = ("voting", "final_model", "stacking")
# Characters a cell key may hold (it is a file name and an MLflow run name).
_UNSAFE_KEY_CHARACTERS = re.compile(r"[^A-Za-z0-9_.+=-]")
# Length of the parameter hash in a cell key (hex digits of sha256).
_HASH_LENGTH = 12
# The test metric each task is compared on (the protocol above).
TEST_LOSS_METRICS = {
    "regression": "test_mse_ensemble",
    "classification": "test_error_ensemble",
}


def parameter_blocks() -> tuple[str, ...]:
    """The project parameter blocks a cell may read: every method's
    (`Method.params`) but `budget`, which the benchmark sets, and the refit's."""
    names = dict.fromkeys(name for method in METHODS.values() for name in method.params)
    names.pop("budget", None)
    return (*names, *REFIT_PARAMS)


# --- settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkSettings:
    datasets: list[str]
    models: dict[str, list[str]]  # task -> models
    methods: list[str]  # method specs, `name` or `name:variant`
    repetitions: int
    budget: int
    n_jobs: int
    seed: int
    # Seconds per configuration in every cell (None: each method's own time_limit).
    time_limit: float | None = None


def _names(value: Any, name: str) -> list[str]:
    """A list of names; a string is split on whitespace (handy on the command line)."""
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, str) for item in value
    ):
        raise ValueError(f"benchmark.{name} must be a list of names, got {value!r}")
    return list(value)


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"benchmark.{name} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def _time_limit(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(
            f"benchmark.time_limit must be a positive number of seconds or null, "
            f"got {value!r}"
        )
    return float(value)


def _method_spec(spec: Any) -> str:
    """The spec stripped, its method known and its suffix allowed (the registry's rules)."""
    try:
        parse_method(spec)
    except ValueError as error:
        raise ValueError(f"benchmark.methods: {error}") from error
    return spec.strip()


def parse_settings(benchmark: Mapping[str, Any]) -> BenchmarkSettings:
    """Check `params:benchmark` and its method specs (errors name the value)."""
    models = benchmark.get("models") or {}
    if not isinstance(models, Mapping) or set(models) - ANY_TASK:
        raise ValueError(
            f"benchmark.models must map a task ({sorted(ANY_TASK)}) to a list of "
            f"models, got {models!r}"
        )
    methods = [
        _method_spec(spec) for spec in _names(benchmark.get("methods"), "methods")
    ]
    datasets = _names(benchmark.get("datasets"), "datasets")
    for name, values in (("datasets", datasets), ("methods", methods)):
        if not values:
            raise ValueError(f"benchmark.{name} is empty")
        duplicated = sorted({v for v in values if values.count(v) > 1})
        if duplicated:
            raise ValueError(f"benchmark.{name} lists {duplicated} more than once")
    n_jobs = benchmark.get("n_jobs", 1)
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        raise ValueError(f"benchmark.n_jobs must be a non-zero integer, got {n_jobs!r}")
    return BenchmarkSettings(
        datasets=datasets,
        models={
            task: _names(spaces, f"models.{task}") for task, spaces in models.items()
        },
        methods=methods,
        repetitions=_count(benchmark.get("repetitions"), "repetitions", 1),
        budget=_count(benchmark.get("budget"), "budget", 1),
        n_jobs=n_jobs,
        seed=_count(benchmark.get("seed", 0), "seed", 0),
        time_limit=_time_limit(benchmark.get("time_limit")),
    )


# --- cells ---------------------------------------------------------------------------


class Cell(Protocol):
    """One run of a benchmark, as the cell store and the runner see it."""

    @property
    def key(self) -> str:
        """Unique in its grid; the store's name for the cell's record."""

    @property
    def coordinates(self) -> dict[str, Any]:
        """What names the cell in its record, the key included (JSON values)."""

    def failed_record(self, error: BaseException) -> dict[str, Any]:
        """The record of the cell when its run raised `error`."""


@dataclass(frozen=True)
class MethodCell:
    """A pipeline cell; `settings` are the parameter blocks it reads (cell_settings)."""

    key: str
    dataset: str
    task: str
    model: str
    method: str  # the spec, e.g. "segor:f-m"
    repetition: int
    seed: int
    budget: int
    settings: dict[str, Any] = field(compare=False, hash=False)

    @property
    def coordinates(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "dataset": self.dataset,
            "task": self.task,
            "model": self.model,
            "method": self.method,
            "repetition": self.repetition,
            "seed": self.seed,
            "budget": self.budget,
        }

    def failed_record(self, error: BaseException) -> dict[str, Any]:
        """Its record (an empty curve for the report's rank curves); not stored, so
        a rerun tries the cell again."""
        return {
            **self.coordinates,
            "status": "failed",
            "error": f"{type(error).__name__}: {error}",
            "cv_loss_curve": [],
        }


def as_json(value: Any) -> Any:
    """`value` as JSON gives it back (tuples as lists), so stored and new compare."""
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class ToolCell:
    """A script cell: `tool` fitted on repetition r's training part of `dataset`.

    setup: what the tool runs with, as sorted (name, value) pairs (a store
    holding the cell's record with another setup refuses to resume it);
    time_budget: seconds of search; task: the dataset's, checked when the data
    are split; space: the model, where the tool's grid has several. The
    fields that are None are left out of the key and the record.
    """

    dataset: str
    repetition: int
    seed: int
    tool: str
    setup: tuple[tuple[str, Any], ...] = ()
    time_budget: float | None = None
    task: str | None = None
    space: str | None = None

    @property
    def key(self) -> str:
        """`dataset[/space]/r<repetition>/tool[/T<time budget>]`."""
        parts = [self.dataset, self.space, f"r{self.repetition}", self.tool]
        if self.time_budget is not None:
            parts.append(f"T{self.time_budget:g}")
        return "/".join(part for part in parts if part is not None)

    @property
    def coordinates(self) -> dict[str, Any]:
        named = {
            "key": self.key,
            "dataset": self.dataset,
            "task": self.task,
            "space": self.space,
            "repetition": self.repetition,
            "seed": self.seed,
            "tool": self.tool,
            "time_budget": self.time_budget,
            "setup": as_json(dict(self.setup)),
        }
        return {name: value for name, value in named.items() if value is not None}

    def failed_record(self, error: BaseException) -> dict[str, Any]:
        return {
            **self.coordinates,
            "status": "failed",
            "error": f"{type(error).__name__}: {error}",
        }


def repetition_seed(seed: int, repetition: int) -> int:
    """Repetition r runs with seed + r for every method: the same test split and
    folds for all, the split and folds that `kedro run
    --params dataset=D,seed=<seed + r>` gives a single method's pipeline."""
    return seed + repetition


def cell_settings(
    spec: str,
    parameters: Mapping[str, Any],
    model: str,
    budget: int,
    time_limit: float | None = None,
) -> dict[str, Any]:
    """The parameter blocks a cell reads, as `run_method` takes them.

    The blocks its method reads (`method_settings`), with the search block's
    `model` set to the cell's model, its `time_limit` set when given,
    `budget` the benchmark's, `models` and both portfolios narrowed to the cell's
    space, the method's variant applied and `parallel` serial; plus the
    refit's blocks (REFIT_PARAMS).
    """
    method, _ = parse_method(spec)
    needed = [name for name in method.params if name != "budget"]
    missing = [name for name in (*needed, *REFIT_PARAMS) if name not in parameters]
    if missing:
        raise ValueError(
            f"method {spec!r} reads params:{missing[0]}, which the benchmark node "
            f"was not given; given: {sorted(parameters)}"
        )
    search = {**parameters[method.search_params], "model": model}
    if time_limit is not None:
        search["time_limit"] = time_limit
    settings = method_settings(
        spec,
        {
            **parameters,
            method.search_params: search,
            "models": {model: parameters["models"][model]},
            **{
                key: {
                    name: configs
                    for name, configs in parameters[key].items()
                    if name == model
                }
                for key in ("portfolios", "large_data_portfolios")
            },
            "budget": budget,
        },
    )
    # Cells are what run in parallel (the benchmark's n_jobs, or the cluster of
    # its `parallel` block); a cell's search trains one trial at a time.
    settings["parallel"] = None
    return {**settings, **{name: parameters[name] for name in REFIT_PARAMS}}


def _digest(content: Any) -> str:
    text = json.dumps(content, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def cell_key(
    dataset: str,
    model: str,
    method: str,
    repetition: int,
    seed: int,
    budget: int,
    fingerprint: Mapping[str, Any],
) -> str:
    """`dataset__model__method__r0__s0__b50__<hash>`, `fingerprint` hashed."""
    readable = "__".join(
        [dataset, model, method, f"r{repetition}", f"s{seed}", f"b{budget}"]
    )
    return _UNSAFE_KEY_CHARACTERS.sub("=", readable) + "__" + _digest(fingerprint)


def cell_fingerprint(
    settings: Mapping[str, Any],
    model: str,
    data_processing: Mapping[str, Any],
    data_sha256: str,
    sampled: bool = False,
) -> dict[str, Any]:
    """What the key hashes besides its readable part: the cell's parameter blocks
    (but the shared ones: `models`, `budget`, ...), the model, its space, the
    data_processing parameters and the data's sha256; and the time budget when
    one is set, and the model's portfolio when it has one, its large-data
    portfolio when it has one and the data may be `sampled` (more rows than
    max_search_rows), the share of the time budget a trial may take where
    one applies, and `stacking` when on and the `inference` limits when set
    (left out otherwise, so the keys of cells run before they existed still
    match)."""
    time_budget = settings.get("time_budget")
    trial_share = (
        None
        if time_budget is None
        else effective_trial_share(settings.get("max_trial_share"), sampled)
    )
    portfolio = settings["portfolios"].get(model)
    large_data_portfolio = settings["large_data_portfolios"].get(model)
    return {
        "params": {
            name: block
            for name, block in settings.items()
            if name not in SHARED_PARAMS and not (name == "stacking" and not block)
        },
        # limits change the ensemble, as blocks do; absent while none is set
        **(
            {"inference": settings["inference"]}
            if any(v is not None for v in settings.get("inference", {}).values())
            else {}
        ),
        **({"time_budget": time_budget} if time_budget is not None else {}),
        **({"max_trial_share": trial_share} if trial_share is not None else {}),
        **({"portfolio": portfolio} if portfolio else {}),
        **(
            {"large_data_portfolio": large_data_portfolio}
            if large_data_portfolio and sampled
            else {}
        ),
        "space": settings["models"][model],
        "data_processing": data_processing,
        "data_sha256": data_sha256,
    }


def _check_model_spaces(
    settings: BenchmarkSettings, tasks: Mapping[str, str], models: Mapping[str, Any]
) -> None:
    for task in sorted(set(tasks.values())):
        for model in settings.models.get(task, []):
            if model not in models:
                raise ValueError(
                    f"benchmark.models.{task}: unknown model {model!r}; "
                    f"available under `models`: {sorted(models)}"
                )
            if model_task(model) != task:
                raise ValueError(
                    f"benchmark.models.{task}: {model!r} is a {model_task(model)} model"
                )


def expand_grid(
    settings: BenchmarkSettings,
    tasks: Mapping[str, str],
    data_sha256: Mapping[str, str],
    data_processing: Mapping[str, Any],
    parameters: Mapping[str, Any],
    rows: Mapping[str, int],
) -> list[MethodCell]:
    """Every cell of the grid, in grid order.

    tasks, data_sha256, rows: each dataset's task, content hash and rows;
    parameters: the project parameter blocks by name (`models`,
    `default_models`, each method's, `voting`). A method is left out where
    its `Method.tasks` do not hold the dataset's task.
    """
    _check_model_spaces(settings, tasks, parameters.get("models", {}))
    cells = []
    for dataset in settings.datasets:
        task = tasks[dataset]
        spaces = settings.models.get(task, [])
        if not spaces:
            raise ValueError(
                f"dataset {dataset!r} is a {task} task but benchmark.models.{task} "
                "lists no model"
            )
        for model in spaces:
            for spec in settings.methods:
                if task not in parse_method(spec)[0].tasks:
                    continue
                blocks = cell_settings(
                    spec, parameters, model, settings.budget, settings.time_limit
                )
                max_rows = blocks["max_search_rows"]
                fingerprint = cell_fingerprint(
                    blocks,
                    model,
                    data_processing,
                    data_sha256[dataset],
                    sampled=max_rows is not None and rows[dataset] > max_rows,
                )
                for repetition in range(settings.repetitions):
                    seed = repetition_seed(settings.seed, repetition)
                    key = cell_key(
                        dataset,
                        model,
                        spec,
                        repetition,
                        seed,
                        settings.budget,
                        fingerprint,
                    )
                    cells.append(
                        MethodCell(
                            key,
                            dataset,
                            task,
                            model,
                            spec,
                            repetition,
                            seed,
                            settings.budget,
                            blocks,
                        )
                    )
    if not cells:
        raise ValueError(
            "the benchmark grid is empty: no method in benchmark.methods applies to "
            f"the tasks of the datasets ({dict(tasks)})"
        )
    return cells


def dataset_task(
    frame: pd.DataFrame, name: str, data_processing: Mapping[str, Any]
) -> str:
    """The dataset's task as the pipelines decide it, once the table is validated."""
    return validate_dataset(
        frame,
        data_processing["target"],
        data_processing["task"],
        data_processing["test_size"],
        data_processing["n_folds"],
        name,
    )


def grid_cells(
    settings: BenchmarkSettings,
    frames: Mapping[str, pd.DataFrame],
    data_processing: Mapping[str, Any],
    parameters: Mapping[str, Any],
) -> list[MethodCell]:
    """`expand_grid` over the raw tables: each is validated (its task) and hashed."""
    tasks = {
        name: dataset_task(frame, name, data_processing)
        for name, frame in frames.items()
    }
    fingerprints = {name: dataset_fingerprint(frame) for name, frame in frames.items()}
    rows = {name: len(frame) for name, frame in frames.items()}
    return expand_grid(settings, tasks, fingerprints, data_processing, parameters, rows)


# --- running a cell ------------------------------------------------------------------


def loss_on_test_split(metrics: Mapping[str, float], task: str) -> float:
    """The cell's test loss: standardized MSE (regression) or error rate."""
    return float(metrics[TEST_LOSS_METRICS[task]])


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def run_cell(
    cell: MethodCell,
    raw: pd.DataFrame,
    data_processing: Mapping[str, Any],
    journals: JournalFolder | None = None,
) -> dict[str, Any]:
    """Prepare the data with the cell's seed, run its method, refit, score: its record.

    journals: where the cell's search journals its trials (under the cell's
    key), so a cell stopped mid-search resumes without retraining them.

    A cell that raises is a record with status
    "failed" and the error text, so the other cells go on; Ctrl-C, also as
    the stopped search it leaves, stops the grid.
    """
    start = time.perf_counter()
    try:
        record = _finished_cell(cell, raw, data_processing, journals)
    except Exception as error:  # noqa: BLE001 - one broken cell must not stop the grid
        if interrupted_by_user(error):  # Ctrl-C stops the grid, not the cell
            raise KeyboardInterrupt from error
        record = cell.failed_record(error)
    return {**record, "wall_seconds": time.perf_counter() - start}


def _finished_cell(
    cell: MethodCell,
    raw: pd.DataFrame,
    data_processing: Mapping[str, Any],
    journals: JournalFolder | None,
) -> dict[str, Any]:
    split, data = prepare(raw, cell.dataset, data_processing, cell.seed)
    journal = None if journals is None else journals.journal(cell.key)
    searched = search_input(data, cell.settings["max_search_rows"], cell.seed)
    final_model = cell.settings["final_model"]
    result = run_method(
        cell.method,
        searched,
        cell.settings,
        cell.seed,
        journal=journal,
        final_fit_factor=final_fit_factor(final_model, searched),
    )
    _, metrics, test_losses = refit_and_score(
        result,
        split.train_features,
        split.train_target,
        split.test_features,
        split.test_target,
        data.encoding,
        data.target_scaling,
        cell.settings["voting"],
        cell.seed,
        bagging_folds(final_model, data),
        search_stack(
            cell.settings["stacking"], result, searched, cell.settings["voting"]
        ),
        large_data=large_data_refit(
            cell.settings["max_search_rows"],
            split.train_target,
            cell.task == "classification",
        ),
    )
    curve = [_finite_or_none(record.ensemble_loss) for record in result.history]
    return {
        **cell.coordinates,
        "status": "ok",
        "test_loss": loss_on_test_split(metrics, cell.task),
        # For the Poisson-binomial test's per-dataset Pr(A better than B).
        "test_sample_losses": test_losses.tolist(),
        "test_metrics": {name: float(value) for name, value in metrics.items()},
        "cv_loss": curve[-1] if curve else None,
        "cv_loss_curve": curve,
        "ensemble_size": int(result.history[-1].ensemble_size)
        if result.history
        else len(result.members),
        "ensemble_members_distinct": len(result.member_weights),
        # regression: ensemble_mutual_information; classification: ensemble_disagreement
        **{name: float(value) for name, value in result.diversity().items()},
        "trials_failed": int((~result.pool.ok).sum()),
        "trials_reused": result.trials_reused,
    }


# A tool's fit of a cell on the training part: the fitted model (its predict
# gives the test predictions) and what the record says about the fit.
ToolFit = Callable[[ToolCell, pd.DataFrame, pd.Series], tuple[Any, dict[str, Any]]]


def run_tool_cell(
    cell: ToolCell,
    raw: pd.DataFrame,
    data_processing: Mapping[str, Any],
    fit: ToolFit,
) -> dict[str, Any]:
    """Split with the cell's seed, fit the tool on the training part, score it.

    The split is the pipeline's of the same seed (`split_dataset`); the test
    loss is the mean of the project's per-sample test losses (`test_sample_losses`:
    the target standardized by the training part's std, or 0/1 errors); a
    classifier with predict_proba also gets its test log-loss, Brier score and
    ROC AUC (`classification_test_metrics`). A cell
    that raises is a record too: status failed, its error and traceback; Ctrl-C
    (also as the stopped search it leaves) stops the grid.
    """
    record = cell.coordinates
    start = time.perf_counter()
    try:
        split = split_dataset(raw, cell.dataset, data_processing, cell.seed)
        task = split.info["task"]
        if cell.task is not None and task != cell.task:
            raise ValueError(f"{cell.dataset} is not a {cell.task} dataset")
        model, info = fit(cell, split.train_features, split.train_target)
        std = 1.0
        if task == "regression":
            std = float(split.train_target.astype(float).std(ddof=0))
        losses = test_sample_losses(
            model, split.test_features, split.test_target, task, {"std": std}
        )
        if losses.shape != (len(split.test_target),):
            raise ValueError(
                f"{cell.tool} predicted shape {losses.shape} for "
                f"{len(split.test_target)} test rows"
            )
        if task == "classification" and hasattr(model, "predict_proba"):
            record.update(
                {
                    f"test_{metric}": value
                    for metric, value in classification_test_metrics(
                        model, split.test_features, split.test_target
                    ).items()
                }
            )
        record.update(
            status="ok",
            test_loss=float(np.mean(losses)),
            train_rows=len(split.train_target),
            test_rows=len(split.test_target),
            **info,
        )
    except Exception as error:  # noqa: BLE001 - a failed cell is a result to report
        if interrupted_by_user(error):  # Ctrl-C stops the grid, not the cell
            raise KeyboardInterrupt from error
        record.update(
            status="failed",
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(limit=-6),
        )
    record["cell_wall_seconds"] = time.perf_counter() - start
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    return record
