"""The project's MLflow UI and Kedro-Viz, opened in headless Chromium.

    .venv/bin/python scripts/browser_pages.py   # writes docs/mlflow_ui.png,
                                                # docs/mlflow_compare.png, docs/kedro_viz.png

Makes a few small runs in a temporary copy of the project (its own MLflow
store), serves them with `mlflow ui` and the pipelines with `kedro viz run`,
both on 127.0.0.1, checks that each page shows what it should (the runs table
with the runs' names and test metrics; the compare view with the runs'
common figures; the pipeline's nodes), and saves the screenshots.
tests/test_mlflow_ui.py and tests/test_kedro_viz.py use the same helpers.

Chromium: Debian's `chromium` package (`apt-get install chromium`); .ci/run
installs it. Every server started here is stopped with its process group.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
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
from typing import Any

import websockets
from mlflow.tracking import MlflowClient

from ensemble_bo.benchmarking.scripts import project_copy
from ensemble_bo.summary import ui_address
from ensemble_bo.tracking.runs_view import VIEW_ID

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


def _browser(profile: str, window: tuple[int, int]) -> list[str]:
    """Headless Chromium with a fresh profile in `profile`, `window` in pixels."""
    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError(
            f"none of {CHROMIUM_NAMES} is installed: apt-get install chromium"
        )
    return [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={window[0]},{window[1]}",
    ]


def chromium(
    url: str,
    screenshot: Path | None = None,
    budget_ms: int = 20000,
    timeout: float = 180,
    window: tuple[int, int] = WINDOW,
) -> str:
    """The page's DOM after `budget_ms` of (virtual) time; with `screenshot`, a
    PNG of it, `window` (width, height) in pixels.

    A fresh profile in a temporary folder (HOME too), so nothing is written elsewhere.
    """
    with tempfile.TemporaryDirectory() as profile:
        command = [*_browser(profile, window), f"--virtual-time-budget={budget_ms}"]
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


def screenshot_after_click(
    url: str,
    selector: str,
    screenshot: Path,
    window: tuple[int, int] = WINDOW,
    settle_s: float = 15.0,
) -> None:
    """A PNG of the page once the element `selector` (CSS) is clicked and
    scrolled to near the top: what --screenshot cannot do, through the DevTools
    protocol (websockets, which MLflow's server installs, speaks it)."""
    with tempfile.TemporaryDirectory() as profile:
        process = subprocess.Popen(
            [*_browser(profile, window), "--remote-debugging-port=0", "about:blank"],
            env={**os.environ, "HOME": profile},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline:
                    raise RuntimeError("chromium opened no DevTools port in 30 s")
                time.sleep(0.1)
            port = port_file.read_text().split()[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as answer:
                pages = [t for t in json.load(answer) if t["type"] == "page"]
            asyncio.run(
                _click_and_shoot(
                    pages[0]["webSocketDebuggerUrl"],
                    url,
                    selector,
                    screenshot,
                    settle_s,
                )
            )
        finally:
            _stop(process)


async def _click_and_shoot(
    socket_url: str, url: str, selector: str, screenshot: Path, settle_s: float
) -> None:
    async with websockets.connect(socket_url, max_size=None) as connection:
        calls = itertools.count(1)

        async def call(method: str, **params: Any) -> dict[str, Any]:
            number = next(calls)
            await connection.send(
                json.dumps({"id": number, "method": method, "params": params})
            )
            while True:  # events arrive between the answers
                message = json.loads(await connection.recv())
                if message.get("id") == number:
                    return message.get("result", {})

        await call("Page.enable")
        await call("Page.navigate", url=url)
        await asyncio.sleep(settle_s)
        found = await call(
            "Runtime.evaluate",
            expression=(
                f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                " if (!e) return false; e.click();"
                " e.scrollIntoView({block: 'start'}); window.scrollBy(0, -80);"
                " return true; })()"
            ),
            returnByValue=True,
        )
        if not found.get("result", {}).get("value"):
            raise RuntimeError(f"{url} has no element {selector}")
        await asyncio.sleep(settle_s / 2)
        shot = await call("Page.captureScreenshot", format="png")
        screenshot.write_bytes(base64.b64decode(shot["data"]))


# ---------------------------------------------------------------- docs screenshots

# The runs table with its metric columns, the compare view down to its
# artifacts, and its figures side by side need more room than WINDOW.
WIDE = (2000, 900)
TALL = (1600, 2600)
COMPARE = (1600, 1000)


def compare_address(base: str, experiment_id: str, run_ids: list[str]) -> str:
    """MLflow's compare view of the runs `run_ids`."""
    return (
        f"{base}/#/compare-runs?runs={json.dumps(run_ids)}"
        f"&experiments={json.dumps([experiment_id])}"
    )


RUNS = (
    ("segor", "budget=24,seed=0"),
    ("smbo", "budget=16,seed=0"),
    ("random_search", "budget=16,seed=0"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=PROJECT / "docs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        project = project_copy(PROJECT, Path(folder), ["concrete"])
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
            page = ui_address(experiment, ui=base, view=VIEW_ID)
            dom = chromium(page, window=WIDE)
            missing = [name for name in names if name not in dom]
            if missing or "test_mse_ensemble" not in dom:
                raise SystemExit(
                    f"{page} does not show the runs {missing} or their test metrics"
                )
            chromium(page, screenshot=args.docs / "mlflow_ui.png", window=WIDE)
            runs = [
                run.info.run_id
                for run in client.search_runs([experiment])
                if run.info.run_name.startswith(("segor", "smbo"))
            ]
            page = compare_address(base, experiment, runs)
            if "convergence_plot.png" not in chromium(page, window=TALL):
                raise SystemExit(f"{page} shows no common figure of the runs")
            screenshot_after_click(
                page,
                '[artifact-name="convergence_plot.png"]',
                args.docs / "mlflow_compare.png",
                window=COMPARE,
            )
        with kedro_viz(project, free_port()) as base:
            chromium(f"{base}/?pid=segor", screenshot=args.docs / "kedro_viz.png")
    shots = ", ".join(
        str(args.docs / name)
        for name in ("mlflow_ui.png", "mlflow_compare.png", "kedro_viz.png")
    )
    sys.stdout.write(f"runs {names}: {shots}\n")


if __name__ == "__main__":
    main()
