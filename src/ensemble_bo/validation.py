"""Checks of a `kedro run`'s inputs, before an MLflow run is opened or a model trained.

`InputValidationHook` runs `check_run_inputs(pipelines, parameters,
project_path)` before any other hook's `before_pipeline_run` (so before the
tracking hook opens the store or a run): for the pipelines about to run, it
checks the run's merged parameters (core.validation: budget, seed, the
method's blocks, every model's search space, the SEGOR variant grammar, ...),
loads their raw datasets from data/01_raw (refusing a file separated by
anything but commas) and checks them as the data_processing pipeline will
(core.preparation.validate_dataset: empty file, duplicate columns, missing
target, a target that is constant or neither numbers nor labels, a
regression target whose scale a few values set or beyond float64, features
without values or with infinities, date or identifier-like columns, folds
and classes too small...), checks that the method serves the data's task and its
model's search space fits it, and for `posthoc` that the pool it selects from
is named properly. The first problem raises `InvalidInput`, whose message
names the bad value, where it is (parameter path or file) and what to do.
Nothing is trained: a few CSV reads and parameter checks, well under a second
for the bundled datasets.

The file locations are the catalog's (conf/base/catalog.yml): raw datasets
are data/01_raw/<name>.csv; pools are read from MLflow (whether the store
has the pool is checked by the tracking hook once the store is open).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.framework.hooks import hook_impl

from ensemble_bo.core.grid import grid_cells, parse_settings
from ensemble_bo.core.methods import (
    DEFAULT_METHOD,
    METHODS,
    SAVED_POOL_SELECTIONS,
    check_parameter_names,
    method_settings,
    parse_method,
)
from ensemble_bo.core.preparation import validate_dataset
from ensemble_bo.core.validation import (
    InvalidInput,
    check_conformal,
    check_conformal_rows,
    check_data_processing,
    check_default_models,
    check_final_model,
    check_inference,
    check_seed,
    check_settings,
    check_split_conformal_above,
    check_stacking,
    check_voting,
)
from ensemble_bo.manifest import check_raw_file

RAW_DATA = Path("data") / "01_raw"
# The catalog reads raw CSVs with pandas' defaults: comma-separated. A header
# without a comma is sniffed (csv.Sniffer) among these other separators.
OTHER_DELIMITERS = ";\t|"
# How much of a file the sniffer reads: the header and the first rows.
_SNIFFED_BYTES = 64 * 1024
RUNS_PREFIX = "runs:/"  # posthoc_source=runs:/<run id> (tracking.pools.find_pool)
FILE_PREFIX = "file:"  # posthoc_source=file:<a local result folder> (core.result_files)
# Pipelines that are neither a method nor a saved-pool selection.
DATA_PROCESSING = "data_processing"
BENCHMARK = "benchmark"
DEFAULT = "__default__"


def known_pipelines() -> list[str]:
    """Every pipeline the project registers (pipeline_registry.py)."""
    return sorted(
        {
            *METHODS,
            *(selection.name for selection in SAVED_POOL_SELECTIONS),
            DATA_PROCESSING,
            BENCHMARK,
            DEFAULT,
        }
    )


def available_datasets(raw_data: Path) -> list[str]:
    """Names of the CSV files in `raw_data` (what `dataset=` may be)."""
    return sorted(path.stem for path in raw_data.glob("*.csv"))


def _shown(path: Path, project_path: Path) -> str:
    """`path` relative to the project where it is inside it, for messages."""
    try:
        return str(path.relative_to(project_path))
    except ValueError:
        return str(path)


# The catalog's raw table (data/01_raw/<dataset>.csv), what the run reads
# first and logs as its MLflow dataset input.
RAW_DATASET = "raw_dataset"


def load_raw_dataset(
    name: Any, raw_data: Path, parameter: str = "dataset", project_path: Path = Path()
) -> pd.DataFrame:
    """data/01_raw/<name>.csv as the catalog loads it, or InvalidInput saying why not.

    Refuses a name without a file (listing the available ones), a bundled file
    whose bytes differ from data/01_raw/manifest.json (ensemble_bo.manifest),
    an empty file, a file separated by something other than commas
    (`check_delimiter`), a file pandas cannot parse, and a header naming a
    column twice (pandas would silently rename the second to `name.1`).
    """
    available = available_datasets(raw_data)
    if not isinstance(name, str) or not name or os.sep in name:
        raise InvalidInput(
            f"{parameter}={name!r} is not a dataset name; available datasets (CSV "
            f"files in {_shown(raw_data, project_path)}): {available}"
        )
    path = raw_data / f"{name}.csv"
    shown = _shown(path, project_path)
    if not path.is_file():
        raise InvalidInput(
            f"{parameter}={name!r}: there is no {shown}; available datasets: "
            f"{available} (or put a CSV file with a `target` column there)"
        )
    check_raw_file(path, raw_data, shown)
    if path.stat().st_size == 0:
        raise InvalidInput(
            f"{shown} is empty; it needs a header line naming the columns (one of "
            "them the target), then one line per example"
        )
    check_delimiter(path, shown)
    try:
        header = pd.read_csv(path, header=None, nrows=1).iloc[0].tolist()
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InvalidInput(
            f"{shown} is not a readable CSV file ({type(e).__name__}: {e}); it needs "
            "a header line, then one comma-separated line per example"
        ) from None
    duplicated = sorted({str(c) for c in header if header.count(c) > 1})
    if duplicated:
        raise InvalidInput(
            f"{shown}: column name(s) {duplicated} appear more than once in the "
            "header; give every column its own name"
        )
    return frame


def check_delimiter(path: Path, shown: str) -> None:
    """InvalidInput if the file is separated by something other than commas.

    Only a header without a comma is sniffed: a comma-separated file is never
    second-guessed. One separated by `;`, a tab or `|` is refused rather than
    read, naming the separator and how to rewrite it: a guessed separator could
    split a value (`;` files often write decimal commas, "2,5").
    """
    with open(path, newline="", encoding="utf-8", errors="replace") as file:
        sample = file.read(_SNIFFED_BYTES)
    header = sample.splitlines()[0] if sample else ""
    if "," in header:
        return
    try:
        delimiter = csv.Sniffer().sniff(sample, delimiters=OTHER_DELIMITERS).delimiter
    except csv.Error:  # no consistent separator: a one-column file
        return
    raise InvalidInput(
        f"{shown} is separated by {delimiter!r}, not by commas (its header: "
        f"{header[:200]!r}); the catalog reads comma-separated files. Rewrite it "
        f"with commas, e.g. python -c \"import pandas as pd; pd.read_csv('{shown}', "
        f"sep={delimiter!r}).to_csv('{shown}', index=False)\" (add decimal=',' to "
        "read_csv if its numbers have decimal commas)"
    )


def check_raw_dataset(
    frame: pd.DataFrame,
    name: str,
    options: Mapping[str, Any],
    shown_path: str,
) -> str:
    """The data's task, by the data_processing pipeline's own checks (file named)."""
    try:
        return validate_dataset(
            frame,
            options["target"],
            options["task"],
            options["test_size"],
            options["n_folds"],
            name,
        )
    except ValueError as error:
        raise InvalidInput(f"{error} [{shown_path}]") from None


def requested_pipelines(run_params: Mapping[str, Any]) -> str | list[str] | None:
    """The pipelines a `kedro run` was asked for (Kedro's run_params; None: the
    default pipeline)."""
    return run_params.get("pipeline_names") or run_params.get("pipeline_name")


class InputValidationHook:
    """Refuses a run whose inputs are bad, before any other hook opens anything.

    `tryfirst`: pluggy calls the hooks registered last first, so without it
    the order of settings.HOOKS would decide whether the tracking hook opens
    its store and run before the inputs are checked.
    """

    def __init__(self) -> None:
        self._project_path = Path.cwd()

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path = Path(context.project_path)

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self, run_params: dict[str, Any], catalog) -> None:
        check_run_inputs(
            requested_pipelines(run_params),
            catalog.load("parameters"),
            self._project_path,
        )


def _pipeline_names(pipelines: str | Sequence[str] | None) -> list[str]:
    if pipelines is None:
        names = [DEFAULT]
    elif isinstance(pipelines, str):
        names = [name for name in pipelines.split(",") if name] or [DEFAULT]
    else:
        names = list(pipelines) or [DEFAULT]
    unknown = [name for name in names if name not in known_pipelines()]
    if unknown:
        raise InvalidInput(
            f"unknown pipeline {unknown[0]!r}; known pipelines: "
            f"{[name for name in known_pipelines() if name != DEFAULT]} "
            "(kedro run --pipelines=NAME)"
        )
    return [DEFAULT_METHOD if name == DEFAULT else name for name in names]


def single_pipeline(requested: str | Sequence[str] | None) -> str | None:
    """The one pipeline a run was asked for (the default one's method for
    none), or None for several."""
    names = _pipeline_names(requested)
    return names[0] if len(names) == 1 else None


def _require(parameters: Mapping[str, Any], *names: str) -> None:
    missing = [name for name in names if name not in parameters]
    if missing:
        raise InvalidInput(
            f"the parameters {missing} were not given; they live in "
            "conf/base/parameters*.yml"
        )


# The checks of the top-level parameters every pipeline may read, by name.
_SHARED_PARAMETER_CHECKS: dict[str, Callable[[Any], None]] = {
    "seed": check_seed,
    "voting": check_voting,
    "final_model": check_final_model,
    "stacking": check_stacking,
    "conformal": check_conformal,
    "conformal_rows": check_conformal_rows,
    "split_conformal_above": check_split_conformal_above,
    "inference": check_inference,
    "data_processing": check_data_processing,
}


def check_run_inputs(
    pipelines: str | Sequence[str] | None,
    parameters: Mapping[str, Any],
    project_path: str | os.PathLike = ".",
) -> None:
    """Check everything `kedro run --pipelines=<pipelines>` will read, or InvalidInput.

    pipelines: the pipeline name(s) being run (None or `__default__`: the
    default method); parameters: the run's merged Kedro parameters, every
    top-level key (conf/base, the env's, `--params`), as
    `catalog.load("parameters")` gives them; project_path: the Kedro
    project's root, where data/ is.
    """
    project_path = Path(project_path)
    raw_data = project_path / RAW_DATA
    names = _pipeline_names(pipelines)
    # A misspelled parameter (`--params time_budjet=60`, `segor.foo=1`) would
    # otherwise be ignored and the run go ahead on the defaults.
    check_parameter_names(parameters)
    for name, check in _SHARED_PARAMETER_CHECKS.items():
        if name in parameters:
            check(parameters[name])
    if "models" in parameters and "default_models" in parameters:
        check_default_models(parameters["default_models"], parameters["models"])
    methods = [name for name in names if name in METHODS]
    for name in methods:
        check_settings(name, parameters, parameters.get("seed"))
    selections = [s for s in SAVED_POOL_SELECTIONS if s.name in names]
    for selection in selections:
        _require(parameters, selection.params)
        selection.settings.parse(
            selection.params,
            parameters[selection.params],
            ("regression", "classification"),
        )
    task = None
    if methods or selections or DATA_PROCESSING in names:
        _require(parameters, "dataset", "data_processing")
        dataset = parameters["dataset"]
        frame = load_raw_dataset(dataset, raw_data, "dataset", project_path)
        shown = _shown(raw_data / f"{dataset}.csv", project_path)
        task = check_raw_dataset(frame, dataset, parameters["data_processing"], shown)
    for name in methods:
        method = METHODS[name]
        if task not in method.tasks:
            try:
                method.check_task(task, parameters["dataset"])
            except ValueError as error:
                raise InvalidInput(
                    f"{error}: run one of those (kedro run --pipelines=NAME), or set "
                    "data_processing.task if the task was decided wrongly"
                ) from None
        check_settings(name, parameters, parameters.get("seed"), task)
    for selection in selections:
        selection.settings.parse(
            selection.params, parameters[selection.params], (task,)
        )
        _check_saved_pool(selection.name, parameters, names)
    if BENCHMARK in names:
        _check_benchmark(parameters, raw_data, project_path)


def _check_saved_pool(
    name: str, parameters: Mapping[str, Any], pipelines: list[str]
) -> None:
    """The pool a selection pipeline reads is named properly: a method or a run.

    Whether the tracking store has it is checked by the tracking hook
    (tracking.pools.check_pool_sources), once the store is open.
    """
    parameter = f"{name}_source"
    _require(parameters, parameter)
    source = str(parameters[parameter])
    if source.startswith(RUNS_PREFIX):
        if not source.removeprefix(RUNS_PREFIX).strip("/"):
            raise InvalidInput(f"{parameter}={source!r}: name a run, runs:/<run id>")
        return
    if source.startswith(FILE_PREFIX):
        if not Path(source.removeprefix(FILE_PREFIX)).is_dir():
            raise InvalidInput(
                f"{parameter}={source!r} is not a folder: name a search result's "
                "folder (data/06_models/<method>_search_result/<version>/"
                "<method>_search_result, or one `ensemble-bo convert-pool` wrote)"
            )
        return
    if source not in METHODS:
        raise InvalidInput(
            f"{parameter}={source!r} is not a method whose pool could be saved; "
            f"methods: {sorted(METHODS)}, runs:/<run id>, or file:<result folder>"
        )
    if source in pipelines:
        raise InvalidInput(
            f"{parameter}={source!r} is also run by this run, but {name} reads a "
            f"pool an earlier run logged: run `kedro run --pipelines={source}` "
            f"first, then `kedro run --pipelines={name}`"
        )


def _check_benchmark(
    parameters: Mapping[str, Any], raw_data: Path, project_path: Path
) -> None:
    """The benchmark's settings, its datasets and every cell's parameters."""
    _require(parameters, "benchmark", "data_processing")
    try:
        settings = parse_settings(parameters["benchmark"])
    except ValueError as error:
        raise InvalidInput(f"{error} (conf/base/parameters_benchmark.yml)") from None
    for spec in settings.methods:
        try:
            # applies a `:<variant>` suffix; the cells run with the benchmark's budget
            method_settings(spec, {**parameters, "budget": settings.budget})
        except ValueError as error:
            raise InvalidInput(
                f"benchmark.methods: {spec!r}: {error} "
                "(conf/base/parameters_benchmark.yml)"
            ) from None
    options = parameters["data_processing"]
    frames = {}
    for name in settings.datasets:
        frame = load_raw_dataset(name, raw_data, "benchmark.datasets", project_path)
        check_raw_dataset(
            frame, name, options, _shown(raw_data / f"{name}.csv", project_path)
        )
        frames[name] = frame
    try:
        cells = grid_cells(settings, frames, options, parameters)
    except ValueError as error:
        raise InvalidInput(f"{error} (conf/base/parameters_benchmark.yml)") from None
    checked = set()
    for cell in cells:
        if (cell.method, cell.model, cell.task) in checked:
            continue
        checked.add((cell.method, cell.model, cell.task))
        try:
            check_settings(
                parse_method(cell.method)[0], cell.settings, cell.seed, cell.task
            )
        except InvalidInput as error:
            raise InvalidInput(
                f"benchmark cell {cell.method} x {cell.model} on {cell.dataset}: "
                f"{error}"
            ) from None
