"""`ensemble-bo rerun RUN_ID`: run a recorded run again from its commit, and compare.

1. Reads the run from the tracking store (the project's, or MLFLOW_TRACKING_URI).
2. Refuses a run that cannot be reproduced: no commit, a dirty working tree
   or a conf/local that changed since (unless --allow-dirty), a partial run
   (--from-nodes, --tags...), another Python, an environment whose packages
   differ from the run's lock (it refuses rather than building a venv behind
   the user's back: the message says how to get one), or raw data whose
   sha256 differs from the one the run logged.
3. Checks out the run's commit in a temporary git worktree (conf/local and
   data git does not track are taken from the project), runs the same
   pipelines with the same Kedro env and `--params` overrides in a new process
   against the same store and experiment, tagged `rerun_of=<RUN_ID>`.
4. Compares the two runs: every `test_*` metric, every table a search reports
   (reporting.SEARCH_REPORTS: the trial history, i.e. the pool's
   configurations and CV losses, the ensemble composition, a multi-fidelity
   search's rung history; without timings), a benchmark's table of cells
   (each cell's test and CV loss), every parameter. Identical: exit 0;
   otherwise a table of the differences and exit 1. A refusal, or a rerun
   that stopped before it opened a run, exits 2.

A posthoc run selected from "the latest run" of a method; its rerun reads the
very pool the run read (its `pool_source` tag), not today's latest.

Reads the store with MlflowClient; the runs themselves are logged by the
tracking hook (tracking/hook.py) of the process this module starts.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.config import OmegaConfigLoader
from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from ensemble_bo import provenance
from ensemble_bo.reporting import SEARCH_REPORTS, TABLE
from ensemble_bo.settings import CONFIG_LOADER_ARGS
from ensemble_bo.tracking.pools import POOL_SOURCE_TAG, latest_finished_run
from ensemble_bo.tracking.run_tags import (
    DATA_FILE_TAG,
    DATA_SHA256_TAG,
    ENV_TAG,
    EXTRA_TAGS_VARIABLE,
    PARTIAL_RUN_TAG,
    PIPELINE_TAG,
    RERUN_OF_TAG,
    RUNTIME_PARAMS_ARTIFACT,
)
from ensemble_bo.tracking.store import display_uri, resolve_tracking_uri
from ensemble_bo.validation import RAW_DATA

# A unique id per launch, to find the run a launched process opened.
LAUNCH_TAG = "launch.id"
RESULT_TABLES = "tables"
BENCHMARK_CELLS = f"{RESULT_TABLES}/benchmark_tables/cells.csv"
# Exit codes of `ensemble-bo rerun` (0: reproduced).
DIFFERENT = 1
REFUSED = 2

# Runs the pipelines of a project checkout in this interpreter, as `kedro run`
# does; the overrides go in as the dict the original run logged, so no value is
# re-parsed from text.
_RUN_SCRIPT = """
import json, sys
from pathlib import Path
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

request = json.loads(sys.argv[1])
bootstrap_project(Path.cwd())
with KedroSession.create(
    project_path=Path.cwd(), env=request["env"], runtime_params=request["params"]
) as session:
    session.run(pipeline_names=request["pipelines"])
