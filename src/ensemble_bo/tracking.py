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

import fcntl
import hashlib
import json
import logging
import math
import os
import pickle
import re
import shlex
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse, urlsplit, urlunsplit

import mlflow
import mlflow.sklearn
import yaml
from kedro.framework.hooks import hook_impl
from mlflow.entities import Metric, Param, Run, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.file_utils import local_file_uri_to_path
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

import ensemble_bo
from ensemble_bo import events, provenance
from ensemble_bo.core.methods import SAVED_POOL_SELECTIONS
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.provenance import file_sha256
from ensemble_bo.reporting import trial_history
from ensemble_bo.summary import log_run_summary, run_address
from ensemble_bo.validation import RAW_DATA, RUNS_PREFIX, check_run_inputs

logger = logging.getLogger(__name__)

# MLflow accepts at most this many params per call and this many characters per value.
_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
# Packages the logged model needs to load elsewhere (`mlflow models predict`):
# pinned with everything they depend on, at the versions of this run.
_MODEL_REQUIREMENTS = ("scikit-learn", "numpy", "pandas", "scipy", "skops")


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mapping -> (dotted.key, leaf value) pairs."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


class TrackingStoreError(RuntimeError):
    """The tracking store or the artifact folder cannot be used: raised before a run starts."""


_SQLITE_PREFIX = "sqlite:///"


def sqlite_database(tracking_uri: str) -> Path | None:
    """The database file of a SQLite tracking URI; None for any other store.

    `sqlite:///mlflow.db` is relative, `sqlite:////abs/mlflow.db` absolute (four
    slashes); percent-escapes (`%20`) are decoded, as SQLAlchemy does.
    """
    if not tracking_uri.startswith(_SQLITE_PREFIX):
        return None
    try:
        database = make_url(tracking_uri).database
    except ArgumentError:
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def resolve_tracking_uri(uri: str, project_path: Path) -> str:
    """A relative SQLite path is taken relative to the project, not the cwd."""
    database = sqlite_database(uri)
    if database is not None and not database.is_absolute():
        absolute = (project_path / database).resolve()
        query = uri.partition("?")[2]
        # Escaped so that SQLAlchemy reads back exactly this path (spaces, `%`, `?`).
        return f"{_SQLITE_PREFIX}{quote(str(absolute), safe='/ ')}" + (
            f"?{query}" if query else ""
        )
    return uri


def local_artifact_location(tracking_uri: str) -> str | None:
    """Artifacts of a SQLite store live beside the database file; a server decides its own.

    A `file:///abs/mlartifacts` URI: three slashes, so that MLflow does not read
    the first folder as a host name.
    """
    database = sqlite_database(tracking_uri)
    if database is None:
        return None
    return (database.absolute().parent / "mlartifacts").as_uri()


def display_uri(tracking_uri: str) -> str:
    """The URI without a password, for messages."""
    parts = urlsplit(tracking_uri)
    if parts.password is None:
        return tracking_uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# How long the first request to a tracking server may take, without retries:
# MLflow's defaults (7 retries, 120 s timeout) take minutes to report a server
# that is down. Later requests of the run keep MLflow's retries.
_SERVER_CHECK_TIMEOUT_SECONDS = 5


@contextmanager
def _no_http_retries() -> Iterator[None]:
    overrides = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(_SERVER_CHECK_TIMEOUT_SECONDS),
    }
    saved = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:500]


def _connection_failure(error: BaseException) -> str:
    """The cause in MLflow's long request error: `[Errno 111] Connection refused`."""
    text = str(error)
    errno = re.search(r"\[Errno -?\d+\] [^'\"()]+", text)
    if errno:
        return errno.group(0).strip()
    if "timed out" in text.lower():
        return f"no answer within {_SERVER_CHECK_TIMEOUT_SECONDS} s"
    return _first_line(error)


