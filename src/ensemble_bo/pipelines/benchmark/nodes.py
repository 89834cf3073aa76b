"""Nodes of the benchmark: a grid of datasets x model spaces x methods x repetitions.

A cell is one (dataset, model space, method, repetition): the data_processing
nodes split and prepare the data with the repetition's seed, the method searches
with the benchmark's budget, the ensemble is refit and scored on the test split
(design.md s.5). Cells are stored as they finish (`BenchmarkCellStore`), so a
killed benchmark rerun with the same parameters runs only what is missing; the
report is computed from the stored records alone, sorted by key, so it does not
depend on which cells were reused or in which order they finished.

Each finished (or reused) cell is announced on the `ensemble_bo.benchmark`
logger with the record in `record.cell`; the tracking hook turns it into a
nested MLflow run. Nothing here imports MLflow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ensemble_bo.comparison_plots import critical_difference_diagram
from ensemble_bo.core.analysis import (
    average_repetitions,
    comparison_table,
    expected_ranks,
    friedman_test,
    markdown_table,
    nemenyi_critical_difference,
    pairwise_wilcoxon,
    probability_a_better_classification,
    probability_a_better_regression,
)
from ensemble_bo.core.preparation import dataset_fingerprint, validate_dataset
from ensemble_bo.core.strategies import EnsembleSearchResult, segor_variant
from ensemble_bo.core.zoo import model_task
from ensemble_bo.pipelines.data_processing.nodes import (
    make_model_input,
    validate_and_split,
)
from ensemble_bo.pipelines.model_search.nodes import (
    refit_and_score,
    search_esmbo,
    search_sego,
    search_segor,
    search_single_best,
    select_agnostic_bayes,
    select_posthoc,
    test_sample_losses,
)
from ensemble_bo.pipelines.progress import ITERATION_LOGGER
from ensemble_bo.reporting import ensemble_diversity

BENCHMARK_LOGGER = logging.getLogger("ensemble_bo.benchmark")

REGRESSION = frozenset({"regression"})
CLASSIFICATION = frozenset({"classification"})
ANY_TASK = REGRESSION | CLASSIFICATION

# Characters a cell key may hold (it is a file name and an MLflow run name).
_UNSAFE_KEY_CHARACTERS = re.compile(r"[^A-Za-z0-9_.+=-]")
# Length of the parameter hash in a cell key (hex digits of sha256).
_HASH_LENGTH = 12

# --- methods --------------------------------------------------------------------

Data = Mapping[str, Any]  # the outputs of the data_processing nodes, by name
Params = Mapping[str, Mapping[str, Any]]  # project parameter blocks, by name
Spaces = Mapping[str, Any]  # `models` and `default_models`, what every search reads


def _search_inputs(data: Data, spaces: Spaces, budget: int, seed: int) -> dict:
    """The arguments every search node shares (by name, as the pipelines wire them)."""
    return {
        "features": data["model_input_features"],
        "target": data["model_input_target"],
        "cv_folds": data["cv_folds"],
        "dataset_info": data["dataset_info"],
        "models": spaces["models"],
        "default_models": spaces["default_models"],
        "budget": budget,
        "seed": seed,
    }


def _run_single_best(name: str) -> Callable[..., EnsembleSearchResult]:
    def run(data: Data, params: Params, spaces: Spaces, budget: int, seed: int):
        return search_single_best(
            **_search_inputs(data, spaces, budget, seed), method=params[name]
        )

    return run


def _run_smbo_posthoc(
    data: Data, params: Params, spaces: Spaces, budget: int, seed: int
):
    """SMBO, then post-hoc selection over its pool (SEGOR s.2.2, `BO-post`)."""
    search = search_single_best(
        **_search_inputs(data, spaces, budget, seed), method=params["smbo"]
    )
    selected = select_posthoc(
        source=search,
        target=data["model_input_target"],
        cv_folds=data["cv_folds"],
        source_name="smbo",
        posthoc=params["posthoc"],
    )
    # The curve is the search's, with the selected ensemble as its last step (as
    # ERS shows its agnostic Bayes ensemble): the selection keeps its best prefix.
    # (With bfgs weighting the weighted ensemble's own loss is not in the curve.)
    final = float(np.nanmin([record.ensemble_loss for record in selected.history]))
    selected.history = [
        *search.history[:-1],
        replace(
            search.history[-1],
            ensemble_loss=final,
            ensemble_size=len(selected.members),
            action="add",
        ),
    ]
    return selected


def _run_esmbo(data: Data, params: Params, spaces: Spaces, budget: int, seed: int):
    return search_esmbo(
        **_search_inputs(data, spaces, budget, seed), method=params["esmbo"]
    )


def _run_ers(data: Data, params: Params, spaces: Spaces, budget: int, seed: int):
    candidates = search_single_best(
        **_search_inputs(data, spaces, budget, seed), method=params["ers"]
    )
    return select_agnostic_bayes(
        candidates=candidates,
        target=data["model_input_target"],
        cv_folds=data["cv_folds"],
        method=params["ers"],
        seed=seed,
    )


def _run_segor(data: Data, params: Params, spaces: Spaces, budget: int, seed: int):
    return search_segor(
        **_search_inputs(data, spaces, budget, seed),
        method=params["segor"],
        ensemble=params["ensemble"],
    )


def _run_sego(data: Data, params: Params, spaces: Spaces, budget: int, seed: int):
    return search_sego(
        **_search_inputs(data, spaces, budget, seed), method=params["sego"]
    )


def _segor_variant(params: dict[str, dict[str, Any]], variant: str) -> None:
    """`segor:<variant>` sets `ensemble.variant` (e.g. f-m, g-h, d-t); checked here."""
    segor_variant(variant)  # raises for an unknown sizing or loss, naming it
    params["ensemble"] = {**params["ensemble"], "variant": variant}


@dataclass(frozen=True)
class Method:
    """How the benchmark runs a method spec's name (the part before ':')."""

    run: Callable[..., EnsembleSearchResult]
    # Project parameter blocks it reads; in those with a `model`, the model is
    # set to the cell's model space.
    params: tuple[str, ...]
    tasks: frozenset[str] = ANY_TASK
    # How a suffix after ':' changes the parameters (None: no suffix allowed).
    variant: Callable[[dict[str, dict[str, Any]], str], None] | None = None


