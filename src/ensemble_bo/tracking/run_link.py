"""The active run's calls to MLflow: bounded in time, and buffered while the
tracking server does not answer.

Every call the tracking hook makes once its run is open (parameters,
per-iteration metrics, tags, artifacts, the model, benchmark cells, the run's
end) goes through `RunLink.call`, with at most RETRIES retries and TIMEOUT s
without an answer per request: a server that stops answering costs seconds,
not MLflow's default minutes. When a call finds the server away, the run goes
on: that call and the later ones go to the run's buffer (run_buffer.py), a
local store that keeps them on disk. Every PROBE_INTERVAL s a call first asks
the server whether it is back; if it is, the buffer is uploaded, in order, and
the run goes on with the server. A run that ends while the server is still
away records its end in the buffer and says how to upload it later
(`ensemble-bo upload-run FOLDER`).

After Ctrl-C (`interrupted`) requests get no retry and STOPPING_TIMEOUT s, and
a run already buffering asks the server nothing more, so the run ends within
seconds. Only failures are caught, never KeyboardInterrupt.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ensemble_bo.tracking.run_buffer import RunBuffer, shown_path
from ensemble_bo.tracking.store import (
    TrackingStoreError,
    connection_failure,
    display_uri,
    first_line,
    http_limits,
    server_unreachable,
    sqlite_database,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Per request while the run goes on: retries (after 0, 2 s), and seconds
# without an answer. A server that refuses costs about 3 s, one that hangs 30 s,
# once: the later calls go to the buffer.
RETRIES = 2
TIMEOUT = 10
# While buffering: how often a call first asks the server whether it is back,
# and how long that question waits.
PROBE_INTERVAL = 30.0
PROBE_TIMEOUT = 3
# After Ctrl-C: one try per request, this long.
STOPPING_TIMEOUT = 2
UPLOAD_COMMAND = "ensemble-bo upload-run"


@contextmanager
def ctrl_c_after() -> Iterator[None]:
    """Ctrl-C during the block takes effect when it ends: a buffer store half
    made (an import or its schema cut short) would fail every later call.

    Only the main thread can move Python's handler.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield  # elsewhere, or a handler set outside Python: left alone
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


class EndedRun(NamedTuple):
    """A run's end: its status, its metrics as far as known here, and the buffer
    that still holds part of it (None: all of it is on the server)."""

    status: str
    metrics: Mapping[str, float]
    buffer: Path | None


