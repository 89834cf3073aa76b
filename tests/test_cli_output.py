"""What `kedro` prints in this project: quiet runs, errors once, no telemetry.

The end-to-end tests run the real `kedro` CLI in a copy of the project (its
conf/logging.yml and .telemetry included) with DO_NOT_TRACK,
KEDRO_DISABLE_TELEMETRY, MLFLOW_DISABLE_TELEMETRY and the variables by which
MLflow recognizes a test or CI run unset, as after `source .venv/bin/activate`
on a user's machine, and with every HTTP(S) request sent to a local trap that
counts connection attempts.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import click
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from kedro.config import OmegaConfigLoader
from kedro.framework.project import LOGGING
from kedro_telemetry.plugin import _check_for_telemetry_consent
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from omegaconf.resolvers import oc

import ensemble_bo.cli
from ensemble_bo.cli import RunFailed, describe_error, run, verbose_logging
from ensemble_bo.settings import silence_known_warnings
from ensemble_bo.summary import (
    log_run_summary,
    run_summary,
    search_line,
    where_to_look,
)
from tests.support import CHEAP_SEGOR, copy_project

PROJECT = Path(__file__).resolve().parents[1]
TINY = (
    "budget=6,ensemble.size=3,segor.optimizer.n_initial=3,segor.optimizer.gp_restarts=1,"
    + CHEAP_SEGOR
)
MAX_LINES = 60
# The opt-outs of telemetry, and the variables by which MLflow's telemetry
# recognizes a test or CI run and stays off (mlflow.telemetry.utils): all unset
# where a user's run is imitated, so that only the project's own opt-out counts.
TELEMETRY_SWITCHES = (
    "DO_NOT_TRACK",
    "KEDRO_DISABLE_TELEMETRY",
    "MLFLOW_DISABLE_TELEMETRY",
    "PYTEST_CURRENT_TEST",
    "CI",
    "GITHUB_ACTIONS",
    "CIRCLECI",
    "GITLAB_CI",
    "JENKINS_URL",
    "TRAVIS",
    "TF_BUILD",
    "BITBUCKET_BUILD_NUMBER",
    "CODEBUILD_BUILD_ARN",
    "BUILDKITE",
    "TEAMCITY_VERSION",
    "CLOUD_RUN_EXECUTION",
    "RUNBOT_HOST_URL",
    "RUNBOT_BUILD_NAME",
    "RUNBOT_WORKER_ID",
)
BOX = ("╭", "╰", "│", "─")


class Trap:
    """A local TCP server counting the connections made to it (an HTTP(S) proxy)."""

    def __init__(self) -> None:
        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._server.close()


@pytest.fixture(scope="module")
def trap():
    trap = Trap()
    yield trap
    trap.close()


def project_with_store(root: Path) -> Path:
    """A project copy (tests/support.py) with a folder for its MLflow store."""
    copy_project(root)
    (root / "store").mkdir()
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return project_with_store(tmp_path_factory.mktemp("project"))


def user_env(project: Path, trap: Trap) -> dict[str, str]:
    """The environment of a command a user types in the activated venv: no
    telemetry switch, this project's store, requests sent to the trap."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name
        not in (*TELEMETRY_SWITCHES, "KEDRO_LOGGING_CONFIG", "NO_PROXY", "no_proxy")
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        MLFLOW_TRACKING_URI=f"sqlite:///{project / 'store' / 'mlflow.db'}",
        # kedro-telemetry keeps a user id there, MLflow's telemetry its
        # installation id (mlflow/telemetry.json): not in the user's home.
        XDG_CONFIG_HOME=str(project / "xdg"),
        **{name: trap.address for name in ("HTTP_PROXY", "HTTPS_PROXY")},
        **{name.lower(): trap.address for name in ("HTTP_PROXY", "HTTPS_PROXY")},
    )
    return env


