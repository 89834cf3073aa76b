"""The pools (search results) runs log, and finding one for a selection pipeline.

A search's pool is logged as `pools/<method>_search_result.pkl` and the run is
tagged `pool.<method>_search_result`; a selection pipeline (posthoc) names the
pool it reads by method (the latest finished run's) or by run.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from ensemble_bo.core.methods import SAVED_POOL_SELECTIONS
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.tracking.store import first_line
from ensemble_bo.validation import RUNS_PREFIX

# The pools (search results) a run logs, and the tags that name them.
POOLS = "pools"
POOL_TAG_PREFIX = "pool."


def log_pickle(data: Any, folder: str, file_name: str) -> None:
    """`data` pickled as the active run's artifact <folder>/<file_name>."""
    with tempfile.TemporaryDirectory() as directory:
        pickled = Path(directory) / file_name
        pickled.write_bytes(pickle.dumps(data))
        mlflow.log_artifact(str(pickled), artifact_path=folder)


def log_pool(name: str, result: Any) -> None:
    """A search result as pools/<name>.pkl, and the tag `posthoc_source=<method>`
    looks up: the latest run tagged pool.<name>."""
    log_pickle(result, POOLS, f"{name}.pkl")
    mlflow.set_tag(f"{POOL_TAG_PREFIX}{name}", f"{POOLS}/{name}.pkl")


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
    one it logged); or `runs:/<run id>/pools/<name>.pkl`.
    """
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
                f"as {RUNS_PREFIX}{run_id}/{POOLS}/<method>_search_result.pkl"
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


def load_pool(source: str) -> Any:
    """The pool `source` names (find_pool), downloaded from the active run's store;
    the active run is tagged with where it came from."""
    run = mlflow.active_run()
    if run is None:
        raise RuntimeError(f"the pool {source!r} is read from MLflow, during a run")
    client = MlflowClient()
    run_id, path = find_pool(source, client, run.info.experiment_id)
    with tempfile.TemporaryDirectory() as directory:
        local = client.download_artifacts(run_id, path, directory)
        pool = pickle.loads(Path(local).read_bytes())
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
        try:
            find_pool(source, client, experiment_id)
        except PoolNotFound as error:
            raise InvalidInput(f"{parameter}={source!r}: {error}") from None
