"""The experiment's saved view "Test metrics": the runs table with the key
test metrics as columns.

MLflow's runs table shows no metric until its user picks one under "Columns",
and the browser keeps that choice. MLflow 3.17 keeps named views of the table
as experiment tags, `mlflow.sharedViewState.<id>`, whose value is a JSON
envelope {name, createdAt, updatedAt, state} with the table's state as a JSON
string (its `selectedColumns`, `columnOrder`, ...); the UI's "Views" menu
lists them and `#/experiments/<id>/runs?viewStateShareKey=<id>` opens one
(the envelope's format is MLflow's, read from its UI). Each finished run
adds the key metrics it logged to the experiment's view, so the view shows
what any of its runs measured, in KEY_METRICS' order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from mlflow.tracking import MlflowClient

VIEW_ID = "test-metrics"
VIEW_NAME = "Test metrics"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
# The metrics a data scientist compares runs by, in the order they are shown:
# the ensemble's test loss beside the single best model's, then its intervals
# or sets, its calibration, and what it costs to find and to serve.
KEY_METRICS = (
    "test_mse_ensemble",
    "test_mse_single_best",
    "test_log_loss_ensemble",
    "test_error_ensemble",
    "test_error_single_best",
    "test_interval_coverage_90",
    "test_interval_width_90",
    "test_set_coverage_90",
    "test_set_size_90",
    "search_seconds",
    "ensemble_predict_seconds_per_1000",
)
# The run attribute shown before the metrics (the runs' names always are).
_DATASET_COLUMN = "attributes.`Dataset`"
# A metric column's width: its name in the UI's 13 px font, and the sort icon.
_PIXELS_PER_CHARACTER = 7
_PADDING = 40


def metric_column(name: str) -> str:
    """The UI's key of a metric's column."""
    return f"metrics.`{name}`"


def view_tag_value(metrics: Iterable[str], created_ms: int, updated_ms: int) -> str:
    """The tag's envelope for a view showing `metrics` (the key ones, in order)."""
    shown = [name for name in KEY_METRICS if name in set(metrics)]
    columns = [_DATASET_COLUMN, *(metric_column(name) for name in shown)]
    state = {
        "selectedColumns": columns,
        # in this order, right after the dataset, each wide enough for its name
        "columnOrder": columns,
        "columnWidths": {
            metric_column(name): _PIXELS_PER_CHARACTER * len(name) + _PADDING
            for name in shown
        },
    }
    return json.dumps(
        {
            "name": VIEW_NAME,
            "createdAt": created_ms,
            "updatedAt": updated_ms,
            "state": json.dumps(state),
        }
    )


def shown_metrics(tag_value: str | None) -> tuple[set[str], int | None]:
    """The key metrics a view's tag shows, and when it was created (None: no
    view, or one this project cannot read, which is then written anew)."""
    try:
        envelope = json.loads(tag_value or "")
        columns = json.loads(envelope["state"])["selectedColumns"]
        created = int(envelope["createdAt"])
    except (ValueError, KeyError, TypeError):
        return set(), None
    names = {column.removeprefix("metrics.`").removesuffix("`") for column in columns}
    return names & set(KEY_METRICS), created


def update_runs_view(
    client: MlflowClient, experiment_id: str, run_metrics: Iterable[str]
) -> None:
    """Add the key metrics among `run_metrics` to the experiment's view
    (created on first use); nothing is written when it shows them already."""
    tag_value = client.get_experiment(experiment_id).tags.get(VIEW_TAG)
    shown, created = shown_metrics(tag_value)
    wanted = shown | (set(run_metrics) & set(KEY_METRICS))
    if wanted == shown and created is not None:
        return
    now = int(time.time() * 1000)
    client.set_experiment_tag(
        experiment_id,
        VIEW_TAG,
        view_tag_value(wanted, created if created is not None else now, now),
    )
