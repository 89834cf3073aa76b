"""The tracking hook on its own, against a temporary MLflow store."""

import json
import os
import re
import socket
import subprocess
import sys
from types import SimpleNamespace

import mlflow
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from mlflow.tracking import MlflowClient

from ensemble_bo import events, settings, validation
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.result_files import read_result
from ensemble_bo.core.results import (
    EnsembleSearchResult,
    IterationRecord,
    SearchInterrupted,
)
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.tracking.artifacts import flatten, log_output
from ensemble_bo.tracking.benchmark_runs import log_benchmark_cell
from ensemble_bo.tracking.liveness import HOST_TAG, PID_TAG
from ensemble_bo.tracking.pools import PoolNotFound, check_pool_sources, find_pool
from ensemble_bo.tracking.run_tags import (
    EXTRA_TAGS_VARIABLE,
    JOURNAL_TAG,
    RESUMED_RUN_TAG,
    RESUMED_TRIALS_TAG,
    launcher_tags,
    run_name,
    run_tags,
)
from ensemble_bo.tracking.store import (
    TrackingStoreError,
    open_experiment,
    resolve_tracking_uri,
)
from ensemble_bo.validation import InputValidationHook
from tests.support import (
    PROJECT,
    hook_on_active_run,
    start_hook_run,
    start_pipeline_run,
)


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment(
        "hook", artifact_location=(tmp_path / "art").as_uri()
    )
    yield MlflowClient(uri), experiment
    if mlflow.active_run():
        mlflow.end_run()


def test_an_interrupted_search_leaves_its_models_in_the_run(store, tmp_path):
    client, experiment = store
    pool = Pool(3)
    pool.add({"max_depth": 2}, np.zeros(1), TrialResult(np.array([1.0, 2.0, 3.0]), 0.1))
    pool.add({"max_depth": 9}, np.zeros(1), TrialResult(None, 0.2, "ValueError: boom"))
    partial = EnsembleSearchResult(pool, [0], np.array([0.5, np.nan]))
    error = SearchInterrupted(partial, budget=50, cause=KeyboardInterrupt())

    with mlflow.start_run(experiment_id=experiment) as run:
        hook_on_active_run(tmp_path / "buffer").on_node_error(error)

    paths = {a.path for a in client.list_artifacts(run.info.run_id, "partial")}
    assert paths == {
        "partial/partial_trial_history.csv",
        "partial/partial_search_result",
    }
    restored = read_result(
        # into tmp_path: without dst_path MLflow leaves a folder in /tmp
        client.download_artifacts(
            run.info.run_id, "partial/partial_search_result", str(tmp_path)
        )
    )
    np.testing.assert_array_equal(restored.pool.predictions[0], [1.0, 2.0, 3.0])
    assert restored.pool.errors[1] == "ValueError: boom"
    assert client.get_run(run.info.run_id).data.metrics["iterations_completed"] == 0


def test_other_node_errors_log_nothing(store, tmp_path):
    client, experiment = store
    with mlflow.start_run(experiment_id=experiment) as run:
        hook_on_active_run(tmp_path).on_node_error(ValueError("bad dataset"))
    assert client.list_artifacts(run.info.run_id) == []


def test_parameters_are_flattened_with_dotted_names():
    nested = {
        "segor": {"search_space": {"max_depth": {"low": 1, "high": 30}}},
        "seed": 0,
    }
    assert dict(flatten(nested)) == {
        "segor.search_space.max_depth.low": 1,
        "segor.search_space.max_depth.high": 30,
        "seed": 0,
    }


def test_a_relative_sqlite_store_lives_in_the_project(tmp_path):
    assert (
        resolve_tracking_uri("sqlite:///mlflow.db", tmp_path)
        == f"sqlite:///{tmp_path / 'mlflow.db'}"
    )
    assert (
        resolve_tracking_uri("http://mlflow.internal:5000", tmp_path)
        == "http://mlflow.internal:5000"
    )


def cell_record(**changes):
    return {
        "key": "concrete__dt__segor=f-m__r0__s0__b3__abc",
        "dataset": "concrete",
        "task": "regression",
        "model": "dt",
        "method": "segor:f-m",
        "repetition": 0,
        "seed": 0,
        "budget": 3,
        "test_loss": 0.25,
        "test_metrics": {"test_mse_ensemble": 0.25, "test_mse_single_best": 0.3},
        "cv_loss": 0.2,
        "cv_loss_curve": [None, 0.4, 0.2],
        "ensemble_size": 3,
        "ensemble_members_distinct": 2,
        "ensemble_mutual_information": 0.5,
        "trials_failed": 1,
        "wall_seconds": 1.5,
        **changes,
    }