def kedro(project: Path, trap: Trap, *args: str, cwd: Path | None = None):
    """`kedro ARGS` as a user types it in the activated venv; stdout + stderr."""
    env = user_env(project, trap)
    completed = subprocess.run(
        [sys.executable, "-m", "kedro", *args],
        check=False,
        cwd=cwd or project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return completed, completed.stdout + completed.stderr


def lines(output: str) -> list[str]:
    # A non-terminal tqdm bar redraws with \r on one line, as a terminal shows it.
    return output.rstrip("\n").split("\n")


def latest_run(project: Path):
    uri = f"sqlite:///{project / 'store' / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("ensemble_bo")
    return client.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"]
    )[0]


# --- telemetry --------------------------------------------------------------


def test_kedro_telemetry_finds_no_consent_in_the_project(monkeypatch):
    for name in ("DO_NOT_TRACK", "KEDRO_DISABLE_TELEMETRY", "GITHUB_REPOSITORY_OWNER"):
        monkeypatch.delenv(name, raising=False)
    assert _check_for_telemetry_consent(PROJECT) is False
    assert yaml.safe_load((PROJECT / ".telemetry").read_text()) == {"consent": False}
    # and git does not ignore it: every clone has it
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".telemetry"], cwd=PROJECT, check=False
    )
    assert ignored.returncode == 1


@pytest.mark.slow
def test_kedro_commands_make_no_telemetry_attempt(project, trap, tmp_path):
    before = trap.connections
    # `kedro run` is checked the same way by the runs below.
    completed, output = kedro(project, trap, "info")
    assert completed.returncode == 0, output[-3000:]
    # (`kedro info` lists the installed plugin as "kedro_telemetry: <version>")
    said = [line for line in lines(output) if not line.startswith("kedro_telemetry:")]
    assert not [line for line in said if "telemetry" in line.lower()], output
    assert "usage data" not in output.lower()
    assert trap.connections == before
    assert not (project / "xdg" / "kedro").exists()  # no telemetry user id either
    # The trap does see kedro-telemetry's attempt in a project without .telemetry.
    bare = project_with_store(tmp_path)
    (bare / ".telemetry").unlink()
    completed, output = kedro(bare, trap, "info")
    assert completed.returncode == 0, output[-3000:]
    assert trap.connections > before