class RunLink:
    """Where the active run's MLflow calls go: its tracking server, or, while
    that does not answer, the run's buffer in `buffer_folder` (made when first
    needed)."""

    def __init__(self, tracking_uri: str, buffer_folder: Path) -> None:
        self.tracking_uri = tracking_uri
        self.buffer_folder = buffer_folder
        self.run: mlflow.ActiveRun | None = None
        self._buffer: RunBuffer | None = None
        self._buffering = False
        self._stopping = False
        self._last_probe = 0.0

    @contextmanager
    def limits(self) -> Iterator[None]:
        """The bounds of a request to the server now (see the module)."""
        if self._stopping:
            with http_limits(0, STOPPING_TIMEOUT):
                yield
        else:
            with http_limits(RETRIES, TIMEOUT):
                yield

    def start_run(self, **options: Any) -> mlflow.ActiveRun:
        """mlflow.start_run(**options) on the server; one that stops answering here
        stops the run before anything is computed."""
        try:
            with self.limits():
                self.run = mlflow.start_run(**options)
        except Exception as error:
            if not server_unreachable(error):
                raise
            raise TrackingStoreError(
                f"the MLflow tracking server {display_uri(self.tracking_uri)} stopped "
                f"answering as the run was opened ({connection_failure(error, TIMEOUT)})"
                ": start it again, or set MLFLOW_TRACKING_URI to a reachable store"
            ) from error
        return self.run

    @property
    def run_id(self) -> str:
        assert self.run is not None, "the run is not started"
        return self.run.info.run_id

    def interrupted(self) -> None:
        """Ctrl-C: from now on, no retries, short waits, and no question to a
        server already away."""
        self._stopping = True

    def call(self, action: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`action(*args, **kwargs)`, which logs to the active run: on the server,
        or in the buffer while the server does not answer."""
        if self._buffering and not self._stopping:
            self._reconnect_if_due()
        if not self._buffering:
            # Ctrl-C in the middle of a write to a SQLite store leaves the
            # database locked, so that the run can no longer be ended KILLED: a
            # local write (milliseconds) finishes first. A server's request is
            # bounded instead (limits).
            local = (
                ctrl_c_after() if sqlite_database(self.tracking_uri) else nullcontext()
            )
            try:
                with self.limits(), local:
                    return action(*args, **kwargs)
            except Exception as error:
                if not server_unreachable(error):
                    raise
                # what Ctrl-C stopped here is in the buffer all the same
                with ctrl_c_after():
                    self._start_buffering(error)
                    return action(*args, **kwargs)
        return action(*args, **kwargs)

    def end(self, status: str) -> EndedRun:
        """End the run with `status`: on the server, or in the buffer if the server
        is still away (`kept_message` then says how to upload it)."""
        if self._buffering and not self._stopping:
            self._reconnect()
        if not self._buffering:
            try:
                with self.limits():
                    metrics = MlflowClient().get_run(self.run_id).data.metrics
                    mlflow.end_run(status)
            except Exception as error:
                if not server_unreachable(error):
                    raise
                self._note_outage(error)
            else:
                if self._buffer is not None:  # uploaded when the server came back
                    self._buffer.remove()
                return EndedRun(status, metrics, None)
        return self._end_in_buffer(status)

    def _end_in_buffer(self, status: str) -> EndedRun:
        buffer = self._buffer
        assert buffer is not None
        with ctrl_c_after():
            if self._buffering:
                mlflow.end_run()  # the outage's run, in the buffer's store
            # mlflow.end_run takes the run off MLflow's active runs, then asks
            # the current store to end it: asked of the buffer's store, which
            # does not hold the server's run, that asks the server nothing.
            active = mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                mlflow.set_tracking_uri(buffer.uri)
                with suppress(MlflowException):
                    mlflow.end_run(status)
            mlflow.set_tracking_uri(self.tracking_uri)
            self._buffering = False
            buffer.record_end(status)
        return EndedRun(status, buffer.metrics(), buffer.folder)

    def kept_message(self, ended: EndedRun) -> str:
        """What a run whose end is in its buffer says last: where, and the
        command that uploads it."""
        assert ended.buffer is not None
        folder = shown_path(ended.buffer)
        return (
            f"The MLflow server {display_uri(self.tracking_uri)} did not answer: "
            f"MLflow run {self.run_id} ({ended.status.lower()}) is kept in {folder}. "
            f"Once the server is back, upload it: {UPLOAD_COMMAND} {shlex.quote(folder)}"
        )

    def _note_outage(self, error: BaseException) -> None:
        if self._buffer is None:
            assert self.run is not None
            self._buffer = RunBuffer.create(
                self.buffer_folder, self.tracking_uri, self.run
            )
        logger.warning(
            "The MLflow server %s does not answer (%s): the run goes on, and what "
            "it logs is kept in %s until the server is back",
            display_uri(self.tracking_uri),
            connection_failure(error, TIMEOUT),
            shown_path(self._buffer.folder),
        )

    def _start_buffering(self, error: BaseException) -> None:
        with ctrl_c_after():
            self._note_outage(error)
            buffer = self._buffer
            assert buffer is not None and self.run is not None
            mlflow.set_tracking_uri(buffer.uri)
            # Nested under the server's run, which stays open below it.
            part = mlflow.start_run(
                experiment_id=buffer.buffer_experiment_id(),
                run_name=self.run.info.run_name,
                nested=True,
            )
            buffer.add_part(part)
            self._buffering = True
        self._last_probe = time.monotonic()

    def _server_answers(self) -> bool:
        try:
            with http_limits(0, PROBE_TIMEOUT):
                MlflowClient(self.tracking_uri).get_run(self.run_id)
        except Exception:  # noqa: BLE001 - not back (yet): keep buffering
            return False
        return True

    def _reconnect_if_due(self) -> None:
        if time.monotonic() - self._last_probe >= PROBE_INTERVAL:
            self._reconnect()

    def _reconnect(self) -> None:
        """If the server answers again: upload the buffer and go on with the server."""
        self._last_probe = time.monotonic()
        if not self._server_answers():
            return
        buffer = self._buffer
        assert buffer is not None
        with ctrl_c_after():
            mlflow.end_run()  # the outage's run, in the buffer's store
            mlflow.set_tracking_uri(self.tracking_uri)
            self._buffering = False
        try:
            with self.limits():
                buffer.upload(MlflowClient(self.tracking_uri))
        except Exception as error:  # noqa: BLE001 - the buffer keeps it for later
            if not server_unreachable(error):
                logger.warning(
                    "uploading %s to MLflow run %s failed (%s): it is kept there",
                    shown_path(buffer.folder),
                    self.run_id,
                    first_line(error),
                )
            self._start_buffering(error)
            return
        logger.info(
            "The MLflow server %s answers again: what the run logged while it was "
            "away is now in MLflow run %s",
            display_uri(self.tracking_uri),
            self.run_id,
        )
