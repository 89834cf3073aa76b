"""A benchmark cell as a nested child run of the benchmark's MLflow run."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import mlflow
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

# What a benchmark cell's child run holds: params and final metrics from its record.
CELL_PARAMS = ("dataset", "task", "model", "method", "repetition", "seed", "budget")
CELL_METRICS = (
    "test_loss",
    "cv_loss",
    "ensemble_size",
    "ensemble_members_distinct",
    "ensemble_mutual_information",  # regression
    "ensemble_disagreement",  # classification
    "trials_failed",
    "wall_seconds",
)
# A cell's child run is tagged with its key; the parent counts the cells it
# reused from the store whose child run already exists.
CELL_TAG = "benchmark.cell"
REUSED_TAG = "benchmark.cells_reused"
# MLflow's limit on metrics per log_batch call.
_METRICS_PER_BATCH = 1000


def log_benchmark_cell(record: Mapping[str, Any], reused: bool) -> str:
    """A child run of the active run for one benchmark cell; returns its id.

    Params: the cell's coordinates; metrics: its final values and all its test
    metrics; `cv_loss_curve`: the CV loss of the ensemble per iteration (stepped).
    Made with the client, so the active (parent) run stays the active run.
    A cell reused from the store that already has its child run in the
    experiment (tag `benchmark.cell`) gets no new one: one child run per cell
    ever, so that cached reruns do not flood the runs table. Its id is
    returned, and the parent counts it (`benchmark.cells_reused`).
    """
    parent = mlflow.active_run()
    if parent is None:
        raise RuntimeError("a benchmark cell is logged under an active MLflow run")
    client = MlflowClient()
    key = str(record["key"])
    if reused:
        earlier = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{CELL_TAG}` = '{key}'",
            max_results=1,
        )
        if earlier:
            counted = int(parent.data.tags.get(REUSED_TAG, "0")) + 1
            mlflow.set_tag(REUSED_TAG, str(counted))
            parent.data.tags[REUSED_TAG] = str(counted)
            return earlier[0].info.run_id
    child = client.create_run(
        parent.info.experiment_id,
        run_name=key,
        tags={
            MLFLOW_PARENT_RUN_ID: parent.info.run_id,
            MLFLOW_RUN_NAME: key,
            CELL_TAG: key,
            "reused": str(bool(reused)).lower(),
            **({"error": str(record["error"])[:5000]} if "error" in record else {}),
        },
    )
    now = int(time.time() * 1000)
    values = {name: record.get(name) for name in CELL_METRICS}
    values.update(record.get("test_metrics") or {})
    metrics = [
        Metric(name, float(value), now, 0)
        for name, value in values.items()
        if value is not None and math.isfinite(float(value))
    ]
    metrics += [
        Metric("cv_loss_curve", float(value), now, step)
        for step, value in enumerate(record.get("cv_loss_curve") or [])
        if value is not None and math.isfinite(float(value))
    ]
    params = [Param(name, str(record.get(name))) for name in CELL_PARAMS]
    run_id = child.info.run_id
    client.log_batch(run_id, params=params)
    for start in range(0, len(metrics), _METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + _METRICS_PER_BATCH])
    client.set_terminated(
        run_id, "FAILED" if record.get("status") == "failed" else "FINISHED"
    )
    return run_id
