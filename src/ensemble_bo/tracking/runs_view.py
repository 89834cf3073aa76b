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
what any of its runs measured, in KEY_METRICS' order, and keeps whatever
else the view holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

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


def _width(name: str) -> int:
    return _PIXELS_PER_CHARACTER * len(name) + _PADDING


def with_metrics(state: Mapping[str, Any], metrics: Iterable[str]) -> dict[str, Any]:
    """The table state `state` (a view's) that also shows the key metrics among
    `metrics`: each missing one appended, in KEY_METRICS' order, to the
    selected columns and their order, wide enough for its name; everything
    else in it (a user's columns, sort, widths) kept. An empty state starts
    with the dataset column."""
    state = dict(state)
    selected = list(state.get("selectedColumns") or [_DATASET_COLUMN])
    order = list(state.get("columnOrder") or selected)
    widths = dict(state.get("columnWidths") or {})
    wanted = set(metrics)
    for name in KEY_METRICS:
        column = metric_column(name)
        if name in wanted and column not in selected:
            selected.append(column)
            if column not in order:
                order.append(column)
            widths.setdefault(column, _width(name))
    return state | {
        "selectedColumns": selected,
        "columnOrder": order,
        "columnWidths": widths,
    }


def view_tag_value(state: Mapping[str, Any], created_ms: int, updated_ms: int) -> str:
    """The tag's envelope for a view of the table state `state`."""
    return json.dumps(
        {
            "name": VIEW_NAME,
            "createdAt": created_ms,
            "updatedAt": updated_ms,
            "state": json.dumps(state),
        }
    )


def read_view(tag_value: str | None) -> tuple[dict[str, Any], int] | None:
    """A view's table state and when it was created (None: no view, or one
    this project cannot read, which is then written anew)."""
    try:
        envelope = json.loads(tag_value or "")
        state = json.loads(envelope["state"])
        created = int(envelope["createdAt"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(state, dict) or not isinstance(
        state.get("selectedColumns", []), list
    ):
        return None
    return state, created


def update_runs_view(
    client: MlflowClient, experiment_id: str, run_metrics: Iterable[str]
) -> None:
    """Add the key metrics among `run_metrics` to the experiment's view
    (created on first use); nothing is written when it shows them already."""
    tag_value = client.get_experiment(experiment_id).tags.get(VIEW_TAG)
    view = read_view(tag_value)
    state, created = view if view is not None else ({}, None)
    updated = with_metrics(state, run_metrics)
    if updated == state:
        return
    now = int(time.time() * 1000)
    client.set_experiment_tag(
        experiment_id,
        VIEW_TAG,
        view_tag_value(updated, created if created is not None else now, now),
    )
