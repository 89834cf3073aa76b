"""End to end: `kedro run --pipelines=benchmark`, killed inside a cell and resumed.

A tiny grid (2 regression datasets x 2 methods x 2 repetitions, budget 8) runs
in two copies of the project, each with its own data folder (cell store, trial
journals and report) and MLflow store: once uninterrupted, and once killed
(SIGKILL to the process group) when some cells are stored and the next one has
journaled a few trials, then rerun. The resumed report must equal the
uninterrupted one byte for byte, and the cut cell must not retrain its trials.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kedro.config import OmegaConfigLoader
from mlflow.tracking import MlflowClient

from tests.support import copy_project

# End to end: real `kedro run`s (deselect locally with -m 'not slow').
pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[1]
DATASETS = ["diabetes", "concrete"]
METHODS = ["smbo", "segor:f-m"]
REPETITIONS = 2
CELLS = len(DATASETS) * len(METHODS) * REPETITIONS
CELL_METRICS = {
    "test_loss",
    "cv_loss",
    "ensemble_size",
    "ensemble_members_distinct",
    "ensemble_mutual_information",
    "trials_failed",
    "wall_seconds",
    "cv_loss_curve",
}


def make_project(root: Path) -> Path:
    """A copy of the project's conf with the tiny grid in conf/local.

    The grid goes in a conf/local parameters file rather than `--params`: the
    CLI splits `--params` on commas, so a list like [diabetes,concrete] cannot
    be written there, and `time_limit=null` does not survive the CLI either.
    conf/local replaces whole top-level keys, and is resolved on its own, so
    the method blocks written there are the base ones resolved, then changed.
    """
    copy_project(root, DATASETS)
    base = OmegaConfigLoader(
        str(root / "conf"), base_env="base", default_run_env="base"
    )["parameters"]
    local = {
        "benchmark": {
            "datasets": DATASETS,
            "models": {"regression": ["decision_tree_regressor"], "classification": []},
            "methods": METHODS,
            "repetitions": REPETITIONS,
            "budget": 8,
            "seed": 0,
            "n_jobs": 1,
        }
    }
    for name in ("smbo", "segor"):
        # no time-limit worker process per cell (seconds each), a short initial design
        local[name] = {
            **base[name],
            "time_limit": None,
            "optimizer": {**base[name]["optimizer"], "n_initial": 4},
        }
    (root / "conf" / "local" / "parameters_test_grid.yml").write_text(
        yaml.safe_dump(local)
    )
    (root / "store").mkdir()
    return root


def kedro_command(project: Path) -> dict:
    return {
        "args": [sys.executable, "-m", "kedro", "run", "--pipelines=benchmark"],
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


def run_to_completion(project: Path) -> subprocess.CompletedProcess:
    completed = subprocess.run(**kedro_command(project), timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def stored_cells(project: Path) -> list[Path]:
    return sorted((project / "data/07_model_output/benchmark_cells").glob("*.json"))


def journaled_trials(project: Path) -> dict[str, int]:
    """Cell key -> trials its search journaled so far."""
    folder = project / "data" / "07_model_output" / "journals"
    return {
        journal.name: len(list(journal.glob("trial_*.pkl")))
        for journal in folder.glob("*")
        if journal.is_dir()
    }


def report_files(project: Path) -> dict[str, bytes]:
    folder = project / "data" / "08_reporting" / "benchmark"
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("uninterrupted"))
    run_to_completion(project)
    return project


def unstored_trials(project: Path) -> int:
    """Journaled trials of the cells not stored yet."""
    stored = {p.stem for p in stored_cells(project)}
    return sum(n for key, n in journaled_trials(project).items() if key not in stored)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("resumed"))
    process = subprocess.Popen(**kedro_command(project), start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        # two cells stored, the third three trials into its search (a stored
        # cell's journal is dropped just after it is stored: not counted)
        while len(stored_cells(project)) < 2 or unstored_trials(project) < 3:
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no cell finished in time"
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    killed_with = len(stored_cells(project))
    assert 2 <= killed_with < CELLS, f"killed with {killed_with} cells stored"
    stored = {p.stem for p in stored_cells(project)}
    cut = {key: n for key, n in journaled_trials(project).items() if key not in stored}
    assert not (project / "data" / "08_reporting" / "benchmark").exists()
    run_to_completion(project)
    return project, killed_with, cut


def test_the_resumed_report_equals_the_uninterrupted_one(uninterrupted, resumed):
    project, killed_with, _ = resumed
    assert len(stored_cells(project)) == CELLS
    assert [p.name for p in stored_cells(project)] == [
        p.name for p in stored_cells(uninterrupted)
    ]
    expected, actual = report_files(uninterrupted), report_files(project)
    assert set(actual) == set(expected)
    assert {
        "reports/decision_tree_regressor/report.md",
        "tables/cells.csv",
        "tables/decision_tree_regressor/comparison.csv",
        "tables/decision_tree_regressor/test_loss.csv",
        "tables/decision_tree_regressor/convergence_mean_rank.csv",
        "figures/decision_tree_regressor/critical_difference.png",
        "figures/decision_tree_regressor/convergence.png",
    } <= set(expected)
    for name in expected:
        if name.endswith((".md", ".csv")):
            assert actual[name] == expected[name], name
    report = expected["reports/decision_tree_regressor/report.md"].decode()
    assert "| dataset | segor:f-m | smbo |" in report and "E[rank]" in report


def children_of_latest_parent(project: Path):
    client = MlflowClient(f"sqlite:///{project / 'store' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("ensemble_bo")
    runs = client.search_runs([experiment.experiment_id])
    parents = sorted(
        (r for r in runs if "mlflow.parentRunId" not in r.data.tags),
        key=lambda r: r.info.start_time,
    )
    parent = parents[-1]
    children = [
        r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    ]
    return client, parent, children


def test_the_parent_run_has_one_child_run_per_cell(uninterrupted, resumed):
    project, killed_with, cut = resumed
    assert sum(cut.values()) >= 3
    # stored cells drop their journals
    assert journaled_trials(project) == {}
    client, parent, children = children_of_latest_parent(project)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["kedro.pipeline"] == "benchmark"
    assert parent.data.params["benchmark.budget"] == "8"
    # one child run per cell ever: the cells the killed run finished keep
    # theirs, which the resumed run counts instead of logging them again
    every_child = [
        run
        for run in client.search_runs([parent.info.experiment_id])
        if "benchmark.cell" in run.data.tags
    ]
    names = sorted(child.info.run_name for child in every_child)
    assert names == [p.stem for p in stored_cells(project)]
    assert len(children) == len(names) - killed_with
    assert parent.data.tags["benchmark.cells_reused"] == str(killed_with)
    assert all(c.data.tags["reused"] == "false" for c in children)
    for child in every_child:
        assert CELL_METRICS <= set(child.data.metrics)
        # the cell cut by the kill answered its journaled trials from the journal
        assert child.data.metrics["trials_reused"] == cut.get(child.info.run_name, 0)
        assert child.data.params["budget"] == "8"
        assert child.data.params["method"] in METHODS
        curve = client.get_metric_history(child.info.run_id, "cv_loss_curve")
        assert sorted(m.step for m in curve) == list(range(8))
    # the report is in the parent run
    artifacts = {
        a.path
        for a in client.list_artifacts(
            parent.info.run_id, "reports/benchmark_reports/decision_tree_regressor"
        )
    }
    assert artifacts == {"reports/benchmark_reports/decision_tree_regressor/report.md"}
    # the same cells, the same test losses as the uninterrupted run's children
    _, _, full = children_of_latest_parent(uninterrupted)
    assert {c.info.run_name: c.data.metrics["test_loss"] for c in full} == {
        c.info.run_name: c.data.metrics["test_loss"] for c in every_child
    }
