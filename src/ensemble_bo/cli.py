"""The project's `kedro` commands: Kedro's own `run`, quiet by default, and
`rerun`, `scheduled`, `verify-model`, `convert-pool` and `upload-run`.

Kedro loads this module for every `kedro` command run in the project (and
`python -m ensemble_bo`); its `run` replaces Kedro's, with the same options plus:

- `--verbose` / `-v`: every `kedro` logger back at INFO (the "Loading data
  from" / "Saving data to" and node lines), and an error ends with its full
  traceback, as plain Kedro does.
- Without it, the logging of conf/logging.yml (progress bar, MLflow run, test
  metrics, warnings), and an error is printed once, at the end, as
  `Error: <type>: <message>`, with exit code 1 (130 for Ctrl-C).
"""

from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path
from typing import Any

import click
import mlflow
import yaml
from kedro.framework.cli.project import run as kedro_run
from kedro.framework.cli.utils import KedroCliError
from kedro.framework.project import LOGGING, configure_logging
from kedro.utils import find_config_file, find_kedro_project
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ensemble_bo.core.result_files import write_result
from ensemble_bo.core.results import EnsembleSearchResult, interrupted_by_user
from ensemble_bo.rerun import (
    DIFFERENT,
    REFUSED,
    RerunRefused,
    latest_run,
    rerun,
    tracking_store,
)
from ensemble_bo.scheduled import SCHEDULE, read_schedule, run_schedule
from ensemble_bo.summary import run_address
from ensemble_bo.tracking.hook import end_interrupted_runs
from ensemble_bo.tracking.model_integrity import ModelNotVerifiable, verify_model
from ensemble_bo.tracking.run_buffer import RunBuffer, RunBufferError
from ensemble_bo.tracking.run_link import RETRIES, TIMEOUT
from ensemble_bo.tracking.store import (
    connection_failure,
    display_uri,
    first_line,
    http_limits,
    server_unreachable,
)
from ensemble_bo.validation import FILE_PREFIX

PACKAGE = __name__.rpartition(".")[0]
LOGGING_FILE = Path("conf") / "logging.yml"


def use_project_logging() -> None:
    """conf/logging.yml also for a command run from a subfolder of the project.

    Kedro looks for conf/logging.yml in the current directory only, and falls
    back to its own (verbose) logging elsewhere; KEDRO_LOGGING_CONFIG still wins.
    """
    if os.environ.get("KEDRO_LOGGING_CONFIG") or find_config_file("conf/logging"):
        return
    project = find_kedro_project(Path.cwd())
    if project is None or not (project / LOGGING_FILE).is_file():
        return
    configure_logging(yaml.safe_load((project / LOGGING_FILE).read_text("utf-8")))
    LOGGING.set_project_logging(PACKAGE)