# The one table of methods the benchmark knows: `benchmark.methods` names them.
# Task rules: SEGOR is regression only (SEGOR s.3), SEGO classification only
# (SEGO s.3); the others run on both tasks.
METHODS: dict[str, Method] = {
    "smbo": Method(_run_single_best("smbo"), ("smbo",)),
    "random_search": Method(_run_single_best("random_search"), ("random_search",)),
    "smbo+posthoc": Method(_run_smbo_posthoc, ("smbo", "posthoc")),
    "esmbo": Method(_run_esmbo, ("esmbo",)),
    "ers": Method(_run_ers, ("ers",)),
    "segor": Method(
        _run_segor, ("segor", "ensemble"), REGRESSION, variant=_segor_variant
    ),
    "sego": Method(_run_sego, ("sego",), CLASSIFICATION),
}
# Parameters every cell reads besides its method's: the final model's combiner.
REFIT_PARAMS = ("voting",)


@dataclass(frozen=True)
class MethodSpec:
    """A `benchmark.methods` entry: `name` or `name:variant`."""

    spec: str
    name: str
    variant: str | None

    @property
    def method(self) -> Method:
        return METHODS[self.name]


def parse_method(spec: str) -> MethodSpec:
    """`segor:f-m` -> MethodSpec(name="segor", variant="f-m"); unknown names are refused."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"benchmark.methods: {spec!r} is not a method name")
    name, separator, variant = spec.strip().partition(":")
    if name not in METHODS:
        raise ValueError(
            f"benchmark.methods: unknown method {spec!r}; known methods: "
            f"{sorted(METHODS)} (a ':<variant>' suffix for segor, e.g. 'segor:f-m')"
        )
    if separator and not variant:
        raise ValueError(f"benchmark.methods: {spec!r} has an empty variant after ':'")
    if separator and METHODS[name].variant is None:
        raise ValueError(
            f"benchmark.methods: {spec!r}: method {name!r} takes no ':<variant>' suffix"
        )
    return MethodSpec(spec.strip(), name, variant or None)


# --- the grid --------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkSettings:
    datasets: list[str]
    models: dict[str, list[str]]  # task -> model spaces
    methods: list[MethodSpec]
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


def parse_settings(benchmark: Mapping[str, Any]) -> BenchmarkSettings:
    """Check `params:benchmark` and parse its method specs (errors name the value)."""
    models = benchmark.get("models") or {}
    if not isinstance(models, Mapping) or set(models) - ANY_TASK:
        raise ValueError(
            f"benchmark.models must map a task ({sorted(ANY_TASK)}) to a list of "
            f"model spaces, got {models!r}"
        )
    methods = [
        parse_method(spec) for spec in _names(benchmark.get("methods"), "methods")
    ]
    datasets = _names(benchmark.get("datasets"), "datasets")
    for name, values in (
        ("datasets", datasets),
        ("methods", [m.spec for m in methods]),
    ):
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


def _time_limit(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(
            f"benchmark.time_limit must be a positive number of seconds or null, "
            f"got {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class Cell:
    """One run of the grid; `params` are the parameter blocks its method reads."""

    key: str
    dataset: str
    task: str
    model: str
    method: str  # the spec, e.g. "segor:f-m"
    repetition: int
    seed: int
    budget: int
    params: dict[str, dict[str, Any]] = field(compare=False, hash=False)


def repetition_seed(seed: int, repetition: int) -> int:
    """Repetition r runs with seed + r for every method: the same test split and
    folds for all (design.md s.5), the split and folds that `kedro run
    --params dataset=D,seed=<seed + r>` gives a single method's pipeline."""
    return seed + repetition


