"""The Kedro hook that makes each `kedro run` one MLflow run.

It wires the other modules of this package: the store (opened and checked
before the run starts), the KILLED sweep, the run's tags and configuration,
the outputs logged as nodes end, the core's events (per-iteration metrics,
benchmark cells as child runs, a resumed search's journal), and at its end
the experiment's saved view of the runs table (runs_view.py) and the run's
summary. What it logs is configured in conf/base/mlflow.yml.
Once the run is open, every call goes through its RunLink (run_link.py):
bounded in time, and kept in a local buffer while the server does not answer.
A run ends FINISHED, FAILED on an error, KILLED on Ctrl-C.

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
import time
from collections.abc import Mapping
from fnmatch import fnmatchcase
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mlflow
from kedro.framework.hooks import hook_impl
from mlflow.tracking import MlflowClient

from ensemble_bo import events
from ensemble_bo.core.results import SearchInterrupted, interrupted_by_user
from ensemble_bo.summary import log_run_summary, run_address
from ensemble_bo.tracking.artifacts import (
    PARTIAL,
    log_output,
    log_params,
    log_stopped_search,
)
from ensemble_bo.tracking.benchmark_runs import log_benchmark_cell
from ensemble_bo.tracking.liveness import mark_dead_runs_killed, process_tags
from ensemble_bo.tracking.pools import check_pool_sources
from ensemble_bo.tracking.run_buffer import buffer_folder
from ensemble_bo.tracking.run_link import RunLink
from ensemble_bo.tracking.run_tags import (
    DATA_FILE_TAG,
    PIPELINE_TAG,
    SESSION_TAG,
    log_dataset_input,
    log_run_configuration,
    run_name,
    run_tags,
    tag_resumed_search,
)
from ensemble_bo.tracking.runs_view import VIEW_ID, update_runs_view
from ensemble_bo.tracking.store import (
    display_uri,
    first_line,
    open_experiment,
    resolve_tracking_uri,
)
from ensemble_bo.validation import (
    RAW_DATASET,
    requested_pipelines,
    single_pipeline,
)

logger = logging.getLogger(__name__)

# Hooks whose run is open. Ctrl-C outside a search (the benchmark, loading a
# dataset) reaches no Kedro hook: the `run` command ends them (end_interrupted_runs).
_open_hooks: list[MlflowTrackingHook] = []


def _update_runs_view(
    link: RunLink, experiment_id: str, metrics: Mapping[str, float]
) -> str | None:
    """The experiment's "Test metrics" view, with the run's key metrics in
    it (tracking.runs_view); None where the store refused the write."""
    try:
        with link.limits():
            update_runs_view(MlflowClient(link.tracking_uri), experiment_id, metrics)
    except Exception as error:  # noqa: BLE001 - the run is recorded; only its view is not
        logger.warning("could not update the runs table's view: %s", first_line(error))
        return None
    return VIEW_ID


def end_interrupted_runs() -> None:
    """End every open run KILLED: Ctrl-C stopped it where no Kedro hook hears."""
    for hook in list(_open_hooks):
        hook.end_interrupted()


class MlflowTrackingHook:
    """Opens one MLflow run per `kedro run` and logs into it."""

    def __init__(self) -> None:
        self._config: dict[str, Any] = {}
        self._project_path = Path.cwd()
        self._kept_outputs: dict[str, Any] = {}
        self._link: RunLink | None = None
        self._method: str | None = None
        self._data_file: str | None = None
        self._started = time.monotonic()

    @hook_impl
    def after_context_created(self, context) -> None:
        self._config = dict(context.config_loader["mlflow"])
        self._project_path = Path(context.project_path)

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline, catalog
    ) -> None:
        self._started = time.monotonic()
        parameters = {
            name.removeprefix("params:"): catalog.load(name)
            for name in sorted(pipeline.inputs())
            if name.startswith("params:")
        }
        pipeline_names = requested_pipelines(run_params)
        self._method = single_pipeline(pipeline_names)
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
        tags = {
            PIPELINE_TAG: pipeline_name,
            "kedro.version": version("kedro"),
            **run_tags(run_params, parameters, self._project_path),
            **process_tags(),
        }
        link = RunLink(
            tracking_uri, buffer_folder(self._project_path, tags[SESSION_TAG])
        )
        with link.limits():
            check_pool_sources(
                pipeline_names, parameters, MlflowClient(tracking_uri), experiment_id
            )
            try:
                mark_dead_runs_killed(MlflowClient(tracking_uri), experiment_id)
            except Exception as error:  # noqa: BLE001 - housekeeping must not stop a run
                logger.warning("could not look for killed runs: %s", first_line(error))
        name = run_name(pipeline_name, parameters, run_params, tags)
        # The run's summary links to its page; MLflow's own "View run" lines
        # (printed for a tracking server) would say it twice.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        run = link.start_run(experiment_id=experiment_id, run_name=name, tags=tags)
        self._link = link
        _open_hooks.append(self)
        link.call(log_params, parameters)
        # logged from the frame the pipeline reads (after_dataset_loaded)
        self._data_file = tags.get(DATA_FILE_TAG)
        link.call(log_run_configuration, catalog.load("parameters"), run_params)
        logger.info(
            "MLflow run %s in %s (in the MLflow UI: %s)",
            run.info.run_id,
            display_uri(tracking_uri),
            run_address(display_uri(tracking_uri), experiment_id, run.info.run_id),
        )

        events.subscribe(self._on_event)

    @hook_impl
    def after_dataset_loaded(self, dataset_name: str, data: Any) -> None:
        """The raw dataset, once, as the run's MLflow dataset input: the frame
        the pipeline read, not a second read of its file."""
        if (
            self._link is not None
            and dataset_name == RAW_DATASET
            and self._data_file is not None
        ):
            self._link.call(log_dataset_input, data, self._data_file)
            self._data_file = None

    @hook_impl
    def after_node_run(self, node, outputs: dict[str, Any]) -> None:
        if self._link is None:
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
                self._link.call(
                    log_output,
                    name,
                    data,
                    rule,
                    self._kept_outputs.get(rule.get("input_example")),
                    self._method,
                )

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._end("FINISHED")

    @hook_impl
    def on_node_error(self, error: Exception) -> None:
        """A search that stopped early still leaves its trained models in the run."""
        if self._link is None or not isinstance(error, SearchInterrupted):
            return
        if interrupted_by_user(error):
            self._link.interrupted()
        self._link.call(log_stopped_search, error.result)
        # the server's run: while buffered, the active run is the buffer's
        logger.warning(
            "%d trained models of the stopped search are saved in MLflow run %s, "
            "artifacts %s/",
            len(error.result.pool),
            self._link.run_id,
            PARTIAL,
        )

    @hook_impl
    def on_pipeline_error(self, error: Exception) -> None:
        self._end("KILLED" if interrupted_by_user(error) else "FAILED")

    def end_interrupted(self) -> None:
        """Ctrl-C: the run ends KILLED, within seconds whatever its server does."""
        if self._link is not None:
            self._link.interrupted()
        self._end("KILLED")

    def _end(self, status: str) -> None:
        events.unsubscribe(self._on_event)
        self._kept_outputs.clear()
        link = self._link
        if link is None:
            return
        if status == "FINISHED":
            # the whole run against its time budget: search, refit, reports, logging
            link.call(
                mlflow.log_metric, "run_seconds", time.monotonic() - self._started
            )
        # Forgotten once ended: Ctrl-C while it ends has it ended again, KILLED.
        ended = link.end(status)
        self._link = None
        _open_hooks.remove(self)
        if status == "FINISHED":
            experiment_id = link.run.info.experiment_id
            view = None
            if ended.buffer is None:  # the store answers: its runs table can be shown
                view = _update_runs_view(link, experiment_id, ended.metrics)
            log_run_summary(
                run_id=link.run_id,
                run_name=link.run.info.run_name,
                tracking_uri=link.tracking_uri,
                experiment_id=experiment_id,
                experiment_name=self._config["experiment_name"],
                metrics=ended.metrics,
                status=ended.status,
                view=view,
            )
        if ended.buffer is not None:
            logger.warning(link.kept_message(ended))

    def _on_event(self, event: events.Event) -> None:
        if self._link is None:
            return
        if isinstance(event, events.IterationEnded):
            self._link.call(mlflow.log_metrics, event.metrics, step=event.step)
        elif isinstance(event, events.CellEnded):
            self._link.call(log_benchmark_cell, event.record, event.reused)
        elif isinstance(event, events.SearchResumable):
            if event.recorded:
                logger.info(
                    "Resuming a stopped search: %d finished trial%s of its journal "
                    "%s %s replayed, not trained again",
                    event.recorded,
                    "" if event.recorded == 1 else "s",
                    event.journal,
                    "is" if event.recorded == 1 else "are",
                )
            self._link.call(tag_resumed_search, event.journal, event.recorded)