def check_sqlite_store_writable(database: Path) -> None:
    """Raise TrackingStoreError naming the file (or folder) if runs cannot be written.

    An existing database is written in a transaction that is rolled back (SQLite
    also needs to write a journal beside it); a new one needs a writable folder.
    """
    folder = database.parent
    if not folder.is_dir():
        raise TrackingStoreError(
            f"the folder of the MLflow store {database} does not exist: create "
            f"{folder} or set MLFLOW_TRACKING_URI to another store"
        )
    if not database.exists():
        _check_folder_writable(folder, f"the MLflow store {database} cannot be created")
        return
    try:
        connection = sqlite3.connect(
            f"{database.absolute().as_uri()}?mode=rw",
            uri=True,
            timeout=10,
            isolation_level=None,
        )
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("CREATE TABLE ensemble_bo_write_check (x)")
            connection.execute("ROLLBACK")
        finally:
            connection.close()
    except sqlite3.Error as error:
        if "locked" in str(error):  # another run is writing: the store is writable
            return
        raise TrackingStoreError(
            f"the MLflow store {database} cannot be written ({error}): make the "
            f"file and its folder {folder} writable (SQLite writes a journal "
            "beside the file), or set MLFLOW_TRACKING_URI to another store"
        ) from error


def _check_folder_writable(folder: Path, what: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".ensemble_bo-write-check-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise TrackingStoreError(
            f"{what}: {folder} is not writable ({error.strerror or error})"
        ) from error


def check_artifact_location_writable(location: str, experiment_name: str) -> None:
    """For artifacts stored in a local folder: that folder can be written.

    Remote artifact stores (a server's `mlflow-artifacts:`, s3, ...) are left to
    the server. An experiment created by an earlier version of this project may
    hold `file:////abs/...`, which MLflow reads as host `abs`: refused, naming
    where the artifacts would really go.
    """
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        return
    if parsed.scheme == "file" and (
        parsed.netloc not in ("", "localhost") or parsed.path.startswith("//")
    ):
        host_part = (parsed.netloc or parsed.path.lstrip("/")).split("/")[0]
        raise TrackingStoreError(
            f"experiment {experiment_name!r} keeps its artifacts at {location}, "
            f"which MLflow reads as host {host_part!r} and writes outside the "
            "store's folder (made by an earlier version of this project). Use a "
            "new experiment (MLFLOW_EXPERIMENT_NAME=<new name>) or a new store "
            "(move mlflow.db away); its artifacts will then go beside the store"
        )
    _check_folder_writable(
        Path(local_file_uri_to_path(location)),
        f"artifacts of experiment {experiment_name!r} cannot be written",
    )


# MLflow 3 marks an experiment's kind with this tag: the MLflow 3 UIs that read
# it (before 3.17's GenAI / Model training switch) open the experiment on its
# training runs rather than on GenAI traces; see ui_address for 3.17.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
_EXPLICIT_KINDS = ("custom_model_development", "genai_development")