def test_the_project_switches_mlflow_telemetry_off_before_mlflow_starts_it(
    tmp_path,
):
    """MLflow starts its telemetry client when imported: the project's settings
    (loaded first by `kedro run` and `ensemble-bo`) must opt out before that."""
    trap = Trap()
    env = user_env(tmp_path, trap)
    script = (
        "import ensemble_bo.settings, mlflow.telemetry;"
        "print(mlflow.telemetry.get_telemetry_client())"
    )
    try:
        completed = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert completed.stdout.strip() == "None"
        assert not (tmp_path / "xdg" / "mlflow").exists()
        # the same import without the project's settings starts it, here
        bare = subprocess.run(
            [sys.executable, "-c", script.replace("ensemble_bo.settings, ", "")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bare.stdout.startswith("<mlflow.telemetry.client.TelemetryClient")
        assert (tmp_path / "xdg" / "mlflow" / "telemetry.json").is_file()
    finally:
        trap.close()


def test_ensemble_bo_writes_no_mlflow_telemetry_id(tmp_path):
    trap = Trap()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "ensemble_bo", "--help"],
            cwd=PROJECT,
            env=user_env(tmp_path, trap),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        trap.close()
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert not (tmp_path / "xdg" / "mlflow").exists()
    assert trap.connections == 0


# --- a successful run ---------------------------------------------------------


@pytest.fixture(scope="module")
def quiet_run(project, trap):
    before = trap.connections
    completed, output = kedro(
        project, trap, "run", "--pipelines=segor", "--params", TINY
    )
    assert completed.returncode == 0, output[-3000:]
    assert trap.connections == before
    return output, latest_run(project)


@pytest.mark.slow
def test_a_successful_run_prints_under_60_lines_without_kedro_lines(quiet_run):
    output, run = quiet_run
    assert len(lines(output)) < MAX_LINES, output
    assert "Loading data from" not in output and "Saving data to" not in output
    assert "Running node" not in output
    assert "warning" not in output.lower(), output  # Deprecation-, User-, MLflow's
    assert "register_new_resolver" not in output and "Hint:" not in output
    assert "telemetry" not in output.lower()
    assert run.info.run_id in output
    assert "SEGOR on concrete: 100%" in output  # the progress bar


@pytest.mark.slow
def test_a_run_started_outside_make_sends_and_keeps_no_usage_data(project, quiet_run):
    # quiet_run made no connection to the trap (HTTP(S)_PROXY), and:
    assert not (project / "xdg" / "mlflow").exists()  # no MLflow installation id
    assert not (project / "xdg" / "kedro").exists()  # no kedro-telemetry user id


@pytest.mark.slow
def test_a_successful_run_ends_with_its_summary(quiet_run):
    """The tracking hook logs the run's summary (summary.log_run_summary) at its end."""
    output, run = quiet_run
    # the summary: its first line names the finished run (the progress bar goes
    # to stderr, so its lines may interleave with it in the captured output)
    printed = [line for line in lines(output) if not line.startswith("SEGOR on")]
    (start,) = [
        i for i, line in enumerate(printed) if f"({run.info.run_id}) finished" in line
    ]
    tail = "\n".join(printed[start : start + 6])
    for name in ("test_mse_ensemble", "test_mse_single_best"):
        assert name in tail
        assert f"{run.data.metrics[name]:.4g}" in tail
    assert "ui --backend-store-uri" in tail


@pytest.mark.slow
def test_verbose_and_the_singular_pipeline_option_bring_kedro_lines_back(project, trap):
    completed, output = kedro(
        project, trap, "run", "--pipeline=segor", "--verbose", "--params", TINY
    )
    assert completed.returncode == 0, output[-3000:]
    assert "Loading data from raw_dataset" in output
    assert "Saving data to" in output and "Running node" in output
    assert "register_new_resolver" not in output
    run = latest_run(project)
    assert run.data.tags["kedro.pipeline"] == "segor"
    assert run.info.status == "FINISHED"


# --- a failing run ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "named", "folder"),
    [
        # fails loading the data; run from a subfolder of the project
        ("dataset=nosuch", "nosuch", "data"),
        # fails in a node (or, once checked upfront, before any)
        ("ensemble.variant=zz-q", "zz-q", "."),
    ],
)
def test_a_failing_run_prints_its_error_once_at_the_end(
    project, trap, params, named, folder
):
    completed, output = kedro(
        project,
        trap,
        "run",
        "--pipelines=segor",
        "--params",
        f"{TINY},{params}",
        cwd=project / folder,
    )
    assert completed.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    assert not any(character in output for character in BOX), output
    assert "Loading data from" not in output and "failed with error" not in output
    errors = [line for line in lines(output) if line.startswith("Error: ")]
    assert len(errors) == 1, output
    message = errors[0].removeprefix("Error: ")
    assert named in message
    # the message is printed once, and nothing but the hint comes after it
    assert output.count(message.split(": ", 1)[1]) == 1, output
    after = lines(completed.stderr)[lines(completed.stderr).index(errors[0]) + 1 :]
    assert len(after) <= 4 and "--verbose" in after[-1]
    assert len(lines(output)) < MAX_LINES


