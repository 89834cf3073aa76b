"""The pools (search results) runs log, and finding one for a selection pipeline.

A search's pool is logged as the folder `pools/<method>_search_result/` (the
data-only format of core.result_files: result.json and arrays.npz) and the run
is tagged `pool.<method>_search_result`; a selection pipeline (posthoc) names
the pool it reads by method (the latest finished run's), by run, or as a local
result folder (`file:<path>`). A pool is read with core.result_files alone,
which never unpickles: a pool an earlier version logged as a pickle
(`pools/<name>.pkl`) is refused, since whoever can write a run's artifacts
would choose the code that unpickling it runs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import mlflow
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from ensemble_bo.core.methods import SAVED_POOL_SELECTIONS
from ensemble_bo.core.result_files import ResultFileError, read_result, write_result
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.tracking.store import first_line
from ensemble_bo.validation import FILE_PREFIX, RUNS_PREFIX

# The pools (search results) a run logs, and the tags that name them.
POOLS = "pools"
POOL_TAG_PREFIX = "pool."
# What an earlier version logged a pool as; never read from the tracking store.
PICKLE_SUFFIX = ".pkl"


def log_result(result: EnsembleSearchResult, folder: str, name: str) -> str:
    """`result` as the active run's artifact folder <folder>/<name>/ (the
    files of core.result_files); its artifact path."""
    with tempfile.TemporaryDirectory() as directory:
        local = Path(directory) / name
        write_result(result, local)
        mlflow.log_artifacts(str(local), artifact_path=f"{folder}/{name}")
    return f"{folder}/{name}"


def log_pool(name: str, result: EnsembleSearchResult) -> None:
    """A search result as pools/<name>/, and the tag `posthoc_source=<method>`
    looks up: the latest run tagged pool.<name>."""
    mlflow.set_tag(f"{POOL_TAG_PREFIX}{name}", log_result(result, POOLS, name))


# On a run that selected from a saved pool: which run's pool (and which file).
POOL_SOURCE_TAG = "pool_source"


class PoolNotFound(LookupError):
    """The pool a selection pipeline names is not in the tracking store."""


def latest_finished_run(
    client: MlflowClient, experiment_id: str, *conditions: str
) -> Run | None:
    """The experiment's latest FINISHED run that meets the filter conditions."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=" and ".join(["attributes.status = 'FINISHED'", *conditions]),
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def find_pool(source: str, client: MlflowClient, experiment_id: str) -> tuple[str, str]:
    """(run id, artifact path) of the pool `source` names.

    `source`: a method's name, for the pool of the latest FINISHED run of the
    experiment that logged one; `runs:/<run id>`, for that run's pool (the only
    one it logged); or `runs:/<run id>/pools/<name>`. A pool logged as a pickle
    is refused (PoolNotFound), as is a path out of the run's artifacts.
    """
    run_id, path = _pool_artifact(source, client, experiment_id)
    parts = PurePosixPath(path).parts
    if PurePosixPath(path).is_absolute() or ".." in parts or not parts:
        raise PoolNotFound(
            f"run {run_id} names its pool {path!r}, which is not a path inside "
            "its artifacts"
        )
    if path.endswith(PICKLE_SUFFIX):
        raise PoolNotFound(
            f"run {run_id} logged its pool as a pickle ({path}), which is never "
            "loaded from the tracking store: unpickling runs whatever code the "
            "file's author put in it, and anyone who can write the run's "
            "artifacts can be that author. Run the search again for a pool in "
            "the data-only format, or, if you trust that file, download it "
            f"(mlflow artifacts download -u {RUNS_PREFIX}{run_id}/{path}) and "
            "convert it: ensemble-bo convert-pool <file> --trust-pickle, then "
            f"--params posthoc_source={FILE_PREFIX}<the folder it writes>"
        )
    return run_id, path


def _pool_artifact(
    source: str, client: MlflowClient, experiment_id: str
) -> tuple[str, str]:
    """(run id, artifact path) `source` names, as find_pool reads it."""
    if source.startswith(RUNS_PREFIX):
        run_id, _, path = source.removeprefix(RUNS_PREFIX).partition("/")
        try:
            run = client.get_run(run_id)
        except Exception as error:  # noqa: BLE001 - missing id or unreachable store
            raise PoolNotFound(
                f"no MLflow run {run_id!r} in the tracking store ({first_line(error)})"
            ) from None
        if path:
            return run_id, path
        pools = sorted(
            value
            for name, value in run.data.tags.items()
            if name.startswith(POOL_TAG_PREFIX)
        )
        if len(pools) != 1:
            raise PoolNotFound(
                f"run {run_id} logged {len(pools) or 'no'} pools ({pools}): name one "
                f"as {RUNS_PREFIX}{run_id}/{POOLS}/<method>_search_result"
                if pools
                else f"run {run_id} logged no pool (no {POOLS}/ artifact): choose "
                "a run of a search pipeline"
            )
        return run_id, pools[0]
    tag = f"{POOL_TAG_PREFIX}{source}_search_result"
    run = latest_finished_run(client, experiment_id, f"tags.`{tag}` != ''")
    if run is None:
        raise PoolNotFound(
            f"no finished run in this experiment saved a `{source}` pool: run "
            f"`kedro run --pipelines={source}` first (with the same dataset, seed "
            "and data_processing parameters), or name a run's pool with "
            f"posthoc_source={RUNS_PREFIX}<run id>"
        )
    return run.info.run_id, run.data.tags[tag]


def load_pool(source: str) -> EnsembleSearchResult:
    """The pool `source` names: a local result folder (`file:<path>`), or one
    find_pool finds in the active run's store, downloaded; read as data only
    (core.result_files). The active run is tagged with where it came from."""
    run = mlflow.active_run()
    if run is None:
        raise RuntimeError(f"the pool {source!r} is read during an MLflow run")
    if source.startswith(FILE_PREFIX):
        folder = Path(source.removeprefix(FILE_PREFIX)).resolve()
        pool = read_result(folder)
        mlflow.set_tag(POOL_SOURCE_TAG, f"{FILE_PREFIX}{folder}")
        return pool
    client = MlflowClient()
    run_id, path = find_pool(source, client, run.info.experiment_id)
    with tempfile.TemporaryDirectory() as directory:
        local = client.download_artifacts(run_id, path, directory)
        try:
            pool = read_result(Path(local), f"the pool {path} of run {run_id}")
        except ResultFileError as error:
            raise ResultFileError(
                f"{error}. Run the search again, or name another run's pool"
            ) from None
    mlflow.set_tag(POOL_SOURCE_TAG, f"{RUNS_PREFIX}{run_id}/{path}")
    return pool


def check_pool_sources(
    pipelines: str | list[str] | None,
    parameters: Mapping[str, Any],
    client: MlflowClient,
    experiment_id: str,
) -> None:
    """The pool each selection pipeline of the run reads is in the store, or InvalidInput."""
    names = (
        pipelines.split(",") if isinstance(pipelines, str) else list(pipelines or ())
    )
    for selection in SAVED_POOL_SELECTIONS:
        if selection.name not in names:
            continue
        parameter = f"{selection.name}_source"
        source = str(parameters.get(parameter))
        if source.startswith(FILE_PREFIX):
            continue  # a local folder, which the input checks found
        try:
            find_pool(source, client, experiment_id)
        except PoolNotFound as error:
            raise InvalidInput(f"{parameter}={source!r}: {error}") from None
