"""End to end: a `kedro run` killed mid-search, and again after its last trial,
resumes without retraining and ends with the uninterrupted run's ensemble;
it says it resumes, and its summary tells the trials it trained from those it
replayed, in the seconds of its own command."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.refit import refit_and_score
from tests.support import CHEAP_SEGOR, cheap_parameters, copy_project

PROJECT = Path(__file__).resolve().parents[1]
BUDGET = 10
PARAMS = (
    f"budget={BUDGET},seed=1,ensemble.size=4,segor.optimizer.n_initial=4,"
    f"segor.optimizer.gp_restarts=1,{CHEAP_SEGOR}"
)
pytestmark = pytest.mark.slow


def make_project(root: Path) -> Path:
    copy_project(root)
    (root / "store").mkdir()
    return root


def command(project: Path) -> dict:
    return {
        "args": [
            sys.executable,
            "-m",
            "kedro",
            "run",
            "--pipelines=segor",
            "--params",
            PARAMS,
        ],
        "cwd": project,
        "env": {
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{project / 'store' / 'mlflow.db'}",
            "DO_NOT_TRACK": "true",
        },
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
    }


def trial_files(project: Path) -> dict[str, int]:
    """Journaled trial files -> their modification time (ns)."""
    folder = project / "data" / "07_model_output" / "journals"
    return {
        str(f.relative_to(folder)): f.stat().st_mtime_ns
        for f in folder.rglob("trial_*.pkl")
    }


def kill_when(project: Path, trials: int) -> dict[str, int]:
    """Start the run, SIGKILL it (process group) once `trials` are journaled."""
    process = subprocess.Popen(**command(project), start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while len(trial_files(project)) < trials:
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the search did not get that far"
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    return trial_files(project)


def uninterrupted_metrics() -> dict[str, float]:
    """What an uninterrupted run computes, in process, from the same parameters."""
    parameters = cheap_parameters()  # PARAMS' model
    parameters.update(budget=BUDGET, seed=1)
    parameters["ensemble"] = {**parameters["ensemble"], "size": 4}
    parameters["segor"] = {
        **parameters["segor"],
        "optimizer": {
            **parameters["segor"]["optimizer"],
            "n_initial": 4,
            "gp_restarts": 1,
        },
    }
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv")
    split, data = prepare(raw, "concrete", parameters["data_processing"], 1)
    result = run_method("segor", data, parameters, 1)
    _, metrics, _ = refit_and_score(
        result,
        split.train_features,
        split.train_target,
        split.test_features,
        split.test_target,
        data.encoding,
        data.target_scaling,
        parameters["voting"],
        1,
    )
    return metrics


def test_a_killed_run_resumes_without_retraining_and_ends_the_same(tmp_path):
    project = make_project(tmp_path)
    # killed mid-search ...
    first = kill_when(project, 3)
    assert 3 <= len(first) < BUDGET
    # ... resumed, and killed again once every trial is journaled (the refit)
    second = kill_when(project, BUDGET)
    assert len(second) == BUDGET
    # the trials of the first run were answered from the journal, not rewritten
    assert {name: second[name] for name in first} == first

    completed = subprocess.run(**command(project), timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{project / 'store' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("ensemble_bo")
    (finished,) = client.search_runs(
        [experiment.experiment_id], "attributes.status = 'FINISHED'"
    )
    metrics = finished.data.metrics
    assert metrics["trials_reused"] == BUDGET  # nothing trained twice
    expected = uninterrupted_metrics()
    for name in (
        "test_mse_ensemble",
        "test_mse_single_best",
        "ensemble_members_distinct",
    ):
        assert metrics[name] == expected[name], name
    # a finished run drops its journal
    assert trial_files(project) == {}


def test_a_resumed_run_says_so_and_counts_its_own_trials_and_seconds(tmp_path):
    project = make_project(tmp_path)
    replayed = len(kill_when(project, 3))
    assert 3 <= replayed < BUDGET
    started = time.monotonic()
    completed = subprocess.run(**command(project), timeout=300, check=False)
    wall = time.monotonic() - started
    assert completed.returncode == 0, completed.stderr[-3000:]
    output = completed.stdout
    journal = project / "data" / "07_model_output" / "journals"
    resuming = (
        f"Resuming a stopped search: {replayed} finished trials of its journal "
        f"{journal}/"
    )
    assert resuming in output
    # said before the search's first iteration, not at its end
    assert output.index(resuming) < output.index("MLflow run segor-concrete-1")
    trained = BUDGET - replayed
    line = re.search(
        rf"  {BUDGET} trials \({trained} trained in this run, {replayed} replayed "
        r"from the journal of a stopped run\) searched in ([0-9.]+) s, refit in",
        output,
    )
    assert line, output[-2000:]
    assert 0 < float(line.group(1)) < wall