def cell_params(
    spec: MethodSpec,
    method_params: Mapping[str, Any],
    model: str,
    time_limit: float | None = None,
) -> dict[str, dict[str, Any]]:
    """The parameter blocks a cell reads: its method's (`model` set to the cell's
    space, `time_limit` set when given, the variant applied) and the refit's
    (REFIT_PARAMS)."""
    names = (*spec.method.params, *REFIT_PARAMS)
    missing = [name for name in names if name not in method_params]
    if missing:
        raise ValueError(
            f"method {spec.spec!r} reads params:{missing[0]}, which the benchmark node "
            f"was not given; given: {sorted(method_params)}"
        )
    params = {}
    for name in names:
        block = method_params[name]
        if isinstance(block, Mapping):
            block = dict(block)
            if "model" in block:
                block["model"] = model
            if "time_limit" in block and time_limit is not None:
                block["time_limit"] = time_limit
        params[name] = block
    if spec.variant is not None:
        spec.method.variant(params, spec.variant)
    return params


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
    """`dataset__model__method__r0__s0__b50__<hash>`; the hash covers everything
    else that changes the result (the method's parameters, the model space, the
    data_processing parameters, the data's sha256)."""
    readable = "__".join(
        [dataset, model, method, f"r{repetition}", f"s{seed}", f"b{budget}"]
    )
    return _UNSAFE_KEY_CHARACTERS.sub("=", readable) + "__" + _digest(fingerprint)


