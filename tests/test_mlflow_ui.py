"""The MLflow UI shows our experiment's training runs.

A store with runs logged through the tracking hook, served by `mlflow ui` on
127.0.0.1, opened in headless Chromium at the address the hook logs.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from ensemble_bo.summary import ui_address
from ensemble_bo.tracking.runs_view import (
    KEY_METRICS,
    VIEW_ID,
    VIEW_TAG,
    metric_column,
    read_view,
    update_runs_view,
    view_tag_value,
    with_metrics,
)
from ensemble_bo.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from tests.support import load_browser_pages, require_chromium, start_hook_run

browser_pages = load_browser_pages()

RUNS = (("segor", 0, 0.21), ("smbo", 3, 0.34))


def log_through_the_hook(uri, pipeline, seed, test_mse) -> None:
    hook = start_hook_run(uri, pipeline, seed=seed, budget=12)
    hook.after_node_run(
        SimpleNamespace(name=f"{pipeline}_refit_and_score"),
        {f"{pipeline}_test_metrics": {"test_mse_ensemble": test_mse}},
    )
    hook.after_pipeline_run()


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    try:
        for pipeline, seed, test_mse in RUNS:
            log_through_the_hook(uri, pipeline, seed, test_mse)
    finally:
        if mlflow.active_run():
            mlflow.end_run()
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("ensemble_bo")
    return uri, experiment


def test_the_experiment_is_marked_as_model_training(store):
    _, experiment = store
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


@pytest.mark.slow
def test_the_mlflow_ui_opens_on_the_runs_table_with_our_runs(store):
    require_chromium(browser_pages.find_chromium)
    uri, experiment = store
    names = [f"{pipeline}-concrete-{seed}" for pipeline, seed, _ in RUNS]
    with browser_pages.mlflow_ui(uri, browser_pages.free_port()) as base:
        dom = browser_pages.chromium(ui_address(experiment.experiment_id, ui=base))
    assert "Run Name" in dom  # the runs table, not the GenAI traces page
    for name in names:
        assert name in dom, f"{name} not on the page"


def shown_metrics(tag_value: str | None) -> set[str]:
    """The key metrics a view's tag shows."""
    view = read_view(tag_value)
    columns = view[0].get("selectedColumns", []) if view else []
    return {name for name in KEY_METRICS if metric_column(name) in columns}


def test_finished_runs_add_their_key_metrics_to_the_experiment_s_view(store):
    _, experiment = store
    assert shown_metrics(experiment.tags[VIEW_TAG]) == {"test_mse_ensemble"}
    _, created = read_view(experiment.tags[VIEW_TAG])
    assert created > 0


def test_the_view_lists_key_metrics_in_their_order_and_is_written_only_on_change(
    tmp_path,
):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment_id = client.create_experiment("e")
    update_runs_view(client, experiment_id, ["test_error_ensemble", "cv_loss"])
    first = client.get_experiment(experiment_id).tags[VIEW_TAG]
    update_runs_view(client, experiment_id, ["test_error_ensemble"])
    assert client.get_experiment(experiment_id).tags[VIEW_TAG] == first
    update_runs_view(
        client, experiment_id, ["test_mse_single_best", "test_mse_ensemble"]
    )
    envelope = json.loads(client.get_experiment(experiment_id).tags[VIEW_TAG])
    assert envelope["name"] == "Test metrics"
    assert envelope["createdAt"] == json.loads(first)["createdAt"]
    state = json.loads(envelope["state"])
    assert (
        state["selectedColumns"]
        == state["columnOrder"]
        == [
            "attributes.`Dataset`",
            "metrics.`test_error_ensemble`",
            "metrics.`test_mse_ensemble`",
            "metrics.`test_mse_single_best`",
        ]
    )
    assert state["columnWidths"]["metrics.`test_mse_ensemble`"] == 7 * 17 + 40
    # a tag this project cannot read is written anew
    client.set_experiment_tag(experiment_id, VIEW_TAG, "not json")
    update_runs_view(client, experiment_id, ["search_seconds"])
    assert shown_metrics(client.get_experiment(experiment_id).tags[VIEW_TAG]) == {
        "search_seconds"
    }


def test_what_a_user_saved_in_the_view_is_kept():
    saved = {
        "selectedColumns": ["params.`budget`", "metrics.`test_mse_ensemble`"],
        "columnWidths": {"params.`budget`": 300},
        "orderByKey": "metrics.`test_mse_ensemble`",
    }
    state = with_metrics(saved, ["test_mse_ensemble", "search_seconds"])
    assert state["selectedColumns"] == [
        "params.`budget`",
        "metrics.`test_mse_ensemble`",
        "metrics.`search_seconds`",
    ]
    assert state["orderByKey"] == saved["orderByKey"]
    assert state["columnWidths"]["params.`budget`"] == 300
    envelope = view_tag_value(state, 1, 2)
    assert read_view(envelope) == (state, 1)
    assert read_view('{"name": "x", "createdAt": 1, "state": "[]"}') is None


def test_a_store_that_refuses_the_view_still_ends_the_run_finished(
    tmp_path, monkeypatch, caplog
):
    def refuse(*args, **kwargs):
        raise PermissionError("read-only experiment")

    monkeypatch.setattr("ensemble_bo.tracking.hook.update_runs_view", refuse)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    hook = start_hook_run(uri, "segor", seed=0, budget=12)
    run_id = mlflow.active_run().info.run_id
    with caplog.at_level(logging.INFO):
        hook.after_pipeline_run()
    assert MlflowClient(uri).get_run(run_id).info.status == "FINISHED"
    assert "could not update the runs table's view" in caplog.text
    assert "compare runs by test metrics" not in caplog.text


@pytest.mark.slow
def test_the_view_shows_the_test_metrics_as_columns(store):
    require_chromium(browser_pages.find_chromium)
    uri, experiment = store
    with browser_pages.mlflow_ui(uri, browser_pages.free_port()) as base:
        plain = browser_pages.chromium(ui_address(experiment.experiment_id, ui=base))
        viewed = browser_pages.chromium(
            ui_address(experiment.experiment_id, ui=base, view=VIEW_ID)
        )
    # without the view the table has no metric column; with it, the metric's
    # header and both runs' values
    assert "test_mse_ensemble" not in plain
    assert "test_mse_ensemble" in viewed and "Test metrics" in viewed
    for _, _, test_mse in RUNS:
        assert f">{test_mse}<" in viewed, f"{test_mse} not in a cell"
