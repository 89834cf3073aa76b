"""The tracking store: where runs go, and whether they can be written there.

Resolves the tracking URI (a relative SQLite path is the project's), checks a
SQLite store and the artifact folder are writable and a server reachable, and
opens the experiment, one process at a time on a new store. Every failure is
a TrackingStoreError naming the URI or path, raised before a run is opened.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlparse, urlsplit, urlunsplit

import requests
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.credentials import read_mlflow_creds
from mlflow.utils.file_utils import local_file_uri_to_path
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


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


def display_uri(tracking_uri: str, mask: str = ":***") -> str:
    """The URI without a password, for messages: `user:***@host`; with mask ""
    (what a file keeps), `user@host`."""
    parts = urlsplit(tracking_uri)
    if parts.password is None:
        return tracking_uri
    netloc = parts.netloc.replace(f":{parts.password}@", f"{mask}@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# How long the first request to a tracking server may take, without retries:
# MLflow's defaults (7 retries, 120 s timeout) take minutes to report a server
# that is down.
_SERVER_CHECK_TIMEOUT_SECONDS = 5


@contextmanager
def http_limits(max_retries: int, timeout: int) -> Iterator[None]:
    """MLflow's requests to a server, while in this block: at most `max_retries`
    retries (backoff 0, 2, 4 ... s) and `timeout` seconds without an answer each.

    MLflow reads these variables at every request, so they bound exactly the
    requests made here.
    """
    overrides = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(max_retries),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout),
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


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:500]


def connection_failure(error: BaseException, timeout: float) -> str:
    """The cause in MLflow's long request error: `[Errno 111] Connection refused`,
    or no answer within `timeout` seconds."""
    text = str(error)
    errno = re.search(r"\[Errno -?\d+\] [^'\"()]+", text)
    if errno:
        return errno.group(0).strip()
    if "timed out" in text.lower():
        return f"no answer within {timeout:g} s"
    return first_line(error)


def _refusal(error: BaseException, shown: str, experiment_name: str) -> str | None:
    """What to fix when the server answered but refused the request (HTTP 401/403).

    A 403 is MLflow's host check (the name in the URI is not one the server
    allows) or its basic-auth app (the user may not read the experiment).
    """
    if not isinstance(error, MlflowException):
        return None
    status = error.get_http_status_code()
    if status == 401:
        user = read_mlflow_creds().username
        refused = (
            f"refused the credentials of user {user!r}"
            if user
            else "refused the request without credentials"
        )
        return (
            f"the MLflow tracking server {shown} {refused}: set "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
            "~/.mlflow/credentials) to your user on that server (its admin "
            "creates users)"
        )
    if status == 403 and "host header" in str(error).lower():
        host = urlsplit(shown).netloc.rpartition("@")[2]
        return (
            f"the MLflow tracking server {shown} does not answer to the name "
            f"{host!r} (403 Invalid Host header): its allowed hosts must include it "
            f"(make server MLFLOW_ALLOWED_HOSTS={host},...), or use a name it "
            "allows in MLFLOW_TRACKING_URI"
        )
    if status == 403:
        return _permission_refusal(shown, experiment_name, "read")
    return None


def _permission_refusal(shown: str, experiment_name: str, action: str) -> str:
    user = read_mlflow_creds().username
    who = f"user {user!r}" if user else "you"
    return (
        f"the MLflow tracking server {shown} does not let {who} {action} "
        f"experiment {experiment_name!r}: ask its creator or an admin for EDIT "
        "on it (a run writes there), or set MLFLOW_EXPERIMENT_NAME to an "
        "experiment of your own"
    )


def server_unreachable(error: BaseException) -> bool:
    """Whether `error`, or what it was raised from, is a request to a server that
    got no answer: refused, cut off (also in the middle of its answer, which
    requests reports as a ChunkedEncodingError), timed out, or still failing
    (5xx) after its retries. Any other error (a refused request, a bad value)
    is not."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(
            cause,
            requests.exceptions.ConnectionError
            | requests.exceptions.ChunkedEncodingError
            | requests.exceptions.Timeout
            | requests.exceptions.RetryError
            | ConnectionError
            | TimeoutError,
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


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


def check_store_form(tracking_uri: str) -> None:
    """TrackingStoreError for a folder (a plain path or a file: URI).

    MLflow 3 keeps its file store in maintenance mode: it refuses one with an
    exception whose way out (MLFLOW_ALLOW_FILE_STORE=true) creates the folder.
    Refused here instead, before anything is created, naming the forms a
    store takes; a database or a server URI goes on to MLflow.
    """
    if urlparse(tracking_uri).scheme not in ("", "file"):
        return
    folder = local_file_uri_to_path(tracking_uri)
    raise TrackingStoreError(
        f"MLFLOW_TRACKING_URI={display_uri(tracking_uri)} is a folder, which "
        "MLflow 3 no longer takes as a store; set it to a database, e.g. "
        f"{_SQLITE_PREFIX}{Path(folder, 'mlflow.db').as_posix()} (sqlite:///rel/"
        "path is relative to the project, sqlite:////abs/path absolute; the "
        "folder must exist), or to a server, http(s)://host:port; unset, runs "
        "go to the project's mlflow.db"
    )


def open_experiment(tracking_uri: str, experiment_name: str) -> str:
    """Check the store and the artifact folder, and return the experiment's id.

    Fails fast, before a run is opened or anything created: a folder as the
    store (`check_store_form`), an unreachable server in about
    _SERVER_CHECK_TIMEOUT_SECONDS (naming the URI), a server that refuses the
    credentials, the host name or the experiment (saying what to set), a
    read-only SQLite store or artifact folder (naming the path). Creates the
    experiment (artifacts beside a SQLite store) and marks it as a
    model-training experiment.
    """
    check_store_form(tracking_uri)
    shown = display_uri(tracking_uri)
    database = sqlite_database(tracking_uri)
    if database is not None:
        check_sqlite_store_writable(database)
    with _first_contact_lock(database):
        client = MlflowClient(tracking_uri)
        try:
            with http_limits(0, _SERVER_CHECK_TIMEOUT_SECONDS):
                experiment = client.get_experiment_by_name(experiment_name)
        except Exception as error:  # noqa: BLE001 - any failure to reach the store
            refusal = _refusal(error, shown, experiment_name)
            if refusal is not None:
                raise TrackingStoreError(refusal) from error
            where = (
                "server"
                if urlparse(tracking_uri).scheme in ("http", "https")
                else "store"
            )
            raise TrackingStoreError(
                f"the MLflow tracking {where} {shown} cannot be reached "
                f"({connection_failure(error, _SERVER_CHECK_TIMEOUT_SECONDS)}): "
                "start it, or set MLFLOW_TRACKING_URI to a reachable store (unset, "
                "runs go to the project's mlflow.db)"
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
        else:
            kind = experiment.tags.get(EXPERIMENT_KIND_TAG)
            # Set when unset or only inferred by the UI, else written back as it
            # is: on a server with MLflow's auth app, a user who may read an
            # experiment may not write runs to it, and this write finds out.
            try:
                client.set_experiment_tag(
                    experiment.experiment_id,
                    EXPERIMENT_KIND_TAG,
                    kind if kind in _EXPLICIT_KINDS else EXPERIMENT_KIND,
                )
            except MlflowException as error:
                if error.get_http_status_code() != 403:
                    raise
                raise TrackingStoreError(
                    _permission_refusal(shown, experiment_name, "write runs to")
                ) from error
    check_artifact_location_writable(experiment.artifact_location, experiment_name)
    return experiment.experiment_id
