"""The project's MLflow UI and Kedro-Viz, opened in headless Chromium.

    .venv/bin/python scripts/browser_pages.py   # writes docs/mlflow_ui.png, docs/kedro_viz.png

Makes a few small runs in a temporary copy of the project (its own MLflow
store), serves them with `mlflow ui` and the pipelines with `kedro viz run`,
both on 127.0.0.1, checks that each page shows what it should (the runs table
with the runs' names; the pipeline's nodes), and saves the screenshots.
tests/test_mlflow_ui.py and tests/test_kedro_viz.py use the same helpers.

Chromium: Debian's `chromium` package (`apt-get install chromium`); .ci/run
installs it. Every server started here is stopped with its process group.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlflow.tracking import MlflowClient

from ensemble_bo.summary import ui_address

PROJECT = Path(__file__).resolve().parents[1]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
WINDOW = (1400, 900)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    """A free port on 127.0.0.1 below the ephemeral range (Kedro-Viz refuses those)."""
    for _ in range(200):
        port = random.randint(20000, 49151)  # noqa: S311 - not for security
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port on 127.0.0.1 between 20000 and 49151")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - 127.0.0.1
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left of it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # the whole group is gone
            break
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


@contextmanager
def serving(
    command: list[str],
    ready_url: str,
    cwd: Path,
    env: dict[str, str],
    timeout: float = 180,
) -> Iterator[subprocess.Popen]:
    """Run a server in its own process group until `ready_url` answers; stop it after."""
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not _answers(ready_url):
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                output = log.read().decode(errors="replace")[-4000:]
                state = (
                    f"exited with {process.returncode}"
                    if process.poll() is not None
                    else f"did not answer within {timeout:g} s"
                )
                raise RuntimeError(f"{' '.join(command)} {state}:\n{output}")
            time.sleep(0.5)
        yield process
    finally:
        _stop(process)
        log.close()


@contextmanager
def mlflow_ui(tracking_uri: str, port: int) -> Iterator[str]:
    """`mlflow ui` on 127.0.0.1:port over the store; yields its base address."""
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        # No background job workers: this server only shows runs.
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    with tempfile.TemporaryDirectory() as folder:  # the server's working folder
        command = [
            str(Path(sys.executable).with_name("mlflow")),
            "ui",
            "--backend-store-uri",
            tracking_uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        with serving(command, f"{base}/health", Path(folder), env):
            yield base


@contextmanager
def kedro_viz(project: Path, port: int) -> Iterator[str]:
    """`kedro viz run` on 127.0.0.1:port for the project; yields its base address."""
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DO_NOT_TRACK": "true",
        "KEDRO_DISABLE_TELEMETRY": "true",
        # Kedro-Viz's page writes a kedro-telemetry user id file under the user's
        # config folder even with consent off (it sends nothing): keep it in the
        # project copy, not in the home of whoever runs this.
        "XDG_CONFIG_HOME": str(project / ".config"),
    }
    command = [
        sys.executable,
        "-m",
        "kedro",
        "viz",
        "run",
        "--no-browser",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    # /api/main answers once the project's pipelines are loaded
    with serving(command, f"{base}/api/main", project, env):
        yield base


def chromium(
    url: str,
    screenshot: Path | None = None,
    budget_ms: int = 20000,
    timeout: float = 180,
) -> str:
    """The page's DOM after `budget_ms` of (virtual) time; with `screenshot`, a PNG of it.

    A fresh profile in a temporary folder (HOME too), so nothing is written elsewhere.
    """
    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError(
            f"none of {CHROMIUM_NAMES} is installed: apt-get install chromium"
        )
    with tempfile.TemporaryDirectory() as profile:
        command = [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            f"--virtual-time-budget={budget_ms}",
        ]
        command.append(f"--screenshot={screenshot}" if screenshot else "--dump-dom")
        completed = subprocess.run(
            [*command, url],
            env={**os.environ, "HOME": profile},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            start_new_session=True,
        )
    if completed.returncode != 0:
        raise RuntimeError(f"chromium failed on {url}:\n{completed.stderr[-3000:]}")
    return completed.stdout


# ---------------------------------------------------------------- docs screenshots

RUNS = (
    ("segor", "budget=24,seed=0"),
    ("smbo", "budget=16,seed=0"),
    ("random_search", "budget=16,seed=0"),
)


def copy_project(root: Path) -> Path:
    """conf and the concrete data; the package is the installed one."""
    shutil.copy(PROJECT / "pyproject.toml", root)
    shutil.copytree(PROJECT / "conf" / "base", root / "conf" / "base")
    for extra in (PROJECT / "conf").glob("*.yml"):
        shutil.copy(extra, root / "conf")
    (root / "conf" / "local").mkdir()
    (root / "src").mkdir()
    (root / "data" / "01_raw").mkdir(parents=True)
    shutil.copy(PROJECT / "data" / "01_raw" / "concrete.csv", root / "data" / "01_raw")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=PROJECT / "docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        project = copy_project(Path(folder))
        uri = f"sqlite:///{project / 'mlflow.db'}"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": uri,
            "DO_NOT_TRACK": "true",
            "KEDRO_DISABLE_TELEMETRY": "true",
        }
        for pipeline, params in RUNS:
            subprocess.run(
                [sys.executable, "-m", "kedro", "run", f"--pipelines={pipeline}"]
                + ["--params", params],
                cwd=project,
                env=env,
                check=True,
                capture_output=True,
            )
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("ensemble_bo").experiment_id
        names = [run.info.run_name for run in client.search_runs([experiment])]

        with mlflow_ui(uri, free_port()) as base:
            page = ui_address(experiment, ui=base)
            dom = chromium(page)
            missing = [name for name in names if name not in dom]
            if missing:
                raise SystemExit(f"{page} does not show the runs {missing}")
            chromium(page, screenshot=args.docs / "mlflow_ui.png")
        with kedro_viz(project, free_port()) as base:
            chromium(f"{base}/?pid=segor", screenshot=args.docs / "kedro_viz.png")
    sys.stdout.write(
        f"runs {names}: {args.docs / 'mlflow_ui.png'}, {args.docs / 'kedro_viz.png'}\n"
    )


if __name__ == "__main__":
    main()