def expand_grid(
    settings: BenchmarkSettings,
    tasks: Mapping[str, str],
    data_sha256: Mapping[str, str],
    data_processing: Mapping[str, Any],
    models: Mapping[str, Any],
    method_params: Mapping[str, Any],
) -> list[Cell]:
    """Every cell of the grid, in grid order; methods that do not apply to a
    dataset's task are left out (segor: regression only)."""
    for task in sorted(set(tasks.values())):
        for model in settings.models.get(task, []):
            if model not in models:
                raise ValueError(
                    f"benchmark.models.{task}: unknown model space {model!r}; "
                    f"available under `models`: {sorted(models)}"
                )
            if model_task(model) != task:
                raise ValueError(
                    f"benchmark.models.{task}: {model!r} is a {model_task(model)} "
                    "model space"
                )
    cells = []
    for dataset in settings.datasets:
        task = tasks[dataset]
        spaces = settings.models.get(task, [])
        if not spaces:
            raise ValueError(
                f"dataset {dataset!r} is a {task} task but benchmark.models.{task} "
                "lists no model space"
            )
        for model in spaces:
            for spec in settings.methods:
                if task not in spec.method.tasks:
                    continue
                params = cell_params(spec, method_params, model, settings.time_limit)
                for repetition in range(settings.repetitions):
                    seed = repetition_seed(settings.seed, repetition)
                    fingerprint = {
                        "params": params,
                        "space": models[model],
                        "data_processing": data_processing,
                        "data_sha256": data_sha256[dataset],
                    }
                    key = cell_key(
                        dataset,
                        model,
                        spec.spec,
                        repetition,
                        seed,
                        settings.budget,
                        fingerprint,
                    )
                    cells.append(
                        Cell(
                            key,
                            dataset,
                            task,
                            model,
                            spec.spec,
                            repetition,
                            seed,
                            settings.budget,
                            params,
                        )
                    )
    if not cells:
        raise ValueError(
            "the benchmark grid is empty: no method in benchmark.methods applies to "
            f"the tasks of the datasets ({dict(tasks)})"
        )
    return cells


# --- running cells ----------------------------------------------------------------

# The test metric each task is compared on (design.md s.5).
TEST_LOSS_METRICS = {
    "regression": "test_mse_ensemble",
    "classification": "test_error_ensemble",
}


def loss_on_test_split(metrics: Mapping[str, float], task: str) -> float:
    """The cell's test loss: standardized MSE (regression) or error rate."""
    return float(metrics[TEST_LOSS_METRICS[task]])


@contextmanager
def _without_iteration_records() -> Iterator[None]:
    # The per-iteration records of a cell belong to its child run (the curve in
    # its record), not to the benchmark's parent run.
    previous = ITERATION_LOGGER.disabled
    ITERATION_LOGGER.disabled = True
    try:
        yield
    finally:
        ITERATION_LOGGER.disabled = previous


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _coordinates(cell: Cell) -> dict[str, Any]:
    return {
        "key": cell.key,
        "dataset": cell.dataset,
        "task": cell.task,
        "model": cell.model,
        "method": cell.method,
        "repetition": cell.repetition,
        "seed": cell.seed,
        "budget": cell.budget,
    }


def run_cell(
    cell: Cell,
    raw_dataset: pd.DataFrame,
    data_processing: Mapping[str, Any],
    spaces: Spaces,
) -> dict[str, Any]:
    """Prepare the data with the cell's seed, search, refit, score: the cell's record.

    spaces: `models` (the search spaces) and `default_models`. A cell that raises
    is a record with status "failed" and the error text, so the other cells go on.
    """
    start = time.perf_counter()
    try:
        return _cell_record(cell, raw_dataset, data_processing, spaces)
    except Exception as error:  # noqa: BLE001 - one broken cell must not stop the grid
        return {
            **_coordinates(cell),
            "status": "failed",
            "error": f"{type(error).__name__}: {error}",
            "cv_loss_curve": [],
            "wall_seconds": time.perf_counter() - start,
        }