def test_a_reused_cell_with_a_child_run_gets_no_second_one(store, tmp_path):
    client, experiment = store
    record = cell_record(key="wine__dt__sego__r0__s0__b3__def")
    with mlflow.start_run(experiment_id=experiment):
        first = log_benchmark_cell(record, reused=False)
    with mlflow.start_run(experiment_id=experiment) as rerun:
        assert log_benchmark_cell(record, reused=True) == first
        assert log_benchmark_cell(record, reused=True) == first
    runs = client.search_runs(
        [experiment], "tags.`benchmark.cell` = 'wine__dt__sego__r0__s0__b3__def'"
    )
    assert [run.info.run_id for run in runs] == [first]
    tags = client.get_run(rerun.info.run_id).data.tags
    assert tags["benchmark.cells_reused"] == "2"


def test_a_benchmark_cell_becomes_a_nested_child_run(store, tmp_path):
    client, experiment = store
    with mlflow.start_run(experiment_id=experiment) as parent:
        hook = hook_on_active_run(tmp_path)
        hook._on_event(events.CellEnded(cell_record(), reused=True))
        # the parent stays the active run
        assert mlflow.active_run().info.run_id == parent.info.run_id
    (child,) = client.search_runs(
        [experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert child.info.run_name == "concrete__dt__segor=f-m__r0__s0__b3__abc"
    assert child.info.status == "FINISHED"
    assert child.data.tags["reused"] == "true"
    assert child.data.params == {
        "dataset": "concrete",
        "task": "regression",
        "model": "dt",
        "method": "segor:f-m",
        "repetition": "0",
        "seed": "0",
        "budget": "3",
    }
    metrics = child.data.metrics
    assert metrics["test_loss"] == 0.25 and metrics["test_mse_single_best"] == 0.3
    assert metrics["ensemble_members_distinct"] == 2 and metrics["trials_failed"] == 1
    curve = client.get_metric_history(child.info.run_id, "cv_loss_curve")
    # no ensemble yet at step 0: nothing logged there
    assert sorted((m.step, m.value) for m in curve) == [(1, 0.4), (2, 0.2)]
    assert client.get_run(parent.info.run_id).data.metrics == {}


def test_a_failed_benchmark_cell_is_a_failed_child_run_with_its_error(store, tmp_path):
    client, experiment = store
    failed = {
        key: value
        for key, value in cell_record(status="failed", error="ValueError: bad").items()
        if key not in ("test_loss", "test_metrics", "cv_loss")
    }
    with mlflow.start_run(experiment_id=experiment) as parent:
        hook_on_active_run(tmp_path)._on_event(events.CellEnded(failed, reused=False))
    (child,) = client.search_runs(
        [experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert child.info.status == "FAILED"
    assert child.data.tags["error"] == "ValueError: bad"


def test_published_cells_and_iterations_reach_the_subscribed_hook(store, tmp_path):
    client, experiment = store
    record = IterationRecord(
        iteration=3,
        slot=1,
        trial=3,
        status="ok",
        action="replace",
        ensemble_loss=0.25,
        best_single_loss=0.5,
        ensemble_size=4,
        acquisition_value=float("nan"),
        fit_seconds=0.1,
    )
    with mlflow.start_run(experiment_id=experiment) as parent:
        hook = hook_on_active_run(tmp_path)
        # as before_pipeline_run subscribes it
        events.subscribe(hook._on_event)
        try:
            events.publish(events.CellEnded(cell_record(), reused=False))
            events.publish_iteration(record)
        finally:
            events.unsubscribe(hook._on_event)
        events.publish_iteration(record)  # after the run: heard by nobody
    children = client.search_runs(
        [experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert [c.data.tags["reused"] for c in children] == ["false"]
    history = client.get_metric_history(parent.info.run_id, "cv_loss_ensemble")
    assert [(m.step, m.value) for m in history] == [(3, 0.25)]
    # NaN (no acquisition value yet) is left out, not logged
    assert "acquisition_value" not in client.get_run(parent.info.run_id).data.metrics


def test_partitioned_outputs_are_logged_entry_by_entry(store):
    client, experiment = store
    figure = Figure()
    FigureCanvasAgg(figure)
    figure.add_subplot().plot([1, 2])
    with mlflow.start_run(experiment_id=experiment) as run:
        log_output(
            "bench_tables", {"space/losses": pd.DataFrame({"a": [1]})}, {"as": "table"}
        )
        log_output("bench_reports", {"space/report": "# hi"}, {"as": "text"})
        log_output("bench_figures", {"space/cd": figure}, {"as": "figure"})
    paths = set()
    for folder in (
        "tables/bench_tables/space",
        "reports/bench_reports/space",
        "plots/bench_figures/space",
    ):
        paths |= {a.path for a in client.list_artifacts(run.info.run_id, folder)}
    assert paths == {
        "tables/bench_tables/space/losses.csv",
        "reports/bench_reports/space/report.md",
        "plots/bench_figures/space/cd.png",
    }


def test_tracking_imports_no_pipeline():
    code = (
        "import sys, ensemble_bo.tracking; "
        "print(sorted(m for m in sys.modules if m.startswith('ensemble_bo.pipelines')))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert completed.stdout.strip() == "[]"


def test_the_hook_tags_its_run_with_its_process_and_ends_runs_of_dead_ones(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = open_experiment(uri, "ensemble_bo")
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = client.create_run(
        experiment,
        tags={HOST_TAG: socket.gethostname(), PID_TAG: str(ended.pid)},
    ).info.run_id
    hook = start_hook_run(uri)
    try:
        run = mlflow.active_run()
        tags = client.get_run(run.info.run_id).data.tags
        assert tags[PID_TAG] == str(os.getpid())
        assert tags[HOST_TAG] == socket.gethostname()
    finally:
        hook.after_pipeline_run()
    assert client.get_run(dead).info.status == "KILLED"
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_an_unusable_store_stops_the_hook_before_a_run_is_opened(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(TrackingStoreError, match=f"http://127.0.0.1:{port}"):
        start_hook_run(f"http://127.0.0.1:{port}")
    assert mlflow.active_run() is None


def test_bad_inputs_stop_the_hook_before_the_store_is_even_opened(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(InvalidInput, match="budget"):
        start_hook_run(uri, budget=-3)
    assert mlflow.active_run() is None
    assert not (tmp_path / "mlflow.db").exists()


def test_the_projects_hooks_check_the_inputs_before_a_store_or_run_is_opened(
    tmp_path,
):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # fresh hooks of the classes settings.py registers, in its order
    hooks = [type(hook)() for hook in settings.HOOKS]
    with pytest.raises(InvalidInput, match="budget"):
        start_pipeline_run(hooks, uri, budget=-3)
    assert mlflow.active_run() is None
    assert not (tmp_path / "mlflow.db").exists()


def test_the_input_checks_get_every_parameter_and_the_pipelines(monkeypatch):
    calls = []
    monkeypatch.setattr(
        validation, "check_run_inputs", lambda *arguments: calls.append(arguments)
    )
    # a misspelled top-level key that no pipeline reads reaches the checks
    parameters = {"budget": 5, "time_budjet": 60}
    hook = InputValidationHook()
    hook.after_context_created(SimpleNamespace(project_path=str(PROJECT)))
    hook.before_pipeline_run(
        {"pipeline_names": ["segor", "posthoc"]},
        SimpleNamespace(
            load=lambda name: parameters if name == "parameters" else pytest.fail(name)
        ),
    )
    assert calls == [(["segor", "posthoc"], parameters, PROJECT)]


def test_a_resumed_search_is_a_new_run_tagged_with_the_run_it_continues(
    store, tmp_path
):
    client, experiment = store
    journal = "/project/data/07_model_output/journals/segor/abc123"

    def publish(event):
        hook_on_active_run(tmp_path)._on_event(event)

    with mlflow.start_run(experiment_id=experiment) as stopped:
        publish(events.SearchResumable(journal, recorded=0))
    client.set_terminated(stopped.info.run_id, "KILLED")
    with mlflow.start_run(experiment_id=experiment) as other:
        publish(events.SearchResumable("/elsewhere", recorded=0))
    with mlflow.start_run(experiment_id=experiment, run_name="segor-x-0") as resumed:
        publish(events.SearchResumable(journal, recorded=7))
    assert client.get_run(resumed.info.run_id).info.run_name == "segor-x-0 resumed"
    tags = client.get_run(resumed.info.run_id).data.tags
    assert tags[JOURNAL_TAG] == journal
    assert tags[RESUMED_TRIALS_TAG] == "7"
    assert tags[RESUMED_RUN_TAG] == stopped.info.run_id
    assert RESUMED_RUN_TAG not in client.get_run(other.info.run_id).data.tags


def test_a_pool_source_names_the_latest_finished_runs_pool_or_a_given_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = open_experiment(uri, "ensemble_bo")

    def logged(start, status, *methods):
        tags = {f"pool.{m}_search_result": f"pools/{m}_search_result" for m in methods}
        run = client.create_run(experiment, start_time=start, tags=tags)
        client.set_terminated(run.info.run_id, status)
        return run.info.run_id

    both = logged(1000, "FINISHED", "smbo", "segor")
    older = logged(2000, "FINISHED", "smbo")
    newer = logged(3000, "FINISHED", "smbo")
    logged(4000, "FAILED", "smbo")
    logged(5000, "FINISHED", "segor")
    none = logged(6000, "FINISHED")
    smbo_pool = "pools/smbo_search_result"
    assert find_pool("smbo", client, experiment) == (newer, smbo_pool)
    assert find_pool(f"runs:/{older}", client, experiment) == (older, smbo_pool)
    segor_pool = f"runs:/{both}/pools/segor_search_result"
    assert find_pool(segor_pool, client, experiment) == (
        both,
        "pools/segor_search_result",
    )
    for source, message in [
        (f"runs:/{both}", f"name one as runs:/{both}/pools/<method>_search_result"),
        (f"runs:/{none}", f"run {none} logged no pool"),
        ("runs:/nosuch", "no MLflow run 'nosuch'"),
        ("esmbo", "no finished run in this experiment saved a `esmbo` pool"),
    ]:
        with pytest.raises(PoolNotFound, match=re.escape(message)):
            find_pool(source, client, experiment)
    # the hook's check, before a run opens: only for a run that reads a pool
    with pytest.raises(InvalidInput, match="posthoc_source='esmbo': no finished run"):
        check_pool_sources(["posthoc"], {"posthoc_source": "esmbo"}, client, experiment)
    check_pool_sources(["segor"], {"posthoc_source": "esmbo"}, client, experiment)


def test_launcher_tags_come_from_a_json_object_or_are_refused(monkeypatch):
    monkeypatch.delenv(EXTRA_TAGS_VARIABLE, raising=False)
    assert launcher_tags() == {}
    monkeypatch.setenv(EXTRA_TAGS_VARIABLE, '{"rerun_of": "abc", "n": 3}')
    assert launcher_tags() == {"rerun_of": "abc", "n": "3"}
    for text, message in [("{oops", "is not JSON"), ("[1]", "expected a JSON object")]:
        monkeypatch.setenv(EXTRA_TAGS_VARIABLE, text)
        with pytest.raises(ValueError, match=f"{EXTRA_TAGS_VARIABLE}=.*{message}"):
            launcher_tags()


def test_a_partial_run_is_tagged_so_that_rerun_refuses_it(tmp_path):
    whole = run_tags({"run_id": "s1", "env": None}, {}, tmp_path)
    assert "kedro.partial_run" not in whole
    assert whole["kedro.session_id"] == "s1" and whole["kedro.env"] == ""
    partial = run_tags(
        {"run_id": "s2", "env": "team", "node_names": ["segor_search"]}, {}, tmp_path
    )
    assert json.loads(partial["kedro.partial_run"]) == {"node_names": ["segor_search"]}
    assert partial["kedro.env"] == "team"


def test_a_launcher_cannot_overwrite_what_the_run_records(monkeypatch):
    monkeypatch.setenv(
        EXTRA_TAGS_VARIABLE,
        '{"mlflow.source.git.commit": "fake", "git.dirty": "false", "rerun_of": "x"}',
    )
    tags = run_tags({"run_id": "s"}, {}, PROJECT)
    assert tags["rerun_of"] == "x"
    assert tags["mlflow.source.git.commit"] != "fake"
    assert len(tags["mlflow.source.git.commit"]) == 40


def test_run_names_differ_where_the_settings_do():
    parameters = {"dataset": "concrete", "seed": 0}
    assert run_name("segor", parameters, {}, {}) == "segor-concrete-0"
    overrides = {"runtime_params": {"seed": 0, "ensemble.variant": "g-h", "budget": 20}}
    assert run_name("segor", parameters, overrides, {}) == (
        "segor-concrete-0 budget=20 ensemble.variant=g-h"
    )
    nested = {"runtime_params": {"segor": {"optimizer": {"n_initial": 4}}}}
    assert run_name("segor", parameters, nested, {}) == (
        "segor-concrete-0 segor.optimizer.n_initial=4"
    )
    assert run_name("segor", parameters, {"env": "local"}, {}) == (
        "segor-concrete-0 [local]"
    )
    assert run_name("segor", parameters, {}, {"rerun_of": "1f2e3d4c5b6a"}) == (
        "segor-concrete-0 rerun of 1f2e3d4c"
    )
    long = {"runtime_params": {f"key{i}": "x" * 20 for i in range(20)}}
    assert len(run_name("segor", parameters, long, {})) == 250


def test_the_raw_frame_the_pipeline_reads_is_the_run_s_dataset_input(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    hook = start_hook_run(uri)
    try:
        run_id = mlflow.active_run().info.run_id
        frame = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv")
        hook.after_dataset_loaded("train_features", frame.drop(columns="target"))
        hook.after_dataset_loaded("raw_dataset", frame)
        hook.after_dataset_loaded("raw_dataset", frame)  # a second load: once
    finally:
        hook.after_pipeline_run()
    (logged,) = MlflowClient(uri).get_run(run_id).inputs.dataset_inputs
    assert logged.dataset.name == "concrete"
    assert logged.dataset.source.endswith('data/01_raw/concrete.csv"}')
    assert [tag.value for tag in logged.tags] == ["training"]