@pytest.fixture(scope="module")
def untouched(tmp_path_factory):
    """A project copy whose runs are all refused: its store is never created."""
    return project_with_store(tmp_path_factory.mktemp("untouched"))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "fragments"),
    [
        (
            "segor.foo=1",
            [
                "segor has no parameter 'foo'",
                "its parameters are ['display_name', 'model', 'optimizer', "
                "'time_limit', 'fidelity']",
            ],
        ),
        (
            "time_budjet=10",
            [
                "unknown parameter 'time_budjet' (did you mean 'time_budget'?)",
                "'segor'",
            ],
        ),
        (
            "ensemble.varient=d-h",
            [
                "ensemble has no parameter 'varient' (did you mean 'variant'?)",
                "its parameters are ['size', 'variant', 'weighting']",
            ],
        ),
    ],
)
def test_a_misspelled_parameter_fails_before_anything_is_computed(
    untouched, trap, params, fragments
):
    completed, output = kedro(
        untouched, trap, "run", "--pipelines=segor", "--params", f"{TINY},{params}"
    )
    assert completed.returncode == 1, output[-3000:]
    (error,) = [line for line in lines(output) if line.startswith("Error: ")]
    for fragment in fragments:
        assert fragment in error, error
    # refused by the input checks: no data split, no MLflow store, no search
    assert not (untouched / "store" / "mlflow.db").exists()
    assert not list((untouched / "data" / "06_models").glob("*search_result*"))
    assert "iter" not in output


@pytest.mark.slow
def test_verbose_shows_the_full_traceback_of_an_error(project, trap):
    completed, output = kedro(
        project, trap, "run", "--pipelines=segor", "-v", "--params", "dataset=nosuch"
    )
    assert completed.returncode == 1
    assert "Traceback (most recent call last)" in output
    assert "nosuch.csv" in lines(output)[-1]


# --- the pieces, in process ---------------------------------------------------


def raised_from(error: Exception, cause: Exception) -> Exception:
    """`error` as Python leaves it after `raise error from cause` in an except block."""
    try:
        try:
            raise cause
        except type(cause) as caught:
            raise error from caught
    except type(error) as raised:
        return raised


def test_describe_error_names_the_type_and_causes_not_already_in_the_message():
    error = raised_from(
        RuntimeError("cannot log the run"),
        PermissionError("store is read-only: /x/mlflow.db"),
    )
    assert describe_error(error) == (
        "RuntimeError: cannot log the run\n"
        "  caused by PermissionError: store is read-only: /x/mlflow.db"
    )
    error = raised_from(
        ValueError("dataset a: no such file: a.csv"),
        FileNotFoundError("no such file: a.csv"),
    )
    assert describe_error(error) == "ValueError: dataset a: no such file: a.csv"
    assert isinstance(RunFailed(ValueError("x")), click.ClickException)
    assert RunFailed(ValueError("bad budget")).exit_code == 1


@pytest.mark.parametrize(
    ("raised", "shown", "code"),
    [
        (
            ValueError("budget must be a positive integer, got -1"),
            "Error: ValueError: budget must be a positive integer, got -1\n"
            "(`kedro run --verbose ...` shows the full traceback)\n",
            1,
        ),
        (KeyboardInterrupt(), "Interrupted.\n", 130),
    ],
)
def test_the_run_command_ends_an_error_with_its_message(
    monkeypatch, raised, shown, code
):
    def kedro_run(**options):
        raise raised

    monkeypatch.setattr(
        ensemble_bo.cli, "kedro_run", type("Run", (), {"callback": kedro_run})
    )
    result = CliRunner().invoke(run, ["--pipelines=segor"])
    assert (result.exit_code, result.stderr) == (code, shown)


def test_kedros_own_usage_errors_show_their_message():
    result = CliRunner().invoke(run, ["--pipeline=a", "--pipelines=b"])
    assert (result.exit_code, result.stderr) == (
        1,
        "Error: Options '--pipeline' and '--pipelines' cannot be used together\n",
    )