def _cell_record(
    cell: Cell,
    raw_dataset: pd.DataFrame,
    data_processing: Mapping[str, Any],
    spaces: Spaces,
) -> dict[str, Any]:
    start = time.perf_counter()
    split = validate_and_split(
        raw_dataset=raw_dataset,
        dataset=cell.dataset,
        options=dict(data_processing),
        seed=cell.seed,
    )
    model_input = make_model_input(
        train_features=split["train_features"],
        train_target=split["train_target"],
        dataset_info=split["dataset_info"],
        options=dict(data_processing),
        seed=cell.seed,
    )
    data = {**split, **model_input}
    method = parse_method(cell.method).method
    with _without_iteration_records():
        result = method.run(data, cell.params, spaces, cell.budget, cell.seed)
        model, metrics = refit_and_score(
            search_result=result,
            train_features=data["train_features"],
            train_target=data["train_target"],
            test_features=data["test_features"],
            test_target=data["test_target"],
            dataset_info=data["dataset_info"],
            target_scaling=data["target_scaling"],
            voting=cell.params["voting"],
            seed=cell.seed,
        )
    curve = [_finite_or_none(record.ensemble_loss) for record in result.history]
    diversity = ensemble_diversity(result)
    return {
        **_coordinates(cell),
        "status": "ok",
        "test_loss": loss_on_test_split(metrics, cell.task),
        # For the Poisson-binomial test's per-dataset Pr(A better) (design.md s.4).
        "test_sample_losses": test_sample_losses(
            model,
            data["test_features"],
            data["test_target"],
            cell.task,
            data["target_scaling"],
        ).tolist(),
        "test_metrics": {name: float(value) for name, value in metrics.items()},
        "cv_loss": curve[-1] if curve else None,
        "cv_loss_curve": curve,
        "ensemble_size": int(result.history[-1].ensemble_size)
        if result.history
        else len(result.members),
        "ensemble_members_distinct": len(result.member_weights),
        # regression: ensemble_mutual_information; classification: ensemble_disagreement
        **{name: float(value) for name, value in diversity.items()},
        "trials_failed": int((~result.pool.ok).sum()),
        "wall_seconds": time.perf_counter() - start,
    }


def announce_cell(record: Mapping[str, Any], reused: bool) -> None:
    """Log a finished cell; the tracking hook makes it a nested MLflow run."""
    if record.get("status") == "failed":
        BENCHMARK_LOGGER.warning(
            "benchmark cell %s failed (not stored; a rerun retries it): %s",
            record["key"],
            record["error"],
            extra={"cell": dict(record), "reused": reused},
        )
        return
    BENCHMARK_LOGGER.info(
        "benchmark cell %s: test loss %.4g%s",
        record["key"],
        record["test_loss"],
        " (reused from the store)" if reused else "",
        extra={"cell": dict(record), "reused": reused},
    )


def load_datasets(
    raw_datasets: Mapping[str, Callable[[], pd.DataFrame]], names: list[str]
) -> dict[str, pd.DataFrame]:
    """Load only the grid's datasets from the partitions of data/01_raw."""
    unknown = [name for name in names if name not in raw_datasets]
    if unknown:
        raise ValueError(
            f"benchmark.datasets: unknown dataset {unknown[0]!r}; available in "
            f"data/01_raw: {sorted(raw_datasets)}"
        )
    return {name: raw_datasets[name]() for name in names}


