"""What a run ends with on the console: its MLflow run, test metrics, where to look.

A run is quiet by default (conf/logging.yml): its progress bars, this
summary, warnings and an error's message are all it prints.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

# Where `mlflow ui` serves by default.
MLFLOW_UI_ADDRESS = "http://127.0.0.1:5000"


def mlflow_command() -> str:
    """How to call this environment's `mlflow` from the current directory.

    `mlflow` when the environment's own is first on PATH (an activated venv),
    otherwise its path (e.g. `.venv/bin/mlflow` after `make run`).
    """
    own = Path(sys.executable).parent / "mlflow"
    found = shutil.which("mlflow")
    if not own.exists() or (found and Path(found).resolve() == own.resolve()):
        return "mlflow"
    try:
        return shlex.quote(str(own.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(own))


def ui_address(
    experiment_id: str,
    run_id: str | None = None,
    ui: str = MLFLOW_UI_ADDRESS,
    view: str | None = None,
) -> str:
    """Where `mlflow ui` shows the experiment's runs (the runs table), one
    run, or the runs table in a saved `view` (tracking.runs_view).

    MLflow 3.17's UI ignores the experiment's kind tag: its GenAI / Model
    training switch (top left) decides, GenAI (the traces overview) until the
    user flips it, which the browser then remembers.
    `workflowType=machine_learning` in the address selects Model training for
    that page; earlier MLflow 3 UIs follow the kind tag. A view opens only
    from the runs tab's own address (`/runs`).
    """
    if view is not None:
        page = f"experiments/{experiment_id}/runs?viewStateShareKey={view}&"
    else:
        runs = f"/runs/{run_id}" if run_id else ""
        page = f"experiments/{experiment_id}{runs}?"
    return f"{ui}/#/{page}workflowType=machine_learning"


def is_server(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


def _ui(tracking_uri: str) -> str:
    """The UI of a store: the tracking server itself, or a local `mlflow ui`."""
    return tracking_uri.rstrip("/") if is_server(tracking_uri) else MLFLOW_UI_ADDRESS


def run_address(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The run's page: on the tracking server itself, or in a local `mlflow ui`."""
    return ui_address(experiment_id, run_id, _ui(tracking_uri))


def where_to_look(
    tracking_uri: str, experiment_id: str, run_id: str, view: str | None = None
) -> list[str]:
    """Lines telling how to open a run in the MLflow UI, and with `view`
    (a saved view of the runs table) where to compare the experiment's runs.

    A tracking server (http/https) is opened directly; any other store (SQLite,
    a folder, a database) through a local `mlflow ui` on it.
    """
    run = run_address(tracking_uri, experiment_id, run_id)
    compare = (
        [ui_address(experiment_id, ui=_ui(tracking_uri), view=view)] if view else []
    )
    if is_server(tracking_uri):
        return [f"Open {run}"] + [f"Compare runs by test metrics: {c}" for c in compare]
    return [
        f"Look at it: {mlflow_command()} ui --backend-store-uri "
        f"{shlex.quote(tracking_uri)}",
        f"  then open {run}",
        *(f"  or compare runs by test metrics: {c}" for c in compare),
    ]


def run_summary(
    *,
    run_id: str,
    tracking_uri: str,
    experiment_id: str,
    experiment_name: str,
    metrics: Mapping[str, float],
    run_name: str | None = None,
    status: str = "FINISHED",
    view: str | None = None,
) -> str:
    """The few lines a run ends with: the MLflow run, its test metrics, where to look.

    `metrics` may be all of the run's metrics: only the final test ones
    (`test_*`) are shown, the 90% intervals' or sets' coverage in one line
    (the other coverages are in MLflow), then the time split of a search
    (trials, those replayed from a journal, search and refit seconds, and
    whether its time budget ended it), and with `view` the experiment's saved
    view of the runs table.
    """
    named = f"{run_name} ({run_id})" if run_name else run_id
    lines = [f"MLflow run {named} {status.lower()}, experiment '{experiment_name}'"]
    tests = sorted(
        (name, value)
        for name, value in metrics.items()
        if name.startswith("test_") and not name.startswith(_COVERAGE_METRICS)
    )
    if tests:
        width = max(len(name) for name, _ in tests)
        lines += [f"  {name:<{width}}  {value:.4g}" for name, value in tests]
    if "test_interval_coverage_90" in metrics:
        lines.append(
            f"  90% intervals: {metrics['test_interval_coverage_90']:.1%} of test "
            f"targets inside, mean width {metrics['test_interval_width_90']:.3g} "
            "standard deviations"
        )
    if "test_set_coverage_90" in metrics:
        lines.append(
            f"  90% sets: {metrics['test_set_coverage_90']:.1%} hold the test "
            f"class, {metrics['test_set_size_90']:.2f} classes on average"
        )
    if "search_seconds" in metrics and "refit_seconds" in metrics:
        lines.append(f"  {search_line(metrics)}")
    lines += where_to_look(tracking_uri, experiment_id, run_id, view)
    return "\n".join(lines)


# Per-coverage metrics of intervals and sets: summarized in one line.
_COVERAGE_METRICS = ("test_interval_", "test_set_")


def search_line(metrics: Mapping[str, float]) -> str:
    """How many trials, in how many seconds of this run; how many were
    replayed; the refit's seconds and what a time budget kept back for it;
    and the whole run's seconds (search, refit, reports, logging),
    what a time budget is measured against.

    A resumed search replays the trials its journal holds instead of training
    them: `search_seconds` are this run's, which trained the others.
    """
    trials = round(metrics.get("trials", 0))
    replayed = round(metrics.get("trials_reused", 0))
    counted = f"{trials} trial{'' if trials == 1 else 's'}"
    if replayed:
        counted += (
            f" ({trials - replayed} trained in this run, {replayed} replayed from "
            "the journal of a stopped run)"
        )
    ended = " (its time budget ended it)" if metrics.get("time_budget_reached") else ""
    line = (
        f"{counted} searched in {metrics['search_seconds']:.1f} s{ended}, "
        f"refit in {metrics['refit_seconds']:.1f} s"
    )
    if "final_fit_seconds_kept" in metrics:
        line += f" ({metrics['final_fit_seconds_kept']:.1f} s kept for it)"
    if "run_seconds" in metrics:
        line += f"; the whole run {metrics['run_seconds']:.1f} s"
    return line


def log_run_summary(**summary) -> None:
    """Log `run_summary(**summary)` at INFO: what a quiet run ends with."""
    logger.info(run_summary(**summary))
