"""The MLflow UI shows our experiment's training runs.

A store with runs logged through the tracking hook, served by `mlflow ui` on
127.0.0.1, opened in headless Chromium at the address the hook logs.
"""

from __future__ import annotations

from types import SimpleNamespace

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from ensemble_bo.summary import ui_address
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
