"""The one place that talks to MLflow: a Kedro hook that makes each run an MLflow run.

What it logs, and where, is configured in conf/base/mlflow.yml:

- at the start: the pipeline's parameters, the git commit, the seed;
- during the loop: every `IterationEnded` event (events.py) as stepped metrics;
- after each node: the outputs named in `log_outputs`, each as params,
  metrics, a CSV table, a figure, a markdown text or an MLflow sklearn model
  (a mapping of tables, texts or figures is logged entry by entry);
- the benchmark: every `CellEnded` event becomes a nested child run of the
  benchmark's run.

A plain hook rather than kedro-mlflow: the live per-iteration metrics need a
bridge of our own anyway (kedro-mlflow logs datasets when nodes end),
and with that done by hand kedro-mlflow would only add a second configuration
file and a second place that opens and closes runs.
"""

from __future__ import annotations

import logging
import math
import pickle
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from fnmatch import fnmatchcase
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import mlflow
import mlflow.sklearn
import skops.io
from kedro.framework.hooks import hook_impl
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

import ensemble_bo
from ensemble_bo import events
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.reporting import trial_history

logger = logging.getLogger(__name__)

# MLflow accepts at most this many params per call and this many characters per value.
_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
# Packages the logged model needs to load elsewhere (`mlflow models predict`).
_MODEL_REQUIREMENTS = ("scikit-learn", "numpy", "pandas", "scipy", "skops")


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mapping -> (dotted.key, leaf value) pairs."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


def resolve_tracking_uri(uri: str, project_path: Path) -> str:
    """A relative SQLite path is taken relative to the project, not the cwd."""
    prefix = "sqlite:///"
    if uri.startswith(prefix):
        path = Path(uri[len(prefix) :])
        if not path.is_absolute():
            return f"{prefix}{(project_path / path).resolve()}"
    return uri