@contextmanager
def _first_contact_lock(database: Path | None) -> Iterator[None]:
    """One process at a time opens a SQLite store: MLflow creates or migrates its
    schema on first contact, and two runs starting together on a new store
    would both try (alembic then fails one of them). Other stores: no lock."""
    if database is None:
        yield
        return
    key = hashlib.sha256(str(database.absolute()).encode()).hexdigest()[:16]
    # per user: a lock file another user made could not be opened for writing
    lock = Path(tempfile.gettempdir()) / f"ensemble_bo-{os.getuid()}-store-{key}.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_experiment(tracking_uri: str, experiment_name: str) -> str:
    """Check the store and the artifact folder, and return the experiment's id.

    Fails fast, before a run is opened: an unreachable server in about
    _SERVER_CHECK_TIMEOUT_SECONDS (naming the URI), a read-only SQLite store or
    artifact folder (naming the path). Creates the experiment (artifacts beside
    a SQLite store) and marks it as a model-training experiment.
    """
    shown = display_uri(tracking_uri)
    database = sqlite_database(tracking_uri)
    if database is not None:
        check_sqlite_store_writable(database)
    with _first_contact_lock(database):
        client = MlflowClient(tracking_uri)
        try:
            with _no_http_retries():
                experiment = client.get_experiment_by_name(experiment_name)
        except Exception as error:  # noqa: BLE001 - any failure to reach the store
            where = (
                "server"
                if urlparse(tracking_uri).scheme in ("http", "https")
                else "store"
            )
            raise TrackingStoreError(
                f"the MLflow tracking {where} {shown} cannot be reached "
                f"({_connection_failure(error)}): start it, or set MLFLOW_TRACKING_URI to a "
                "reachable store (unset, runs go to the project's mlflow.db)"
            ) from error
        if experiment is None:
            try:
                experiment_id = client.create_experiment(
                    experiment_name,
                    artifact_location=local_artifact_location(tracking_uri),
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                )
            except MlflowException:
                # another run started at the same time created it first
                found = client.get_experiment_by_name(experiment_name)
                if found is None:
                    raise
                experiment_id = found.experiment_id
            experiment = client.get_experiment(experiment_id)
        elif experiment.tags.get(EXPERIMENT_KIND_TAG) not in _EXPLICIT_KINDS:
            # unset, or only inferred by the UI
            client.set_experiment_tag(
                experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
            )
    check_artifact_location_writable(experiment.artifact_location, experiment_name)
    return experiment.experiment_id


# Who runs a run: tags that tell, when the store is next opened, whether the
# process of a run still RUNNING is alive or was killed (SIGKILL, out of memory).
HOST_TAG = "process.host"
PID_TAG = "process.pid"
START_TAG = "process.start_ticks"  # Linux: /proc/<pid>/stat field 22
BOOT_TAG = "process.boot_id"
KILLED_TAG = "killed_reason"


def _process_start_ticks(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (Linux); None elsewhere or if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # field 2, the command name, may hold spaces and parentheses
    return stat[stat.rindex(")") + 2 :].split()[19]


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_tags() -> dict[str, str]:
    """This process: host, PID and (on Linux) start time and boot, so a reused PID is not taken for it."""
    pid = os.getpid()
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(pid)}
    start, boot = _process_start_ticks(pid), _boot_id()
    if start is not None:
        tags[START_TAG] = start
    if boot is not None:
        tags[BOOT_TAG] = boot
    return tags