"""


class RerunRefused(RuntimeError):
    """The run cannot be rerun as recorded; the message says why and what to do."""


@dataclass(frozen=True)
class Launch:
    """How to start a run: the pipelines, the Kedro env and the overrides."""

    pipelines: list[str]
    env: str | None
    params: dict[str, Any]
    tags: dict[str, str] = field(default_factory=dict)


def tracking_store(project_path: Path) -> tuple[str, str]:
    """(tracking URI, experiment name) a `kedro run` in the project would use."""
    loader = OmegaConfigLoader(
        conf_source=str(project_path / "conf"), **CONFIG_LOADER_ARGS
    )
    config = loader["mlflow"]
    return (
        resolve_tracking_uri(config["tracking_uri"], project_path),
        config["experiment_name"],
    )


def launch(
    checkout: Path,
    request: Launch,
    tracking_uri: str,
    experiment_name: str,
) -> str | None:
    """Run `request` in `checkout` in a new process; the id of the MLflow run it
    opened (None if it opened none). Its output goes to this process's."""
    launch_id = uuid.uuid4().hex
    environment = {
        **os.environ,
        "MLFLOW_TRACKING_URI": tracking_uri,
        "MLFLOW_EXPERIMENT_NAME": experiment_name,
        EXTRA_TAGS_VARIABLE: json.dumps({**request.tags, LAUNCH_TAG: launch_id}),
        # the checkout's package, not the one installed from elsewhere
        "PYTHONPATH": os.pathsep.join(
            [str(checkout / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    payload = {
        "pipelines": request.pipelines or None,  # None: the default pipeline
        "env": request.env,
        "params": request.params,
    }
    subprocess.run(
        [sys.executable, "-c", _RUN_SCRIPT, json.dumps(payload)],
        cwd=checkout,
        env=environment,
        check=False,
    )
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{LAUNCH_TAG}` = '{launch_id}'",
        run_view_type=ViewType.ALL,
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def latest_run(
    client: MlflowClient, experiment_name: str, pipeline: str, tag: str | None = None
) -> Run | None:
    """The latest FINISHED run of a pipeline (and with `tag`, "name=value", if given)."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return None
    conditions = [f"tags.`{PIPELINE_TAG}` = '{pipeline}'"]
    if tag is not None:
        name, _, value = tag.partition("=")
        conditions.append(f"tags.`{name}` = '{value}'")
    return latest_finished_run(client, experiment.experiment_id, *conditions)


def recorded_launch(client: MlflowClient, run: Run) -> Launch:
    """How `run` was started, from its tags and its runtime-params artifact."""
    tags = run.data.tags
    if tags.get(PARTIAL_RUN_TAG):
        raise RerunRefused(
            f"run {run.info.run_id} ran part of its pipeline "
            f"({tags[PARTIAL_RUN_TAG]}): only whole pipelines can be rerun"
        )
    if ENV_TAG not in tags or PIPELINE_TAG not in tags:
        raise RerunRefused(
            f"run {run.info.run_id} has no {ENV_TAG}/{PIPELINE_TAG} tags: it was "
            "made by a version of this project that did not record how it was "
            "started"
        )
    with tempfile.TemporaryDirectory() as directory:
        params = json.loads(
            Path(
                client.download_artifacts(
                    run.info.run_id, RUNTIME_PARAMS_ARTIFACT, directory
                )
            ).read_text()
        )
    if POOL_SOURCE_TAG in tags:
        # the pool this run read, not the latest one at the time of the rerun
        params["posthoc_source"] = tags[POOL_SOURCE_TAG]
    pipelines = tags[PIPELINE_TAG]
    return Launch(
        pipelines=[] if pipelines == "__default__" else pipelines.split(","),
        env=tags[ENV_TAG] or None,
        params=params,
        tags={RERUN_OF_TAG: run.info.run_id},
    )


def check_commit(run: Run, allow_dirty: bool) -> str:
    tags = run.data.tags
    commit = tags.get(provenance.COMMIT_TAG)
    if not commit:
        raise RerunRefused(
            f"run {run.info.run_id} records no git commit (it ran outside a git "
            "repository): there is no code to check out"
        )
    if tags.get(provenance.DIRTY_TAG) == "true" and not allow_dirty:
        raise RerunRefused(
            f"run {run.info.run_id} ran on uncommitted changes "
            f"({tags.get(provenance.DIRTY_FILES_TAG, 'files not recorded')}): its "
            f"commit {commit[:12]} alone is not its code. Rerun anyway from the "
            "commit with --allow-dirty"
        )
    return commit


@contextmanager
def worktree(project_path: Path, commit: str) -> Iterator[Path]:
    """The commit checked out in a temporary worktree of the project's repository."""
    folder = Path(tempfile.mkdtemp(prefix="ensemble-bo-rerun-")) / "checkout"
    completed = subprocess.run(
        ["git", "worktree", "add", "--detach", str(folder), commit],
        cwd=project_path,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        shutil.rmtree(folder.parent, ignore_errors=True)
        raise RerunRefused(
            f"cannot check out commit {commit[:12]} ({completed.stderr.strip()}): "
            "fetch it into this repository (git fetch), or rerun from a clone "
            "that has it"
        )
    try:
        yield folder
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(folder)],
            cwd=project_path,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder.parent, ignore_errors=True)


def recorded_data(run: Run) -> dict[str, str]:
    """Raw data file (relative to the project) -> the sha256 the run logged."""
    tags = run.data.tags
    files = {}
    if tags.get(DATA_FILE_TAG) and tags.get(DATA_SHA256_TAG):
        files[tags[DATA_FILE_TAG]] = tags[DATA_SHA256_TAG]
    prefix = f"{DATA_SHA256_TAG}."
    for name, value in tags.items():
        if name.startswith(prefix):  # a benchmark's datasets
            files[(RAW_DATA / f"{name.removeprefix(prefix)}.csv").as_posix()] = value
    return files


def bring_untracked_inputs(
    project_path: Path, checkout: Path, run: Run, allow_dirty: bool
) -> None:
    """conf/local (never in git; refused if it changed since the run) and the
    raw data files the commit lacks, from the project."""
    local = project_path / provenance.LOCAL_CONF
    logged = run.data.tags.get(provenance.LOCAL_CONF_TAG)
    if logged and provenance.folder_sha256(local) != logged and not allow_dirty:
        raise RerunRefused(
            f"{provenance.LOCAL_CONF} changed since run {run.info.run_id} (git does not "
            "keep it, so its content then is not known): restore it, or rerun "
            "with --allow-dirty to use today's"
        )
    if local.is_dir():
        shutil.copytree(local, checkout / provenance.LOCAL_CONF, dirs_exist_ok=True)
    for data_file in recorded_data(run):
        if not (checkout / data_file).exists() and (project_path / data_file).is_file():
            (checkout / data_file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project_path / data_file, checkout / data_file)


def check_data(run: Run, checkout: Path) -> None:
    """Every raw data file the run read has the bytes it had then."""
    for data_file, logged in recorded_data(run).items():
        path = checkout / data_file
        if not path.is_file():
            raise RerunRefused(
                f"{data_file}, which run {run.info.run_id} read, is neither in its "
                "commit nor in this project: put the file back"
            )
        now = provenance.file_sha256(path)
        if now != logged:
            raise RerunRefused(
                f"{data_file} changed since run {run.info.run_id}: its sha256 is "
                f"{now[:12]}..., the run read {logged[:12]}... Restore the file the "
                "run read to rerun it"
            )


def check_environment(run: Run, checkout: Path) -> None:
    """This interpreter's packages are the ones of the run's lock."""
    logged = run.data.tags.get(provenance.LOCK_TAG)
    lock = checkout / provenance.LOCK_FILE
    python = run.data.tags.get(provenance.PYTHON_TAG)
    if python and python != platform.python_version():
        raise RerunRefused(
            f"run {run.info.run_id} ran on Python {python}, this is "
            f"{platform.python_version()}: rerun it with that Python's venv"
        )
    if not logged or not lock.is_file():
        return  # the run recorded no lock: nothing to check against
    if provenance.file_sha256(lock) != logged:
        raise RerunRefused(
            f"{provenance.LOCK_FILE} at the run's commit is not the lock the run "
            "logged (it was changed without being committed): the run's "
            "environment is unknown"
        )
    if provenance.venv_lock_sha256() == logged:
        return
    differences = provenance.environment_differences(lock.read_text())
    if differences:
        listed = ", ".join(
            f"{name} {pinned} (here {here})" for name, pinned, here in differences[:10]
        )
        commit = run.data.tags[provenance.COMMIT_TAG][:12]
        raise RerunRefused(
            f"this environment differs from the run's {provenance.LOCK_FILE} in "
            f"{len(differences)} packages: {listed}. Rerun from a venv built from "
            f"that lock: `git worktree add ../rerun-env {commit} && make -C "
            "../rerun-env .venv/.installed`, then run ../rerun-env/.venv/bin/"
            "ensemble-bo rerun from here"
        )


def _artifact_files(client: MlflowClient, run_id: str, folder: str) -> Iterator[str]:
    for artifact in client.list_artifacts(run_id, folder):
        if artifact.is_dir:
            yield from _artifact_files(client, run_id, artifact.path)
        else:
            yield artifact.path


def is_compared(path: str) -> bool:
    """Whether a rerun compares the table at artifact path `path`: every table a
    search reports (reporting.SEARCH_REPORTS, tables/<method>_<report>.csv)
    and a benchmark's cells."""
    folder, _, file = path.rpartition("/")
    return path == BENCHMARK_CELLS or (
        folder == RESULT_TABLES
        and file.endswith(
            tuple(
                f"_{name}.csv"
                for name, report in SEARCH_REPORTS.items()
                if report.kind == TABLE
            )
        )
    )


def result_tables(client: MlflowClient, run_id: str) -> dict[str, pd.DataFrame]:
    """The run's compared tables (is_compared): a search's trial history (its
    pool: every configuration and its CV losses), ensemble composition and a
    multi-fidelity search's rung history, a benchmark's cells; by artifact
    path, without timings."""
    tables = {}
    with tempfile.TemporaryDirectory() as directory:
        for path in _artifact_files(client, run_id, RESULT_TABLES):
            if is_compared(path):
                table = pd.read_csv(client.download_artifacts(run_id, path, directory))
                tables[path] = table.drop(
                    columns=[c for c in table.columns if "_seconds" in c]
                )
    return tables


def differences(
    client: MlflowClient, original: Run, rerun: Run
) -> list[tuple[str, str, str]]:
    """(what, original, rerun) for each test metric, composition and parameter that differs."""
    rows = []

    def compare(kind: str, first: Mapping[str, Any], second: Mapping[str, Any]) -> None:
        for name in sorted(set(first) | set(second)):
            before, after = first.get(name, "(missing)"), second.get(name, "(missing)")
            if before != after and not (_is_nan(before) and _is_nan(after)):
                rows.append((f"{kind} {name}", str(before), str(after)))

    def test_metrics(run: Run) -> dict[str, float]:
        return {k: v for k, v in run.data.metrics.items() if k.startswith("test_")}

    compare("metric", test_metrics(original), test_metrics(rerun))
    # a posthoc rerun names the pool its original read (recorded_launch): compared by tag
    overridden = {"posthoc_source"} if POOL_SOURCE_TAG in original.data.tags else set()
    compare(
        "param",
        {k: v for k, v in original.data.params.items() if k not in overridden},
        {k: v for k, v in rerun.data.params.items() if k not in overridden},
    )
    compare(
        "tag",
        {k: v for k, v in original.data.tags.items() if k == POOL_SOURCE_TAG},
        {k: v for k, v in rerun.data.tags.items() if k == POOL_SOURCE_TAG},
    )
    before = result_tables(client, original.info.run_id)
    after = result_tables(client, rerun.info.run_id)
    for path in sorted(set(before) | set(after)):
        if path not in before or path not in after:
            rows.append(
                (
                    path,
                    "present" if path in before else "(missing)",
                    "present" if path in after else "(missing)",
                )
            )
        elif not before[path].equals(after[path]):
            rows.append((path, *_first_difference(before[path], after[path])))
    return rows


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _first_difference(first: pd.DataFrame, second: pd.DataFrame) -> tuple[str, str]:
    """The first row (as CSV text) where two tables differ, or their shapes."""
    if first.shape != second.shape or list(first.columns) != list(second.columns):
        return (
            f"{first.shape} {list(first.columns)}",
            f"{second.shape} {list(second.columns)}",
        )
    for (_, row), (_, other) in zip(first.iterrows(), second.iterrows()):
        if not row.equals(other):
            return _row_text(row), _row_text(other)
    return "", ""


def _row_text(row: pd.Series) -> str:
    return ", ".join(f"{name}={value}" for name, value in row.items())[:200]


def format_table(rows: list[tuple[str, str, str]]) -> str:
    header = ("difference", "original", "rerun")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def time_budget_note(run: Run) -> str:
    """Why a run searched under a time budget may not reproduce, and what does."""
    time_budget = run.data.params.get("time_budget", "None")
    trials = run.data.metrics.get("trials")
    if time_budget in ("None", "") or trials is None or weighed_seconds(run):
        return ""
    whole_brackets = run.data.metrics.get("fidelity_whole_brackets_equivalents")
    if whole_brackets is not None:
        # its budget counts full-fidelity equivalents, the time budget cut a bracket
        return (
            f"Run {run.info.run_id} searched under a time budget of {time_budget} s: "
            "how many brackets of its multi-fidelity schedule fit in it depends on "
            "the machine's speed and load, so a rerun may end with another pool "
            f"than its {trials:.0f} trials. Its pool is that of the same search "
            "without a time budget, stopped after the brackets it completed: "
            f"--params budget={whole_brackets!r},time_budget=null repeats it (the "
            "bracket the time budget ended unfinished is left out of its rung "
            "history)."
        )
    return (
        f"Run {run.info.run_id} searched under a time budget of {time_budget} s: "
        "how many trials fit in it depends on the machine's speed and load, so a "
        f"rerun may train another number than its {trials:.0f}. Its trials are the "
        "first ones of the same search without a time budget: --params "
        f"budget={trials:.0f},time_budget=null repeats them (a last trial the "
        "budget cut then trains in full; so does a trial cut at its share of "
        "the budget, max_trial_share, after which the two searches part)."
    )


def weighed_seconds(run: Run) -> bool:
    """Whether the run's optimizer chose by EI per second (a measured-time input)."""
    return bool(run.data.metrics.get("proposals_weighed_seconds"))


def measured_seconds_note(run: Run) -> str:
    """Why a run whose optimizer weighed its trials' seconds may not reproduce."""
    if not weighed_seconds(run):
        return ""
    trials = run.data.metrics.get("trials")
    count = "its trials" if trials is None else f"its {trials:.0f} trials"
    return (
        f"Run {run.info.run_id} chose its configurations by EI per second "
        "(optimizer.acquisition ei_per_second): each proposal weighed the seconds "
        "earlier trials took, which the machine's speed and load decide, so a "
        f"rerun may search other configurations than {count}, and no parameter "
        "repeats them. A search with EI, e.g. --params "
        "segor.optimizer.acquisition=ei (the block of the run's method), is "
        "reproducible from its seed."
    )


def async_note(run: Run) -> str:
    """Why a run whose trials trained in async mode may not reproduce."""
    params = run.data.params
    workers = params.get("parallel.n_workers", "1")
    if params.get("parallel.mode") != "async" or (
        workers == "1" and params.get("parallel.backend") == "local"
    ):
        return ""
    return (
        f"Run {run.info.run_id} trained its trials in async mode "
        f"(parallel.n_workers={workers}): each proposal followed the trials that "
        "had ended first, which the machines' speed and load decide, so a rerun "
        "may search other configurations. --params parallel.mode=sync searches "
        "the same configurations for a seed and n_workers, wherever they train."
    )


@dataclass
class RerunOutcome:
    original_id: str
    rerun_id: str
    differences: list[tuple[str, str, str]]
    note: str = ""

    @property
    def identical(self) -> bool:
        return not self.differences

    def report(self) -> str:
        if self.identical:
            return (
                f"Reproduced: run {self.rerun_id} (rerun of {self.original_id}) has "
                "the same test metrics, ensemble composition, trials and parameters."
            )
        return (
            f"DIFFERENT: run {self.rerun_id} (rerun of {self.original_id}) differs "
            f"in {len(self.differences)} values:\n" + format_table(self.differences)
        ) + (f"\n{self.note}" if self.note else "")


def rerun(
    run_id: str,
    project_path: Path,
    tracking_uri: str,
    allow_dirty: bool = False,
) -> RerunOutcome:
    """Rerun `run_id` from its commit in a worktree, and compare (module docstring)."""
    client = MlflowClient(tracking_uri)
    try:
        original = client.get_run(run_id)
    except Exception as error:  # noqa: BLE001 - unknown id or unreachable store
        raise RerunRefused(
            f"no run {run_id!r} in {display_uri(tracking_uri)}: "
            f"{str(error).splitlines()[0][:300]}"
        ) from None
    if original.info.status != "FINISHED":
        raise RerunRefused(
            f"run {run_id} is {original.info.status}, not FINISHED: only a finished "
            "run has results to compare"
        )
    request = recorded_launch(client, original)
    commit = check_commit(original, allow_dirty)
    experiment_name = client.get_experiment(original.info.experiment_id).name
    prefix = provenance.project_prefix(project_path)
    with worktree(project_path, commit) as root:
        checkout = root / prefix  # the project, when it is a folder of its repository
        bring_untracked_inputs(project_path, checkout, original, allow_dirty)
        check_data(original, checkout)
        check_environment(original, checkout)
        new_id = launch(checkout, request, tracking_uri, experiment_name)
    if new_id is None:
        raise RerunRefused(
            f"the rerun of {run_id} stopped before it opened an MLflow run: its "
            "output above says why"
        )
    rerun_run = client.get_run(new_id)
    if rerun_run.info.status != "FINISHED":
        return RerunOutcome(
            run_id, new_id, [("status", "FINISHED", rerun_run.info.status)]
        )
    return RerunOutcome(
        run_id,
        new_id,
        differences(client, original, rerun_run),
        "\n".join(
            note
            for note in (
                time_budget_note(original),
                measured_seconds_note(original),
                async_note(original),
            )
            if note
        ),
    )