def test_the_logging_file_is_kedros_kind_and_verbose_restores_kedro_info():
    config = yaml.safe_load((PROJECT / "conf" / "logging.yml").read_text())
    LOGGING._validate_logging_config(config)  # the classes Kedro accepts
    assert config["loggers"]["ensemble_bo"]["level"] == "INFO"
    assert config["loggers"]["kedro"]["level"] == "WARNING"
    verbose = verbose_logging(config)
    kedro_levels = {
        name: options["level"]
        for name, options in verbose["loggers"].items()
        if name.split(".")[0] == "kedro"
    }
    assert set(kedro_levels.values()) == {"INFO"} and "kedro.runner" in kedro_levels
    assert verbose["loggers"]["ensemble_bo"]["level"] == "INFO"
    assert verbose["loggers"]["mlflow.store.db.utils"]["level"] == "NOTSET"
    assert {h["formatter"] for h in verbose["handlers"].values()} == {"verbose"}
    assert config["loggers"]["kedro"]["level"] == "WARNING"  # not modified


def test_kedros_resolver_deprecation_and_mlflows_integer_hint_are_silenced_alone(
    tmp_path,
):
    from mlflow.models import infer_signature  # noqa: PLC0415

    (tmp_path / "base").mkdir()
    (tmp_path / "local").mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silence_known_warnings()
        OmegaConfigLoader(
            conf_source=str(tmp_path), custom_resolvers={"oc.env": oc.env}
        )
        infer_signature(pd.DataFrame({"a": [1, 2]}))
        # the same warnings raised anywhere else still show
        OmegaConf.register_new_resolver("ensemble_bo_test", lambda: 1, replace=True)
        warnings.warn("Hint: Inferred schema contains integer column(s).", UserWarning)
    messages = [str(w.message) for w in caught]
    assert sum("register_new_resolver" in m for m in messages) == 1, messages
    assert sum(m.startswith("Hint: Inferred schema") for m in messages) == 1
    assert all(w.filename == __file__ for w in caught), messages
    OmegaConf.clear_resolver("ensemble_bo_test")


def test_run_summary_for_a_sqlite_store_names_the_command_and_the_page():
    text = run_summary(
        run_id="abc123",
        run_name="segor-concrete-0",
        tracking_uri="sqlite:////home/me/my project/mlflow.db",
        experiment_id="1",
        experiment_name="ensemble_bo",
        metrics={
            "test_mse_single_best": 0.248,
            "test_mse_ensemble": 0.19514,
            "cv_loss_ensemble": 0.2,
        },
    )
    first, *rest = text.split("\n")
    assert first == (
        "MLflow run segor-concrete-0 (abc123) finished, experiment 'ensemble_bo'"
    )
    assert rest[:2] == [
        "  test_mse_ensemble     0.1951",
        "  test_mse_single_best  0.248",
    ]
    assert rest[2].endswith(
        "ui --backend-store-uri 'sqlite:////home/me/my project/mlflow.db'"
    )
    assert (
        rest[3]
        == "  then open http://127.0.0.1:5000/#/experiments/1/runs/abc123?workflowType=machine_learning"
    )
    assert "cv_loss" not in text and len(rest) == 4
    timed_metrics = {
        "test_mse_ensemble": 0.19514,
        "trials": 37.0,
        "search_seconds": 60.84,
        "refit_seconds": 2.31,
        "time_budget_reached": 1.0,
    }
    timed = run_summary(
        run_id="abc123",
        tracking_uri="http://mlflow.example:5000",
        experiment_id="1",
        experiment_name="ensemble_bo",
        metrics=timed_metrics,
    )
    assert timed.split("\n")[2] == (
        "  37 trials searched in 60.8 s (its time budget ended it), refit in 2.3 s"
    )
    kept = {**timed_metrics, "final_fit_seconds_kept": 2.04}
    assert search_line(kept) == (
        "37 trials searched in 60.8 s (its time budget ended it), refit in 2.3 s "
        "(2.0 s kept for it)"
    )
    one = run_summary(
        run_id="abc123",
        tracking_uri="http://mlflow.example:5000",
        experiment_id="1",
        experiment_name="ensemble_bo",
        metrics={"trials": 1.0, "search_seconds": 3.0, "refit_seconds": 0.5},
    )
    assert one.split("\n")[1] == "  1 trial searched in 3.0 s, refit in 0.5 s"


