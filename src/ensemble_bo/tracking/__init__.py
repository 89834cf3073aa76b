"""The one place that talks to MLflow: a Kedro hook and what it needs.

- store: the tracking URI, the store's and artifact folder's checks, opening
  the experiment;
- liveness: process tags, and the sweep that marks runs of dead processes KILLED;
- run_tags: what a run records about how it was started (what a rerun reads);
- pools: logging a search's pool as data, finding and reading the one a
  selection pipeline reads;
- model_integrity: the logged model's files' sha256, recorded and verified;
- benchmark_runs: a benchmark cell as a nested child run;
- artifacts: node outputs logged by kind, the MLflow model, a stopped search;
- run_link: the run's calls, bounded in time, buffered while the server is away;
- run_buffer: that buffer (a local store) and its upload (`ensemble-bo upload-run`);
- hook: MlflowTrackingHook, which wires them into a `kedro run`.
"""

from ensemble_bo.tracking.hook import MlflowTrackingHook
from ensemble_bo.tracking.pools import PoolNotFound, load_pool
from ensemble_bo.tracking.store import (
    TrackingStoreError,
    display_uri,
    open_experiment,
    resolve_tracking_uri,
)

__all__ = [
    "MlflowTrackingHook",
    "PoolNotFound",
    "TrackingStoreError",
    "display_uri",
    "load_pool",
    "open_experiment",
    "resolve_tracking_uri",
]
