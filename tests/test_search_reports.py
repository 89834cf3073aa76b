"""A search's reports are declared once (reporting.SEARCH_REPORTS).

From the declaration follow the report node's outputs, the catalog's files,
the MLflow artifacts, what a stopped search leaves and what a rerun compares:
a report added there alone is written, logged and compared.
"""

from fnmatch import fnmatchcase
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from mlflow.tracking import MlflowClient

from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.pipeline_registry import register_pipelines
from ensemble_bo.reporting import (
    FIGURE,
    METRICS,
    SEARCH_REPORTS,
    TABLE,
    SearchReport,
    report_dataset,
)
from ensemble_bo.rerun import is_compared
from ensemble_bo.tracking.artifacts import log_stopped_search
from ensemble_bo.validation import single_pipeline
from tests.support import hook_on_active_run, run_in_new_store

PROJECT = Path(__file__).resolve().parents[1]
# What the catalog writes for each kind
FILES = {
    TABLE: ("CSVDataset", ".csv"),
    FIGURE: ("FigureDataset", ".png"),
    METRICS: ("JSONDataset", ".json"),
}
# The artifacts a finished search's reports are logged as: the tables where
# they always were (a rerun of an older run compares against these), the
# figures at the root without the method's prefix (MLflow's compare view).
LOGGED = {
    "tables/segor_trial_history.csv",
    "tables/segor_ensemble_composition.csv",
    "convergence_plot.png",
    "diversity_heatmap.png",
    "tables/segor_leaderboard.csv",
    "cost_plot.png",
}


@pytest.fixture(scope="module")
def context():
    bootstrap_project(PROJECT)
    with KedroSession.create(project_path=PROJECT) as session:
        yield session.load_context()


@pytest.fixture
def run(tmp_path):
    with run_in_new_store(tmp_path, "reports") as active:
        yield active


def finished_search() -> EnsembleSearchResult:
    """Two trained models, both in the ensemble (no fidelity schedule)."""
    rng = np.random.default_rng(0)
    pool = Pool(30)
    for depth in (2, 5):
        pool.add(
            {"max_depth": depth}, np.zeros(1), TrialResult(rng.normal(size=30), 0.1)
        )
    return EnsembleSearchResult(pool, [0, 1], np.array([0.4, 0.5]))


def artifact_paths(run_id: str, folder: str | None = None) -> set[str]:
    """Every file the run logged (under `folder`)."""
    paths = set()
    for artifact in MlflowClient().list_artifacts(run_id, folder):
        if artifact.is_dir:
            paths |= artifact_paths(run_id, artifact.path)
        else:
            paths.add(artifact.path)
    return paths


def report_node_of(pipeline: str):
    (node,) = [
        n for n in register_pipelines()[pipeline].nodes if n.name.endswith("_report")
    ]
    return node


def log_reports_through_the_hook(
    context, result: EnsembleSearchResult, buffer: Path, method: str | None = "segor"
) -> None:
    """The segor pipeline's report node, run as Kedro runs it, its outputs
    handed to the tracking hook configured by the project's mlflow.yml, in a
    run of the pipeline `method` (None: of several)."""
    node = report_node_of("segor")
    outputs = node.run(
        {
            "segor_search_result": result,
            "search_input": SimpleNamespace(name="toy"),
            "params:segor": {"display_name": "SEGOR"},
        }
    )
    hook = hook_on_active_run(buffer)
    hook._config = dict(context.config_loader["mlflow"])
    hook._method = method
    hook.after_node_run(node, outputs)


@pytest.mark.parametrize("name", sorted(SEARCH_REPORTS))
def test_every_declared_report_is_a_file_of_its_kind_and_logged_as_it(context, name):
    kind = SEARCH_REPORTS[name].kind
    dataset = report_dataset("segor", name)
    assert dataset in report_node_of("segor").outputs
    assert report_dataset("posthoc", name) in report_node_of("posthoc").outputs
    resolved = context.catalog.get(dataset)
    dataset_type, suffix = FILES[kind]
    assert type(resolved).__name__ == dataset_type
    assert resolved._describe()["filepath"] == (
        PROJECT / "data" / "08_reporting" / f"segor_{name}{suffix}"
    )
    rules = context.config_loader["mlflow"]["log_outputs"]
    first = next(
        rule for pattern, rule in rules.items() if fnmatchcase(dataset, pattern)
    )
    assert first["as"] == kind


def test_a_search_logs_its_reports_where_it_always_did(context, run, tmp_path):
    log_reports_through_the_hook(context, finished_search(), tmp_path)
    assert artifact_paths(run.info.run_id) == LOGGED
    metrics = MlflowClient().get_run(run.info.run_id).data.metrics
    assert set(metrics) == {"ensemble_mutual_information"}
    # the tables a rerun compares: the reported ones (a benchmark's cells too)
    assert all(is_compared(path) for path in LOGGED if path.startswith("tables/"))
    assert is_compared("tables/benchmark_tables/cells.csv")
    assert not is_compared("tables/benchmark_tables/dt/test_loss.csv")


def test_a_run_of_several_pipelines_keeps_the_method_prefix_of_its_figures(
    context, run, tmp_path
):
    assert single_pipeline("segor,sego") is None
    assert single_pipeline(None) == single_pipeline("__default__") == "segor"
    assert single_pipeline(["smbo"]) == "smbo"
    log_reports_through_the_hook(context, finished_search(), tmp_path, method=None)
    figures = {path for path in artifact_paths(run.info.run_id) if "/" not in path}
    assert figures == {
        "segor_convergence_plot.png",
        "segor_diversity_heatmap.png",
        "segor_cost_plot.png",
    }


def test_a_report_added_to_the_declaration_is_written_logged_and_compared(
    context, run, monkeypatch, tmp_path
):
    monkeypatch.setitem(
        SEARCH_REPORTS,
        "member_losses",
        SearchReport(
            TABLE,
            lambda result, _: pd.DataFrame(
                {"trial": result.members, "loss": result.single_losses[result.members]}
            ),
        ),
    )
    assert "segor_member_losses#table" in report_node_of("segor").outputs
    resolved = context.catalog.get("segor_member_losses#table")
    assert resolved._describe()["filepath"].name == "segor_member_losses.csv"
    log_reports_through_the_hook(context, finished_search(), tmp_path)
    added = "tables/segor_member_losses.csv"
    assert artifact_paths(run.info.run_id) == LOGGED | {added}
    logged = pd.read_csv(MlflowClient().download_artifacts(run.info.run_id, added))
    assert logged.to_dict("list") == {"trial": [0, 1], "loss": [0.4, 0.5]}
    assert is_compared(added)


def test_a_stopped_search_logs_the_reports_declared_for_it(run, monkeypatch):
    def members_plot(result, title):
        figure = Figure()
        FigureCanvasAgg(figure)
        figure.add_subplot().bar(range(len(result.members)), 1.0)
        figure.axes[0].set_title(title)
        return figure

    monkeypatch.setitem(
        SEARCH_REPORTS,
        "members_plot",
        SearchReport(FIGURE, members_plot, of_stopped_search=True),
    )
    log_stopped_search(finished_search())
    partial = MlflowClient().list_artifacts(run.info.run_id, "partial")
    assert {artifact.path for artifact in partial} == {
        "partial/partial_trial_history.csv",
        "partial/partial_members_plot.png",
        "partial/partial_search_result",
    }