def test_the_summary_gives_the_90_percent_intervals_or_sets_in_one_line():
    coverage = {
        f"test_interval_{what}_{level}": value
        for level in (80, 90, 95)
        for what, value in (("coverage", level / 100 + 0.004), ("width", 1.5))
    }
    text = run_summary(
        run_id="abc123",
        tracking_uri="http://mlflow.example:5000",
        experiment_id="1",
        experiment_name="ensemble_bo",
        metrics={"test_mse_ensemble": 0.19514, **coverage},
    )
    assert text.split("\n")[1:3] == [
        "  test_mse_ensemble  0.1951",
        "  90% intervals: 90.4% of test targets inside, mean width 1.5 standard "
        "deviations",
    ]
    sets = run_summary(
        run_id="abc123",
        tracking_uri="http://mlflow.example:5000",
        experiment_id="1",
        experiment_name="ensemble_bo",
        metrics={"test_set_coverage_90": 0.9149, "test_set_size_90": 0.9202},
    )
    assert sets.split("\n")[1] == (
        "  90% sets: 91.5% hold the test class, 0.92 classes on average"
    )


def test_a_resumed_runs_summary_tells_the_trials_trained_from_those_replayed():
    metrics = {"trials": 60.0, "search_seconds": 201.26, "refit_seconds": 3.1}
    assert search_line({**metrics, "trials_reused": 5.0}) == (
        "60 trials (55 trained in this run, 5 replayed from the journal of a "
        "stopped run) searched in 201.3 s, refit in 3.1 s"
    )
    assert search_line({**metrics, "trials_reused": 0.0}) == (
        "60 trials searched in 201.3 s, refit in 3.1 s"
    )
    # the whole run, what a time budget is measured against
    assert search_line({**metrics, "run_seconds": 231.04}) == (
        "60 trials searched in 201.3 s, refit in 3.1 s; the whole run 231.0 s"
    )


def test_run_summary_for_a_server_links_the_run_and_logs_at_info(caplog):
    assert where_to_look("http://mlflow.example:5000/", "7", "r1") == [
        "Open http://mlflow.example:5000/#/experiments/7/runs/r1?workflowType=machine_learning"
    ]
    assert where_to_look("http://mlflow.example:5000/", "7", "r1", "v")[1] == (
        "Compare runs by test metrics: http://mlflow.example:5000/#/experiments/7/"
        "runs?viewStateShareKey=v&workflowType=machine_learning"
    )
    local = where_to_look("sqlite:///mlflow.db", "7", "r1", "v")
    assert local[2] == (
        "  or compare runs by test metrics: http://127.0.0.1:5000/#/experiments/7/"
        "runs?viewStateShareKey=v&workflowType=machine_learning"
    )
    with caplog.at_level(logging.INFO, logger="ensemble_bo.summary"):
        log_run_summary(
            run_id="r1",
            tracking_uri="http://mlflow.example:5000",
            experiment_id="7",
            experiment_name="team",
            metrics={},
            status="FAILED",
        )
    assert caplog.records[-1].getMessage() == (
        "MLflow run r1 failed, experiment 'team'\n"
        "Open http://mlflow.example:5000/#/experiments/7/runs/r1?workflowType=machine_learning"
    )


def test_ensemble_bo_help_lists_its_commands():
    completed = subprocess.run(
        [sys.executable, "-m", "ensemble_bo", "--help"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    commands = completed.stdout.split("Commands:")[1].split()
    assert {"rerun", "run", "scheduled"} <= set(commands)
    assert "without a command is `run`" in completed.stdout
