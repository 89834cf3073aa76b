"""A real `mlflow server` for end-to-end tests: SQLite store, proxied artifacts.

`MlflowServer(root)` starts `mlflow server` on 127.0.0.1 at a free port, with its
store in `root/mlflow.db` and the artifacts it receives (clients write through
the server: `mlflow-artifacts:/`) in `root/artifacts`; its output goes to
`root/server.log`. As a context manager it stops the server's whole process
group on exit. The `mlflow_server` fixture is one such server per test module.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import command_line, descendants, is_running

MLFLOW = str(Path(sys.executable).with_name("mlflow"))


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound to port 0, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - 127.0.0.1
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


class MlflowServer:
    """`mlflow server` in its own process group, serving `root`'s store and artifacts."""

    # Quiet, it answers in about 15 s; on two busy cores it took up to 38 s.
    def __init__(self, root: Path, startup_timeout: float = 90.0) -> None:
        self.root = Path(root)
        self.database = self.root / "mlflow.db"
        self.artifacts = self.root / "artifacts"
        self.log = self.root / "server.log"
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self.startup_seconds: float | None = None
        self._process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The server's PID, which is also its process group's id."""
        assert self._process is not None, "the server is not started"
        return self._process.pid

    def command(self) -> list[str]:
        return [
            MLFLOW,
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.database}",
            "--serve-artifacts",
            "--artifacts-destination",
            str(self.artifacts),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]

    def output(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self, attempts: int = 3, port: int | None = None) -> MlflowServer:
        """Start the server (on `port`, None: a free one) and wait until /health
        answers; raise with its output if not."""
        self.root.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            # No background job runner (huey consumers): these servers only
            # track runs, and start in about half the time without it.
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            # One uvicorn worker also where the command does not say (make
            # server's default is four): each imports MLflow, long on busy cores.
            "MLFLOW_WORKERS": "1",
        }
        env.pop("MLFLOW_TRACKING_URI", None)
        for attempt in range(attempts):
            self.port = port or free_port()
            started = time.monotonic()
            with self.log.open("ab") as log:
                # A file, not a pipe: nobody reads a pipe while tests run, and a
                # full one would block the server.
                self._process = subprocess.Popen(
                    self.command(),
                    cwd=self.root,  # anything it writes by default stays here
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = started + self.startup_timeout
            while not _answers(f"{self.uri}/health"):
                if self._process.poll() is not None:
                    output = self.output()
                    self.stop()
                    # Another process took the port between probe and bind.
                    if "address already in use" in output.lower() and (
                        attempt + 1 < attempts
                    ):
                        break
                    raise RuntimeError(
                        f"{' '.join(self.command())} exited with "
                        f"{self._process.returncode}:\n{output}"
                    )
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"{' '.join(self.command())} did not answer within "
                        f"{self.startup_timeout:g} s:\n{self.output()}"
                    )
                time.sleep(0.2)
            else:
                self.startup_seconds = time.monotonic() - started
                return self
        raise AssertionError("unreachable")  # pragma: no cover

    def restart(self) -> MlflowServer:
        """The stopped server started again on its port, with its store and
        artifacts: a server back after an outage."""
        return self.start(port=self.port)

    def group_is_gone(self) -> bool:
        """No process of the server's group is left (the leader reaped first)."""
        if self._process is not None:
            self._process.poll()
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return True
        return False

    def _wait_for_group(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.group_is_gone():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the whole process group; SIGKILL what is left after `grace` s."""
        if self._process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:  # the whole group is gone
                break
            if self._wait_for_group(grace):
                break
        self._process.wait(timeout=grace)

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """One `mlflow server` for the test module, stopped (whole group) after it,
    and checked to have left no process behind."""
    with MlflowServer(tmp_path_factory.mktemp("mlflow_server")) as server:
        yield server
        workers = descendants(server.pid)  # `mlflow server` runs uvicorn
        assert any("uvicorn" in command_line(pid) for pid in workers)
    # stopped by PID: its whole group, and any worker that left the group
    assert server.group_is_gone()
    assert [pid for pid, started in workers.items() if is_running(pid, started)] == []