def verbose_logging(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with every `kedro` logger at INFO and other libraries' left at theirs.

    Loggers the config quiets (other than ours) go back to their library's
    default; handlers take the `verbose` formatter where the config has one.
    """
    config = copy.deepcopy(config)
    loggers = config.setdefault("loggers", {})
    loggers.setdefault("kedro", {})
    for name, options in loggers.items():
        if name == "kedro" or name.startswith("kedro."):
            options["level"] = "INFO"
        elif name != PACKAGE and not name.startswith(f"{PACKAGE}."):
            options["level"] = "NOTSET"
    if "verbose" in config.get("formatters", {}):
        for handler in config.get("handlers", {}).values():
            handler["formatter"] = "verbose"
    return config


def describe_error(error: BaseException) -> str:
    """`Type: message`, then each cause whose message the text does not hold yet."""
    text = f"{type(error).__name__}: {error}".rstrip()
    text += "".join(f"\n{note}" for note in getattr(error, "__notes__", ()))
    cause = error.__cause__ or (
        None if error.__suppress_context__ else error.__context__
    )
    seen = {id(error)}
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        message = str(cause).strip()
        if message and message not in text:
            text += f"\n  caused by {type(cause).__name__}: {message}"
        cause = cause.__cause__ or (
            None if cause.__suppress_context__ else cause.__context__
        )
    return text


class RunFailed(click.ClickException):
    """A failed run, shown as its error's message and a hint, without a traceback."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(describe_error(error))

    def show(self, file: Any = None) -> None:
        click.secho(f"Error: {self.format_message()}", err=True, fg="red")
        click.secho(
            "(`kedro run --verbose ...` shows the full traceback)",
            err=True,
            dim=True,
        )


def _run(verbose: bool, **options: Any) -> Any:
    if verbose:
        configure_logging(verbose_logging(LOGGING.data))
    try:
        return kedro_run.callback(**options)
    except KedroCliError as error:
        # Kedro's own usage errors (e.g. --pipeline with --pipelines): their
        # show() reads sys.exc_info(), which click 8.5 no longer sets there.
        raise click.ClickException(error.format_message()) from error
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except KeyboardInterrupt:
        # Kedro ends no hook on Ctrl-C: without this, MLflow would end the run
        # FINISHED as the process exits.
        end_interrupted_runs()
        if verbose:
            raise
        click.secho("Interrupted.", err=True, fg="red")
        raise click.exceptions.Exit(130) from None
    except Exception as error:
        if verbose:
            raise
        if interrupted_by_user(error):  # a search stopped by Ctrl-C
            click.secho(f"Interrupted: {error}", err=True, fg="red")
            raise click.exceptions.Exit(130) from None
        raise RunFailed(error) from error


@click.group(name=PACKAGE)
def cli() -> None:
    """Ensemble BO's project commands.

    `ensemble-bo [OPTIONS]` without a command is `run` (`kedro run`, quiet):
    `ensemble-bo --pipelines=segor --params budget=60`.
    """


run = click.Command(
    name="run",
    callback=_run,
    params=[
        *kedro_run.params,
        click.Option(
            ["--verbose", "-v"],
            is_flag=True,
            help="Log Kedro's dataset and node lines and show an error's full "
            "traceback.",
        ),
    ],
    help=kedro_run.help,
    short_help=kedro_run.short_help,
    context_settings=kedro_run.context_settings,
)
cli.add_command(run)


def _project() -> Path:
    # the runs' own output is enough: no progress bar per downloaded artifact
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    project = find_kedro_project(Path.cwd())
    if project is None:
        raise click.ClickException(
            f"{Path.cwd()} is not inside a Kedro project (no pyproject.toml with "
            "[tool.kedro]): run this from the project's folder"
        )
    return project


@cli.command(name="rerun")
@click.argument("run_id", required=False)
@click.option(
    "--last", is_flag=True, help="Rerun the latest finished run of --pipeline."
)
@click.option("--pipeline", "pipeline", help="With --last: the pipeline, e.g. segor.")
@click.option(
    "--allow-dirty",
    is_flag=True,
    help="Rerun a run made on uncommitted changes, from its commit alone.",
)
def rerun_command(
    run_id: str | None,
    last: bool,
    pipeline: str | None,
    allow_dirty: bool,
) -> None:
    """Run RUN_ID again from its commit and compare: exit 0 if identical, 1 if not.

    Checks out the run's commit in a temporary git worktree, checks the data's
    sha256 and the environment against the run's, runs the same pipelines with
    the same Kedro env and --params in the same tracking store (tagged
    rerun_of=RUN_ID), and compares every test metric, ensemble composition,
    trial and parameter. A run that cannot be rerun as recorded is refused (exit 2).
    """
    project = _project()
    tracking_uri, experiment_name = tracking_store(project)
    if last == bool(run_id) or (last and not pipeline):
        raise click.UsageError("give a RUN_ID, or --last --pipeline=NAME")
    if last:
        found = latest_run(MlflowClient(tracking_uri), experiment_name, pipeline)
        if found is None:
            raise click.ClickException(
                f"no finished run of pipeline {pipeline!r} in experiment "
                f"{experiment_name!r} of {display_uri(tracking_uri)}"
            )
        run_id = found.info.run_id
    click.echo(f"Rerunning {run_id} from {display_uri(tracking_uri)}")
    try:
        outcome = rerun(run_id, project, tracking_uri, allow_dirty)
    except RerunRefused as error:
        click.secho(f"Cannot rerun: {error}", err=True, fg="red")
        raise click.exceptions.Exit(REFUSED) from None
    click.echo(outcome.report())
    if not outcome.identical:
        raise click.exceptions.Exit(DIFFERENT)


@cli.command(name="scheduled")
@click.option(
    "--schedule",
    "schedule_file",
    type=click.Path(path_type=Path),
    default=SCHEDULE,
    show_default=True,
    help="The jobs to run, relative to the project.",
)
def scheduled_command(schedule_file: Path) -> None:
    """Run the scheduled jobs, and rerun each job's previous scheduled run.

    Exit 1 when a job fails or a rerun differs from its original.
    """
    project = _project()
    try:
        jobs = read_schedule(project / schedule_file)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    tracking_uri, experiment_name = tracking_store(project)
    click.echo(f"Scheduled jobs of {schedule_file} -> {display_uri(tracking_uri)}")
    if not run_schedule(jobs, project, tracking_uri, experiment_name, click.echo):
        raise click.exceptions.Exit(DIFFERENT)


@cli.command(name="verify-model")
@click.argument("model_uri")
@click.option(
    "--expected-sha256",
    help="The run's model.<name>.sha256 tag as you noted it when you trusted the "
    "run: then the run's own record is checked too.",
)
@click.option(
    "--download-to",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the verified copy in this folder, and load the model from there: "
    "what was checked is what loads.",
)
def verify_model_command(
    model_uri: str, expected_sha256: str | None, download_to: Path | None
) -> None:
    """Check a logged model against what its run recorded: exit 0 if it matches.

    MODEL_URI: runs:/<run id>/<model name> or models:/<model id>. Downloads the
    model, computes the sha256 of each of its files (model.skops, MLmodel, the
    shipped code, ...) and compares them, and the types skops is told to trust,
    with the record the run made when it logged the model. Prints what differs
    and exits 1, or that it matches (exit 0).
    """
    if download_to is not None and download_to.exists() and any(download_to.iterdir()):
        raise click.UsageError(
            f"--download-to={download_to} is not empty: name a new folder, so that "
            "it holds the verified copy alone"
        )
    tracking_uri, _ = tracking_store(_project())
    mlflow.set_tracking_uri(tracking_uri)
    try:
        check = verify_model(model_uri, expected_sha256, download_to)
    except ModelNotVerifiable as error:
        raise click.ClickException(f"cannot verify: {error}") from None
    click.echo(check.report())
    if not check.matches:
        raise click.exceptions.Exit(DIFFERENT)


@cli.command(name="convert-pool")
@click.argument("pickled", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("folder", required=False, type=click.Path(path_type=Path))
@click.option(
    "--trust-pickle",
    is_flag=True,
    help="Confirm that PICKLED is a file you trust: unpickling it runs whatever "
    "code it holds.",
)
def convert_pool_command(
    pickled: Path, folder: Path | None, trust_pickle: bool
) -> None:
    """Convert a pool pickled by an earlier version into the data-only format.

    PICKLED: a local file, e.g. data/06_models/smbo_search_result.pkl/<version>/
    smbo_search_result.pkl, or a pool downloaded from an older run. Unpickling
    runs whatever code the file holds, so only a file you trust (your own
    runs wrote it) is converted, and only with --trust-pickle. FOLDER (by
    default PICKLED without .pkl) then holds result.json and arrays.npz; the
    posthoc pipeline reads it with --params posthoc_source=file:FOLDER.
    """
    if not trust_pickle:
        raise click.UsageError(
            f"unpickling {pickled} runs whatever code it holds: if you trust the "
            "file (your own runs wrote it), add --trust-pickle"
        )
    folder = folder or pickled.with_suffix("")
    if folder.exists():
        raise click.ClickException(f"{folder} exists already: name another FOLDER")
    result = pickle.loads(pickled.read_bytes())  # noqa: S301 - trusted by the user
    if not isinstance(result, EnsembleSearchResult):
        raise click.ClickException(
            f"{pickled} holds a {type(result).__name__}, not a search result"
        )
    write_result(result, folder)
    click.echo(
        f"Wrote {folder} ({len(result.pool)} trials); the posthoc pipeline reads "
        f"it with --params posthoc_source={FILE_PREFIX}{folder}"
    )


@cli.command(name="upload-run")
@click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--tracking-uri",
    help="The MLflow server to upload to (default: the one the run was tracked on).",
)
def upload_run_command(folder: Path, tracking_uri: str | None) -> None:
    """Upload what a run kept in FOLDER while its MLflow server did not answer.

    The metrics, parameters, tags, artifacts, model and benchmark cells go into
    the run on the server, in the order they were logged, then the run ends as
    it ended here (a run whose process died meanwhile: KILLED). The folder is
    removed once all of it is on the server; an upload cut short can be
    started again.
    """
    try:
        buffer = RunBuffer.open(folder)
    except RunBufferError as error:
        raise click.ClickException(str(error)) from None
    if buffer.end is None:
        if not buffer.writer_is_gone():
            raise click.ClickException(
                f"the run buffered in {folder} is still going on: it uploads this "
                "itself as soon as its server answers, or names this command when "
                "it ends"
            )
        buffer.end_killed_writer()
    uri = tracking_uri or buffer.tracking_uri
    # This command says where the run is; MLflow's own "View run" lines would repeat it.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    try:
        with http_limits(RETRIES, TIMEOUT):
            buffer.upload(MlflowClient(uri))
    except Exception as error:
        if server_unreachable(error):
            raise click.ClickException(
                f"the MLflow server {display_uri(uri)} cannot be reached "
                f"({connection_failure(error, TIMEOUT)}): start it, or give its "
                "address with --tracking-uri; nothing uploaded so far is lost"
            ) from None
        if isinstance(error, MlflowException):  # e.g. another server, without the run
            raise click.ClickException(
                f"uploading {folder} to MLflow run {buffer.run_id} on "
                f"{display_uri(uri)} failed: {first_line(error)}; {folder} keeps "
                "what is not uploaded yet"
            ) from None
        raise
    buffer.remove()
    click.echo(
        f"MLflow run {buffer.run_id} uploaded to {display_uri(uri)} "
        f"({buffer.end['status'].lower()}); {folder} removed"
    )
    click.echo(
        f"Open {run_address(display_uri(uri), buffer.experiment_id, buffer.run_id)}"
    )


use_project_logging()