def process_is_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process these tags (process_tags, on this host) describe has ended."""
    try:
        pid = int(tags[PID_TAG])
    except (KeyError, ValueError):
        return False
    boot = tags.get(BOOT_TAG)
    if boot is not None and _boot_id() not in (None, boot):
        return True  # the machine rebooted since
    start = _process_start_ticks(pid)
    if start is not None or Path("/proc/self/stat").exists():
        # Linux: gone, or the PID now belongs to a process started later
        return start is None or (START_TAG in tags and tags[START_TAG] != start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def mark_dead_runs_killed(client: MlflowClient, experiment_id: str) -> list[str]:
    """Mark KILLED the experiment's RUNNING runs of this host whose process is gone.

    A run killed by SIGKILL or the out-of-memory killer never ends its MLflow
    run; the next run on the same host and store does. Returns their ids.
    """
    host = socket.gethostname().replace("'", "")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'",
        run_view_type=ViewType.ACTIVE_ONLY,
        max_results=1000,
    )
    killed = []
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for run in runs:
        tags = run.data.tags
        if not process_is_gone(tags):
            continue
        reason = (
            f"process {tags.get(PID_TAG)} on {tags.get(HOST_TAG)} had ended without "
            f"ending the run (killed, e.g. SIGKILL or out of memory); found at {now}"
        )
        client.set_tag(run.info.run_id, KILLED_TAG, reason)
        client.set_terminated(run.info.run_id, "KILLED")
        logger.warning("MLflow run %s marked KILLED: %s", run.info.run_id, reason)
        killed.append(run.info.run_id)
    return killed


# Tags and artifacts that say how a run was started: what `ensemble-bo rerun` reads.
PIPELINE_TAG = "kedro.pipeline"
ENV_TAG = "kedro.env"
RUNTIME_PARAMS_TAG = "kedro.runtime_params"
COMMAND_TAG = "kedro.command"  # the command line as typed (what a person reads)
SESSION_TAG = "kedro.session_id"  # also the folder of the run's outputs under data/
DATA_FILE_TAG = "data.file"
DATA_SHA256_TAG = "data.sha256"
RERUN_OF_TAG = "rerun_of"
# Set when only part of the pipelines ran (--from-nodes, --tags, ...): not rerunnable.
PARTIAL_RUN_TAG = "kedro.partial_run"
_PARTIAL_RUN_OPTIONS = (
    "from_nodes",
    "to_nodes",
    "node_names",
    "from_inputs",
    "to_outputs",
    "tags",
    "namespaces",
    "load_versions",
    "only_missing_outputs",
)
RUNTIME_PARAMS_ARTIFACT = "config/runtime_params.json"
PARAMETERS_ARTIFACT = "config/parameters.yml"
# Tags a launcher adds to the run it starts (a JSON object): `ensemble-bo rerun`
# marks its run `rerun_of`, `ensemble-bo scheduled` its scheduled job.
EXTRA_TAGS_VARIABLE = "ENSEMBLE_BO_RUN_TAGS"
# MLflow's limit on a tag's value.
_MAX_TAG_LENGTH = 8000


def raw_data_tags(parameters: Mapping[str, Any], project_path: Path) -> dict[str, str]:
    """The sha256 of each raw file the run reads: `dataset`'s, and the benchmark's."""
    tags = {}
    dataset = parameters.get("dataset")
    if (
        isinstance(dataset, str)
        and (project_path / RAW_DATA / f"{dataset}.csv").is_file()
    ):
        path = RAW_DATA / f"{dataset}.csv"
        tags[DATA_FILE_TAG] = path.as_posix()
        tags[DATA_SHA256_TAG] = file_sha256(project_path / path)
    benchmark = parameters.get("benchmark")
    names = benchmark.get("datasets") if isinstance(benchmark, Mapping) else None
    for name in names or ():
        path = project_path / RAW_DATA / f"{name}.csv"
        if path.is_file():
            tags[f"{DATA_SHA256_TAG}.{name}"] = file_sha256(path)
    return tags


def launcher_tags() -> dict[str, str]:
    """The tags of EXTRA_TAGS_VARIABLE, or an error naming it."""
    text = os.environ.get(EXTRA_TAGS_VARIABLE)
    if not text:
        return {}
    try:
        tags = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{EXTRA_TAGS_VARIABLE}={text!r} is not JSON: {error}"
        ) from None
    if not isinstance(tags, dict):
        raise ValueError(f"{EXTRA_TAGS_VARIABLE}={text!r}: expected a JSON object")
    return {str(key): str(value) for key, value in tags.items()}


def run_tags(
    run_params: Mapping[str, Any], parameters: Mapping[str, Any], project_path: Path
) -> dict[str, str]:
    """Everything needed to start the same run again, as tags (see provenance.py)."""
    overrides = json.dumps(run_params.get("runtime_params") or {}, sort_keys=True)
    partial = {
        option: run_params[option]
        for option in _PARTIAL_RUN_OPTIONS
        if run_params.get(option)
    }
    return {
        # first: a launcher cannot overwrite what the run itself records
        **launcher_tags(),
        **({PARTIAL_RUN_TAG: json.dumps(partial, default=str)} if partial else {}),
        COMMAND_TAG: shlex.join(sys.argv)[:_MAX_TAG_LENGTH],
        ENV_TAG: str(run_params.get("env") or ""),
        RUNTIME_PARAMS_TAG: overrides[:_MAX_TAG_LENGTH],
        SESSION_TAG: str(run_params.get("run_id") or run_params.get("session_id")),
        **provenance.git_tags(project_path),
        **provenance.environment_tags(project_path),
        **raw_data_tags(parameters, project_path),
    }


def log_run_configuration(
    parameters: Mapping[str, Any], run_params: Mapping[str, Any]
) -> None:
    """The merged parameters (conf/base, the env's, the overrides) as YAML, and the
    overrides exactly as given (the tag may be cut at MLflow's length limit)."""
    mlflow.log_text(
        yaml.safe_dump(dict(parameters), sort_keys=False), PARAMETERS_ARTIFACT
    )
    mlflow.log_text(
        json.dumps(run_params.get("runtime_params") or {}, indent=1, sort_keys=True),
        RUNTIME_PARAMS_ARTIFACT,
    )


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


# A search's journal (events.SearchResumable), and what a resumed run continues.
JOURNAL_TAG = "search.journal"
RESUMED_TRIALS_TAG = "resumed.trials"
RESUMED_RUN_TAG = "resumed.run_id"


def tag_resumed_search(journal: str, recorded: int) -> None:
    """Tag the active run with its search's journal; a resumed one with what it continues.

    A rerun that resumes a stopped search is a new MLflow run (the stopped one
    keeps its status, FAILED or KILLED, and its partial artifacts): tagged with
    the number of trials it took from the journal and the id of the latest
    earlier run of the same journal.
    """
    run = mlflow.active_run()
    tags = {JOURNAL_TAG: journal}
    quote_mark = "'" if "'" not in journal else '"'
    if recorded and quote_mark not in journal:
        tags[RESUMED_TRIALS_TAG] = str(recorded)
        earlier = [
            other
            for other in MlflowClient().search_runs(
                [run.info.experiment_id],
                filter_string=(
                    f"tags.`{JOURNAL_TAG}` = {quote_mark}{journal}{quote_mark}"
                ),
                order_by=["attributes.start_time DESC"],
                max_results=10,
            )
            if other.info.run_id != run.info.run_id
        ]
        if earlier:
            tags[RESUMED_RUN_TAG] = earlier[0].info.run_id
    mlflow.set_tags(tags)


# The pools (search results) a run logs, and the tags that name them.
POOLS = "pools"
POOL_TAG_PREFIX = "pool."


def _log_pickle(data: Any, folder: str, file_name: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        pickled = Path(directory) / file_name
        pickled.write_bytes(pickle.dumps(data))
        mlflow.log_artifact(str(pickled), artifact_path=folder)


# On a run that selected from a saved pool: which run's pool (and which file).
POOL_SOURCE_TAG = "pool_source"


class PoolNotFound(LookupError):
    """The pool a selection pipeline names is not in the tracking store."""


def latest_finished_run(
    client: MlflowClient, experiment_id: str, *conditions: str
) -> Run | None:
    """The experiment's latest FINISHED run that meets the filter conditions."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=" and ".join(["attributes.status = 'FINISHED'", *conditions]),
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def find_pool(source: str, client: MlflowClient, experiment_id: str) -> tuple[str, str]:
    """(run id, artifact path) of the pool `source` names.

    `source`: a method's name, for the pool of the latest FINISHED run of the
    experiment that logged one; `runs:/<run id>`, for that run's pool (the only
    one it logged); or `runs:/<run id>/pools/<name>.pkl`.
    """
    if source.startswith(RUNS_PREFIX):
        run_id, _, path = source.removeprefix(RUNS_PREFIX).partition("/")
        try:
            run = client.get_run(run_id)
        except Exception as error:  # noqa: BLE001 - missing id or unreachable store
            raise PoolNotFound(
                f"no MLflow run {run_id!r} in the tracking store ({_first_line(error)})"
            ) from None
        if path:
            return run_id, path
        pools = sorted(
            value
            for name, value in run.data.tags.items()
            if name.startswith(POOL_TAG_PREFIX)
        )
        if len(pools) != 1:
            raise PoolNotFound(
                f"run {run_id} logged {len(pools) or 'no'} pools ({pools}): name one "
                f"as {RUNS_PREFIX}{run_id}/{POOLS}/<method>_search_result.pkl"
                if pools
                else f"run {run_id} logged no pool (no {POOLS}/ artifact): choose "
                "a run of a search pipeline"
            )
        return run_id, pools[0]
    tag = f"{POOL_TAG_PREFIX}{source}_search_result"
    run = latest_finished_run(client, experiment_id, f"tags.`{tag}` != ''")
    if run is None:
        raise PoolNotFound(
            f"no finished run in this experiment saved a `{source}` pool: run "
            f"`kedro run --pipelines={source}` first (with the same dataset, seed "
            "and data_processing parameters), or name a run's pool with "
            f"posthoc_source={RUNS_PREFIX}<run id>"
        )
    return run.info.run_id, run.data.tags[tag]


def load_pool(source: str) -> Any:
    """The pool `source` names (find_pool), downloaded from the active run's store;
    the active run is tagged with where it came from."""
    run = mlflow.active_run()
    if run is None:
        raise RuntimeError(f"the pool {source!r} is read from MLflow, during a run")
    client = MlflowClient()
    run_id, path = find_pool(source, client, run.info.experiment_id)
    with tempfile.TemporaryDirectory() as directory:
        local = client.download_artifacts(run_id, path, directory)
        pool = pickle.loads(Path(local).read_bytes())
    mlflow.set_tag(POOL_SOURCE_TAG, f"{RUNS_PREFIX}{run_id}/{path}")
    return pool


def check_pool_sources(
    pipelines: str | list[str] | None,
    parameters: Mapping[str, Any],
    client: MlflowClient,
    experiment_id: str,
) -> None:
    """The pool each selection pipeline of the run reads is in the store, or InvalidInput."""
    names = (
        pipelines.split(",") if isinstance(pipelines, str) else list(pipelines or ())
    )
    for selection in SAVED_POOL_SELECTIONS:
        if selection.name not in names:
            continue
        parameter = f"{selection.name}_source"
        source = str(parameters.get(parameter))
        try:
            find_pool(source, client, experiment_id)
        except PoolNotFound as error:
            raise InvalidInput(f"{parameter}={source!r}: {error}") from None


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
        pipeline_names = run_params.get("pipeline_names") or run_params.get(
            "pipeline_name"
        )
        pipeline_name = run_params.get("pipeline_name") or (
            ",".join(run_params.get("pipeline_names") or []) or "__default__"
        )
        # Everything that would stop the run, or stop it from being recorded,
        # fails here: before a run is opened and before anything is trained.
        # First the inputs (parameters and raw data) ...
        check_run_inputs(pipeline_names, parameters, self._project_path)
        # ... then the store, its artifact folder and the server's reachability.
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
            logger.warning("could not look for killed runs: %s", _first_line(error))
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
        self._log_params(parameters)
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
                self._log_output(name, data, rule)

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
        elif isinstance(event, events.SearchResumable):
            tag_resumed_search(event.journal, event.recorded)

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
            if not (rule.get("skip_empty") and data.empty):
                mlflow.log_text(data.to_csv(index=False), f"tables/{name}.csv")
        elif kind == "figure":
            mlflow.log_figure(data, f"plots/{name}.png")
        elif kind == "text":
            mlflow.log_text(str(data), f"reports/{name}.md")
        elif kind == "pickle":
            _log_pickle(data, POOLS, f"{name}.pkl")
            # what `posthoc_source=<method>` looks up: the latest run with this tag
            mlflow.set_tag(f"{POOL_TAG_PREFIX}{name}", f"{POOLS}/{name}.pkl")
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
        # Imported here: skops takes over a second to import, and every `kedro`
        # command loads this module while only a run that logs a model needs it.
        import skops.io  # noqa: PLC0415

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
            pip_requirements=provenance.pinned_requirements(_MODEL_REQUIREMENTS),
            input_example=None if input_example is None else input_example.head(5),
            # The ensemble classes are ours: ship the package so the model loads
            # and serves (`mlflow models predict`) where ensemble_bo is not installed.
            code_paths=[str(Path(ensemble_bo.__file__).parent)],
        )
