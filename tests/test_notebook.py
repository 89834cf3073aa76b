"""notebooks/getting_started.ipynb runs headless, with and without MLflow runs.

The notebook is executed with nbclient in a kernel of this interpreter (the
venv's), cwd notebooks/ (it reads ../data/01_raw/), MLFLOW_TRACKING_URI pointing
at a temporary SQLite store. The stored notebook itself is never written to.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
GETTING_STARTED = NOTEBOOKS / "getting_started.ipynb"
RUN_NAME = "segor-concrete-0"
CHILD_RUN_NAME = "benchmark-cell-child"
CV_LOSSES = [0.9, 0.5, 0.4, 0.35, 0.3]


@pytest.fixture(scope="module")
def blank_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite store with its tables and no experiment, made once.

    Making the tables takes MLflow seconds; each test copies the file.
    """
    path = tmp_path_factory.mktemp("blank_store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A "python3" kernelspec that runs this interpreter, found before any other."""
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    sys.executable,
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "Python 3 (test)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    # the kernel's inline backend, so that figures come back as image/png
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return "python3"


def execute(
    nb: nbformat.NotebookNode, kernel: str, tmp_path: Path
) -> nbformat.NotebookNode:
    """Runs `nb` in notebooks/ (raises CellExecutionError on a failing cell)."""
    client = NotebookClient(
        nb,
        kernel_name=kernel,
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        client.execute()
    finally:  # the executed copy, for a look after a failure
        nbformat.write(nb, tmp_path / "executed.ipynb")
    return nb


def texts(nb: nbformat.NotebookNode) -> str:
    """Everything the code cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                parts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                parts.append(output.data.get("text/plain", ""))
                parts.append(output.data.get("text/html", ""))
    return "\n".join(parts)


def images(nb: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in nb.cells
        for output in cell.get("outputs", [])
    )


def log_run(tracking_uri: str, artifacts: Path) -> None:
    """A run as `kedro run --pipelines=segor` logs it, plus a nested child run."""
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_id = client.create_experiment(
        "ensemble_bo", artifact_location=artifacts.as_uri()
    )
    run = client.create_run(
        experiment_id, run_name=RUN_NAME, tags={"kedro.pipeline": "segor"}
    )
    run_id = run.info.run_id
    params = {"dataset": "concrete", "seed": "0", "budget": "15"}
    client.log_batch(
        run_id,
        params=[Param(key, value) for key, value in params.items()],
        metrics=[
            Metric("cv_loss_ensemble", value, 1000 + step, step)
            for step, value in enumerate(CV_LOSSES)
        ]
        + [
            Metric("test_mse_ensemble", 0.25, 2000, 0),
            Metric("test_mse_single_best", 0.31, 2000, 0),
        ],
    )
    child = client.create_run(
        experiment_id,
        run_name=CHILD_RUN_NAME,
        tags={MLFLOW_PARENT_RUN_ID: run_id},
    )
    client.set_terminated(child.info.run_id)
    client.set_terminated(run_id)


@pytest.mark.slow
def test_getting_started_runs_end_to_end(
    kernel: str, blank_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(blank_store, tmp_path / "mlflow.db")
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    log_run(tracking_uri, tmp_path / "mlartifacts")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)

    nb = execute(nbformat.read(GETTING_STARTED, as_version=4), kernel, tmp_path)

    text = texts(nb)
    for method in ("segor", "smbo"):
        match = re.search(rf"^{method}: test MSE (\S+)$", text, re.MULTILINE)
        assert match, f"no test MSE line for {method}"
        assert math.isfinite(float(match.group(1)))
    assert "segor: cv loss" in text
    assert "SEGOR: ensemble-aware GP-EI" in text  # the METHODS table
    assert RUN_NAME in text  # the runs table
    assert CHILD_RUN_NAME not in text  # child runs are left out
    assert "No runs" not in text
    assert f"latest curve: {RUN_NAME}, {len(CV_LOSSES)} iterations" in text
    assert images(nb) == 1


@pytest.mark.parametrize("store", ["missing", "empty"])
def test_mlflow_part_says_so_without_runs(
    kernel: str,
    blank_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: str,
) -> None:
    """Only the notebook's MLflow cells (tagged "mlflow"); they run on their own."""
    tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    if store == "empty":  # a store without the experiment
        shutil.copy(blank_store, tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    nb = nbformat.read(GETTING_STARTED, as_version=4)
    nb.cells = [cell for cell in nb.cells if "mlflow" in cell.metadata.get("tags", [])]
    assert any(cell.cell_type == "code" for cell in nb.cells)

    nb = execute(nb, kernel, tmp_path)

    text = texts(nb)
    assert f"No runs in experiment 'ensemble_bo' at {tracking_uri} yet" in text
    assert "nothing to plot" in text
    assert images(nb) == 0
    assert (tmp_path / "mlflow.db").exists() == (store == "empty")


def test_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(GETTING_STARTED, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
