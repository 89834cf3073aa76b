"""The Kedro hook that makes each `kedro run` one MLflow run.

It wires the other modules of this package: the store (opened and checked
before the run starts), the KILLED sweep, the run's tags and configuration,
the outputs logged as nodes end, the core's events (per-iteration metrics,
benchmark cells as child runs, a resumed search's journal) and the run's
summary at its end. What it logs is configured in conf/base/mlflow.yml.

A project hook rather than the kedro-mlflow plugin (2.0.3, tried against this
project): it would replace about seven lines here (opening and ending the run,
one parameter call) and lose what matters most. It logs live per-iteration
metrics, nested benchmark runs, provenance tags and the KILLED sweep not at
all; it opens the store before any input check (a refused input still creates
it; a stopped server took 4 min to report); it sends one request per parameter
(14.6 s for this project's 575 parameters against a server, 0.25 s batched);
its artifact datasets fail on versioned catalog entries, which every search
output is; and once installed it prints a warning on every run. docs/
architecture.md has the feature-by-feature comparison.
"""

from __future__ import annotations

import logging
import os
from fnmatch import fnmatchcase
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mlflow
from kedro.framework.hooks import hook_impl
from mlflow.tracking import MlflowClient

from ensemble_bo import events
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.summary import log_run_summary, run_address
from ensemble_bo.tracking.artifacts import log_output, log_params, log_stopped_search
from ensemble_bo.tracking.benchmark_runs import log_benchmark_cell
from ensemble_bo.tracking.liveness import mark_dead_runs_killed, process_tags
from ensemble_bo.tracking.pools import check_pool_sources
from ensemble_bo.tracking.run_tags import (
    PIPELINE_TAG,
    log_run_configuration,
    run_tags,
    tag_resumed_search,
)
from ensemble_bo.tracking.store import (
    display_uri,
    first_line,
    open_experiment,
    resolve_tracking_uri,
)
from ensemble_bo.validation import requested_pipelines

logger = logging.getLogger(__name__)


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
        parameters = {
            name.removeprefix("params:"): catalog.load(name)
            for name in sorted(pipeline.inputs())
            if name.startswith("params:")
        }
        pipeline_names = requested_pipelines(run_params)
        pipeline_name = run_params.get("pipeline_name") or (
            ",".join(run_params.get("pipeline_names") or []) or "__default__"
        )
        # Everything that would stop the run, or stop it from being recorded,
        # fails before a run is opened and before anything is trained: the
        # inputs (InputValidationHook, which runs first), then here the store,
        # its artifact folder, the server's reachability and the pool sources.
        tracking_uri = resolve_tracking_uri(
            self._config["tracking_uri"], self._project_path
        )
        experiment_id = open_experiment(tracking_uri, self._config["experiment_name"])
        mlflow.set_tracking_uri(tracking_uri)
        check_pool_sources(
            pipeline_names, parameters, MlflowClient(tracking_uri), experiment_id
        )
        try:
            mark_dead_runs_killed(MlflowClient(tracking_uri), experiment_id)
        except Exception as error:  # noqa: BLE001 - housekeeping must not stop a run
            logger.warning("could not look for killed runs: %s", first_line(error))
        tags = {
            PIPELINE_TAG: pipeline_name,
            "kedro.version": version("kedro"),
            **run_tags(run_params, parameters, self._project_path),
            **process_tags(),
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
        # The run's summary links to its page; MLflow's own "View run" lines
        # (printed for a tracking server) would say it twice.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        run = mlflow.start_run(
            experiment_id=experiment_id, run_name=run_name, tags=tags
        )
        log_params(parameters)
        log_run_configuration(catalog.load("parameters"), run_params)
        logger.info(
            "MLflow run %s in %s (in the MLflow UI: %s)",
            run.info.run_id,
            display_uri(tracking_uri),
            run_address(display_uri(tracking_uri), experiment_id, run.info.run_id),
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
                log_output(
                    name, data, rule, self._kept_outputs.get(rule.get("input_example"))
                )

    @hook_impl
    def after_pipeline_run(self) -> None:
        run = mlflow.active_run()
        self._finish("FINISHED")
        if run is None:
            return
        finished = MlflowClient().get_run(run.info.run_id)
        log_run_summary(
            run_id=finished.info.run_id,
            run_name=finished.info.run_name,
            tracking_uri=mlflow.get_tracking_uri(),
            experiment_id=finished.info.experiment_id,
            experiment_name=self._config["experiment_name"],
            metrics=finished.data.metrics,
            status=finished.info.status,
        )

    @hook_impl
    def on_node_error(self, error: Exception) -> None:
        """A search that stopped early still leaves its trained models in the run."""
        if mlflow.active_run() is None or not isinstance(error, SearchInterrupted):
            return
        log_stopped_search(error.result)

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
        elif isinstance(event, events.SearchResumable):
            tag_resumed_search(event.journal, event.recorded)
