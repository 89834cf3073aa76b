"""The project's `kedro` commands: Kedro's own `run`, quiet by default.

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
from pathlib import Path
from typing import Any

import click
import yaml
from kedro.framework.cli.project import run as kedro_run
from kedro.framework.cli.utils import KedroCliError
from kedro.framework.project import LOGGING, configure_logging
from kedro.utils import find_config_file, find_kedro_project

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
        if verbose:
            raise
        click.secho("Interrupted.", err=True, fg="red")
        raise click.exceptions.Exit(130) from None
    except Exception as error:
        if verbose:
            raise
        raise RunFailed(error) from error


@click.group(name=PACKAGE)
def cli() -> None:
    """Ensemble BO's project commands."""


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

use_project_logging()