def run_benchmark(
    raw_datasets: Mapping[str, Callable[[], pd.DataFrame]],
    cell_store,
    benchmark: Mapping[str, Any],
    data_processing: Mapping[str, Any],
    models: Mapping[str, Any],
    default_models: Mapping[str, str],
    **method_params: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Run the grid's unfinished cells (in parallel), storing each as it finishes.

    method_params: the project parameter blocks the methods read (smbo, esmbo,
    ers, segor, ensemble, posthoc, sego, voting, ...). Returns every cell's
    record, sorted by key; a failed cell's record (status "failed", its error)
    is not stored, so a rerun tries it again.
    """
    settings = parse_settings(benchmark)
    frames = load_datasets(raw_datasets, settings.datasets)
    tasks = {
        name: validate_dataset(
            frame,
            data_processing["target"],
            data_processing["task"],
            data_processing["test_size"],
            data_processing["n_folds"],
            name,
        )
        for name, frame in frames.items()
    }
    fingerprints = {name: dataset_fingerprint(frame) for name, frame in frames.items()}
    cells = expand_grid(
        settings, tasks, fingerprints, data_processing, models, method_params
    )
    pending = [cell for cell in cells if not cell_store.has(cell.key)]
    pending_keys = {cell.key for cell in pending}
    BENCHMARK_LOGGER.info(
        "benchmark: %d cells, %d finished earlier, %d to run with n_jobs=%d",
        len(cells),
        len(cells) - len(pending),
        len(pending),
        settings.n_jobs,
    )
    for cell in cells:
        if cell.key not in pending_keys:
            announce_cell(cell_store.get(cell.key), reused=True)
    spaces = {"models": models, "default_models": default_models}
    finished = Parallel(n_jobs=settings.n_jobs, return_as="generator_unordered")(
        delayed(run_cell)(cell, frames[cell.dataset], data_processing, spaces)
        for cell in pending
    )
    failed = {}
    for record in finished:
        if record["status"] == "failed":
            failed[record["key"]] = record
        else:
            cell_store.put(record["key"], record)
        announce_cell(record, reused=False)
    return sorted(
        (failed.get(cell.key) or cell_store.get(cell.key) for cell in cells),
        key=lambda record: record["key"],
    )


# --- the report ------------------------------------------------------------------

_DECIMALS = 4
_CELL_COLUMNS = [
    "key",
    "dataset",
    "task",
    "model",
    "method",
    "repetition",
    "seed",
    "budget",
    "test_loss",
    "cv_loss",
    "ensemble_size",
    "ensemble_members_distinct",
    "ensemble_mutual_information",
    "ensemble_disagreement",
    "trials_failed",
    "status",
    "error",
]


def rank_curves(records: list[Mapping[str, Any]]) -> pd.DataFrame:
    """Mean rank of each method's CV loss at each iteration (cf. ESMBO Fig. 1-2,
    which rank the test risk).

    At iteration t the methods are ranked (1 = lowest CV loss, ties averaged,
    no model yet = last) within each (dataset, repetition), and the ranks are
    averaged over them. A curve shorter than the longest keeps its last value.
    Rows: iteration 1..T; columns: methods (sorted).
    """
    methods = sorted({record["method"] for record in records})
    length = max((len(record["cv_loss_curve"]) for record in records), default=0)
    ranks = []
    groups: dict[tuple[str, int], dict[str, list]] = {}
    for record in records:
        groups.setdefault((record["dataset"], record["repetition"]), {})[
            record["method"]
        ] = record["cv_loss_curve"]
    for _, curves in sorted(groups.items()):
        table = pd.DataFrame(
            {
                method: _padded(curves[method], length)
                for method in methods
                if method in curves
            },
            index=pd.RangeIndex(1, length + 1, name="iteration"),
        )
        ranks.append(table.rank(axis=1, method="average", na_option="bottom"))
    if not ranks:
        return pd.DataFrame(index=pd.RangeIndex(1, 1, name="iteration"))
    mean = pd.concat(ranks).groupby(level="iteration").mean()
    return mean.reindex(columns=methods)


def _padded(curve: list, length: int) -> list[float]:
    values = [math.nan if value is None else float(value) for value in curve]
    last = values[-1] if values else math.nan
    return values + [last] * (length - len(values))


def _convergence_figure(curves: pd.DataFrame, title: str) -> Figure:
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for method in curves.columns:
        axes.plot(curves.index, curves[method], label=method)
    axes.set_xlabel("iteration")
    axes.set_ylabel("mean rank of the CV loss (1 = best)")
    axes.set_title(title)
    if len(curves.columns):
        axes.legend()
    axes.grid(alpha=0.3)
    return figure


def _formatted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.map(lambda value: f"{value:.{_DECIMALS}f}")


def pairwise_test_probabilities(
    records: list[Mapping[str, Any]], datasets: list[str], methods: list[str]
) -> dict[tuple[str, str], list[float]] | None:
    """{(a, b): [Pr(a better than b on dataset i)]} from the cells' test outcomes.

    Per dataset and repetition, the per-sample test losses of a and b are paired
    (the methods share each repetition's test split): classification counts the
    samples only one of the two gets right, regression compares the mean loss
    difference (design.md s.4). p_i averages these over the repetitions instead
    of pooling the samples, whose test splits overlap and would make p_i
    overconfident. None when a cell lacks its per-sample losses (cells stored by
    an older version): the PB test then falls back to each dataset's winner.
    """
    if any("test_sample_losses" not in record for record in records):
        return None
    outcomes: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    for record in records:
        outcomes.setdefault((record["dataset"], record["method"]), {})[
            record["repetition"]
        ] = np.asarray(record["test_sample_losses"], dtype=float)
    classification = records[0]["task"] == "classification"

    def probability(loss_a: np.ndarray, loss_b: np.ndarray) -> float:
        if classification:
            return probability_a_better_classification(
                int(np.sum((loss_a == 0) & (loss_b == 1))),
                int(np.sum((loss_b == 0) & (loss_a == 1))),
            )
        return probability_a_better_regression(loss_a, loss_b)

    probabilities = {}
    for a in methods:
        for b in methods:
            if a < b:
                probabilities[(a, b)] = [
                    float(
                        np.mean(
                            [
                                probability(losses, outcomes[(dataset, b)][rep])
                                for rep, losses in sorted(
                                    outcomes[(dataset, a)].items()
                                )
                            ]
                        )
                    )
                    for dataset in datasets
                ]
    return probabilities


def _comparison(
    losses: pd.DataFrame,
    records: list[Mapping[str, Any]],
    complete: set[tuple[str, int]],
    notes: list[str],
):
    """The comparison table, its PB test on the test outcomes of `complete` cells."""
    kept = [r for r in records if (r["dataset"], r["repetition"]) in complete]
    probabilities = pairwise_test_probabilities(
        kept, list(losses.index), list(losses.columns)
    )
    if probabilities is None:
        notes.append(
            "The PB test used each dataset's winner: some cells were stored "
            "without their per-sample test losses."
        )
    return comparison_table(losses, pairwise_probabilities=probabilities)


def _wilcoxon_lines(wilcoxon: pd.DataFrame) -> list[str]:
    return [
        "",
        "One-tailed Wilcoxon signed-rank p-values on the per-dataset mean test "
        "losses (SEGO eq. 10; SEGOR Tables 4-5): row better than column.",
        "",
        markdown_table(_formatted(wilcoxon), index_name="method"),
    ]


def _model_space_report(
    model: str, records: list[Mapping[str, Any]]
) -> tuple[dict[str, pd.DataFrame], str, dict[str, Figure]]:
    tables: dict[str, pd.DataFrame] = {}
    figures: dict[str, Figure] = {}
    frame = pd.DataFrame(records)
    methods = sorted(frame["method"].unique())
    by_repetition = frame.pivot_table(
        index=["dataset", "repetition"],
        columns="method",
        values="test_loss",
        aggfunc="first",
    ).reindex(columns=methods)
    by_repetition.columns.name = None
    complete = by_repetition.dropna()
    losses = average_repetitions(complete) if len(complete) else complete
    notes = []
    dropped = sorted(set(by_repetition.index) - set(complete.index))
    if dropped:
        notes.append(f"Left out of the comparison (a method has no result): {dropped}.")
    tables[f"{model}/test_loss_by_repetition"] = by_repetition.reset_index()
    tables[f"{model}/test_loss"] = losses.reset_index()

    repetitions = sorted(frame["repetition"].unique())
    datasets = list(losses.index)
    lines = [
        f"# Benchmark: model space `{model}`",
        "",
        f"Datasets: {', '.join(sorted(frame['dataset'].unique()))}. "
        f"Methods: {', '.join(methods)}. Repetitions: {len(repetitions)}. "
        f"Budget: {', '.join(str(b) for b in sorted(frame['budget'].unique()))}.",
        "",
        "## Test loss, mean over repetitions",
        "",
        "Regression: MSE of the standardized target; classification: error rate "
        "(design.md s.5). Lower is better.",
        "",
        markdown_table(_formatted(losses), index_name="dataset")
        if len(losses)
        else "(no complete dataset)",
    ]
    lines += ["", "## Pairwise comparison", ""]
    if len(methods) >= 2 and len(datasets) >= 1:
        comparison = _comparison(losses, records, set(complete.index), notes)
        tables[f"{model}/comparison"] = (
            comparison.to_frame().rename_axis("method").reset_index()
        )
        lines.append(comparison.to_markdown())
        ranks = comparison.expected_rank
        wilcoxon = pairwise_wilcoxon(losses).loc[ranks.index, ranks.index]
        tables[f"{model}/wilcoxon"] = wilcoxon.rename_axis("method").reset_index()
        lines += _wilcoxon_lines(wilcoxon)
    else:
        lines.append("Skipped: needs at least 2 methods and 1 dataset.")
        ranks = expected_ranks(losses) if len(methods) >= 2 else None
    lines += ["", "## Friedman test and Nemenyi critical difference", ""]
    if len(methods) >= 3 and len(datasets) >= 2:
        friedman = friedman_test(losses)
        lines.append(
            f"Friedman chi-square = {friedman.statistic:.{_DECIMALS}f}, "
            f"p = {friedman.pvalue:.{_DECIMALS}f} "
            f"({len(methods)} methods, {len(datasets)} datasets)."
        )
    else:
        lines.append(
            "Friedman test skipped: needs at least 3 methods and 2 datasets "
            f"(have {len(methods)} and {len(datasets)})."
        )
    if ranks is not None and len(datasets) >= 1:
        difference = nemenyi_critical_difference(len(methods), len(datasets))
        lines.append(
            f"Nemenyi critical difference (alpha = 0.05): CD = "
            f"{difference:.{_DECIMALS}f}; see critical_difference.png."
        )
        figures[f"{model}/critical_difference"] = critical_difference_diagram(
            ranks, difference, title=f"{model}: mean rank of the test loss"
        )
    else:
        lines.append("Nemenyi critical difference skipped: needs at least 2 methods.")

    curves = rank_curves(records)
    tables[f"{model}/convergence_mean_rank"] = curves.reset_index()
    figures[f"{model}/convergence"] = _convergence_figure(
        curves, f"{model}: mean rank of the CV loss per iteration"
    )
    lines += [
        "",
        "## Convergence",
        "",
        "Mean rank of each method's CV loss at each iteration over datasets and "
        "repetitions (1 = best): convergence_mean_rank.csv, convergence.png. "
        "ESMBO Fig. 1-2 rank the test risk per iteration; these curves rank the "
        "CV objective each method optimizes (its `loss`, or the variant's for "
        "segor; for classification ensembles the squared margin, for single "
        "models the error rate), which is optimistic for the methods that select "
        "on it and compares like with like only where the methods share it.",
    ]
    if len(curves):
        last = curves.iloc[[-1]].rename(index=lambda i: f"iteration {i}")
        lines += ["", markdown_table(_formatted(last), index_name="")]
    if notes:
        lines += ["", *notes]
    return tables, "\n".join(lines) + "\n", figures


def _failures_note(model: str, failed: list[Mapping[str, Any]]) -> str:
    lines = [
        f"## Failed cells of `{model}` (left out; a rerun tries them again)",
        "",
        *(f"- {record['key']}: {record['error']}" for record in failed),
    ]
    return "\n".join(lines) + "\n"


def benchmark_report(
    records: list[Mapping[str, Any]],
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, Figure]]:
    """Per model space: loss tables, comparison table, tests, CD diagram, rank curves.

    Returns (CSV tables, markdown reports, figures), each keyed by
    `<model space>/<name>`, plus a `cells` table of every record. Depends only
    on the records' contents, not on their order or wall times.
    """
    records = sorted(records, key=lambda record: record["key"])
    tables: dict[str, pd.DataFrame] = {
        "cells": pd.DataFrame(records, columns=_CELL_COLUMNS)
    }
    reports: dict[str, str] = {}
    figures: dict[str, Figure] = {}
    for model in sorted({record["model"] for record in records}):
        of_model = [record for record in records if record["model"] == model]
        finished = [r for r in of_model if r.get("status", "ok") == "ok"]
        failed = [r for r in of_model if r.get("status", "ok") != "ok"]
        if not finished:
            reports[f"{model}/report"] = _failures_note(model, failed)
            continue
        space_tables, report, space_figures = _model_space_report(model, finished)
        tables.update(space_tables)
        reports[f"{model}/report"] = report + (
            "\n" + _failures_note(model, failed) if failed else ""
        )
        figures.update(space_figures)
    return tables, reports, figures