def local_artifact_location(tracking_uri: str) -> str | None:
    """Artifacts of a SQLite store live beside the database file; a server decides its own."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(urlparse(tracking_uri).path).parent / "mlartifacts").as_uri()
    return None


def _git(project_path: Path, *args: str) -> str | None:
    try:
        completed = subprocess.run(
            ["git", *args],
            cwd=project_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip()


def git_tags(project_path: Path) -> dict[str, str]:
    """The commit a run came from, and whether the working tree differed from it."""
    commit = _git(project_path, "rev-parse", "HEAD")
    if not commit:
        return {}
    changes = _git(project_path, "status", "--porcelain", "--untracked-files=no")
    return {
        "mlflow.source.git.commit": commit,
        # A run from uncommitted code cannot be rerun from the commit alone.
        "git.dirty": str(bool(changes)).lower(),
    }


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
# MLflow's limit on metrics per log_batch call.
_METRICS_PER_BATCH = 1000


def log_benchmark_cell(record: Mapping[str, Any], reused: bool) -> str:
    """A child run of the active run for one benchmark cell; returns its id.

    Params: the cell's coordinates; metrics: its final values and all its test
    metrics; `cv_loss_curve`: the CV loss of the ensemble per iteration (stepped).
    Made with the client, so the active (parent) run stays the active run.
    """
    parent = mlflow.active_run()
    if parent is None:
        raise RuntimeError("a benchmark cell is logged under an active MLflow run")
    client = MlflowClient()
    key = str(record["key"])
    child = client.create_run(
        parent.info.experiment_id,
        run_name=key,
        tags={
            MLFLOW_PARENT_RUN_ID: parent.info.run_id,
            MLFLOW_RUN_NAME: key,
            "benchmark.cell": key,
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


def _log_pickle(data: Any, folder: str, file_name: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        pickled = Path(directory) / file_name
        pickled.write_bytes(pickle.dumps(data))
        mlflow.log_artifact(str(pickled), artifact_path=folder)


class MlflowTrackingHook:
    """Opens one MLflow run per `kedro run` and logs into it."""

    def __init__(self) -> None:
        self._config: dict[str, Any] = {}
        self._project_path = Path.cwd()
        self._kept_outputs: dict[str, Any] = {}

    @hook_impl
    def after_context_created(self, context) -> None:
        self._config = dict(context.config_loader["mlflow"])
        self._project_path = Path(context.project_path)

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline, catalog
    ) -> None:
        tracking_uri = resolve_tracking_uri(
            self._config["tracking_uri"], self._project_path
        )
        mlflow.set_tracking_uri(tracking_uri)
        experiment_name = self._config["experiment_name"]
        experiment = mlflow.get_experiment_by_name(experiment_name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else mlflow.create_experiment(
                experiment_name, artifact_location=local_artifact_location(tracking_uri)
            )
        )
        parameters = {
            name.removeprefix("params:"): catalog.load(name)
            for name in sorted(pipeline.inputs())
            if name.startswith("params:")
        }
        pipeline_name = run_params.get("pipeline_name") or (
            ",".join(run_params.get("pipeline_names") or []) or "__default__"
        )
        tags = {
            "kedro.pipeline": pipeline_name,
            "kedro.version": version("kedro"),
            **git_tags(self._project_path),
        }
        run_name = "-".join(
            str(part)
            for part in (
                pipeline_name,
                parameters.get("dataset"),
                parameters.get("seed"),
            )
            if part is not None
        )
        mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=tags)
        self._log_params(parameters)
        logger.info(
            "MLflow run %s in %s", mlflow.active_run().info.run_id, tracking_uri
        )

        events.subscribe(self._on_event)

    @hook_impl
    def after_node_run(self, node, outputs: dict[str, Any]) -> None:
        if mlflow.active_run() is None:
            return
        rules = self._config.get("log_outputs") or {}
        wanted_examples = {rule.get("input_example") for rule in rules.values()}
        for name, data in outputs.items():
            if name in wanted_examples:
                self._kept_outputs[name] = data
            # The first rule whose name or pattern matches decides.
            rule = next(
                (rule for pattern, rule in rules.items() if fnmatchcase(name, pattern)),
                None,
            )
            if rule is not None:
                self._log_output(name, data, rule)

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._finish("FINISHED")

    @hook_impl
    def on_node_error(self, error: Exception) -> None:
        """A search that stopped early still leaves its trained models in the run."""
        if mlflow.active_run() is None or not isinstance(error, SearchInterrupted):
            return
        result = error.result
        mlflow.log_metric("iterations_completed", len(result.history))
        mlflow.log_text(
            trial_history(result).to_csv(index=False),
            "partial/partial_trial_history.csv",
        )
        _log_pickle(result, "partial", "partial_search_result.pkl")
        logger.warning(
            "%d trained models of the stopped search are saved in MLflow run %s, "
            "artifacts partial/",
            len(result.pool),
            mlflow.active_run().info.run_id,
        )

    @hook_impl
    def on_pipeline_error(self) -> None:
        self._finish("FAILED")

    def _finish(self, status: str) -> None:
        events.unsubscribe(self._on_event)
        self._kept_outputs.clear()
        if mlflow.active_run() is not None:
            mlflow.end_run(status=status)

    def _on_event(self, event: events.Event) -> None:
        if mlflow.active_run() is None:
            return
        if isinstance(event, events.IterationEnded):
            mlflow.log_metrics(event.metrics, step=event.step)
        elif isinstance(event, events.CellEnded):
            log_benchmark_cell(event.record, event.reused)

    def _log_params(self, parameters: Mapping[str, Any], prefix: str = "") -> None:
        flat = [
            (f"{prefix}{name}", str(value)[:_MAX_PARAM_LENGTH])
            for name, value in flatten(parameters)
        ]
        for start in range(0, len(flat), _PARAMS_PER_BATCH):
            mlflow.log_params(dict(flat[start : start + _PARAMS_PER_BATCH]))

    def _log_output(self, name: str, data: Any, rule: Mapping[str, Any]) -> None:
        kind = rule["as"]
        if kind in ("table", "figure", "text") and isinstance(data, Mapping):
            # A partitioned output: each entry under a folder named after it.
            for key, value in sorted(data.items()):
                self._log_output(f"{name}/{key}", value, rule)
            return
        if kind == "params":
            self._log_params(data, prefix=f"{name}.")
        elif kind == "metrics":
            mlflow.log_metrics(
                {
                    key: float(value)
                    for key, value in flatten(data)
                    if math.isfinite(value)
                }
            )
        elif kind == "table":
            mlflow.log_text(data.to_csv(index=False), f"tables/{name}.csv")
        elif kind == "figure":
            mlflow.log_figure(data, f"plots/{name}.png")
        elif kind == "text":
            mlflow.log_text(str(data), f"reports/{name}.md")
        elif kind == "pickle":
            _log_pickle(data, "pools", f"{name}.pkl")
        elif kind == "model":
            self._log_model(
                name, data, self._kept_outputs.get(rule.get("input_example"))
            )
        else:
            raise ValueError(
                f"conf mlflow.yml: log_outputs.{name}.as={kind!r}; "
                "expected params, metrics, table, figure, text, pickle or model"
            )

    def _log_model(self, name: str, estimator: Any, input_example: Any) -> None:
        mlflow.sklearn.log_model(
            sk_model=estimator,
            name=name,
            # skops refuses types it has not vetted (e.g. sklearn's tree storage).
            # This estimator was built by this very run, so exactly its types are
            # trusted when the model is loaded; anything else is still refused.
            skops_trusted_types=skops.io.get_untrusted_types(
                data=skops.io.dumps(estimator)
            ),
            # Pinned here instead of inferred: inference re-imports the model in a subprocess.
            pip_requirements=[
                f"{package}=={version(package)}" for package in _MODEL_REQUIREMENTS
            ],
            input_example=None if input_example is None else input_example.head(5),
            # The ensemble classes are ours: ship the package so the model loads
            # and serves (`mlflow models predict`) where ensemble_bo is not installed.
            code_paths=[str(Path(ensemble_bo.__file__).parent)],
        )
