"""`ensemble-bo scheduled` (`make scheduled`): the team's scheduled runs, each verified.

For every job of conf/scheduled/schedule.yml: run it (a new run tagged
`scheduled.job=<job>`), then rerun the job's previous scheduled run from its
own commit (rerun.py) and compare. The command fails when a job fails, a
previous run cannot be rerun, or a rerun differs; it runs every job first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from mlflow.tracking import MlflowClient

from ensemble_bo.rerun import (
    Launch,
    RerunRefused,
    latest_run,
    launch,
    rerun,
)

SCHEDULE = Path("conf") / "scheduled" / "schedule.yml"
JOB_TAG = "scheduled.job"


@dataclass(frozen=True)
class Job:
    name: str
    pipeline: str
    params: dict[str, Any]
    env: str | None = None


def read_schedule(path: Path) -> list[Job]:
    """The jobs of a schedule file, or ValueError naming the file and the bad entry."""
    try:
        content = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read the schedule {path}: {error}") from None
    jobs = (content or {}).get("jobs") if isinstance(content, Mapping) else None
    if not isinstance(jobs, Mapping) or not jobs:
        raise ValueError(f"{path}: expected `jobs:`, a mapping of job names to jobs")
    parsed = []
    for name, job in jobs.items():
        if not isinstance(job, Mapping) or not isinstance(job.get("pipeline"), str):
            raise ValueError(f"{path}: jobs.{name} needs `pipeline: <name>`")
        unknown = set(job) - {"pipeline", "params", "env"}
        if unknown:
            raise ValueError(
                f"{path}: jobs.{name} has unknown keys {sorted(unknown)}; "
                "expected pipeline, params, env"
            )
        params = job.get("params") or {}
        if not isinstance(params, Mapping):
            raise ValueError(f"{path}: jobs.{name}.params must be a mapping")
        parsed.append(Job(str(name), job["pipeline"], dict(params), job.get("env")))
    return parsed


def run_schedule(
    jobs: list[Job],
    project_path: Path,
    tracking_uri: str,
    experiment_name: str,
    echo: Callable[[str], None] = print,
) -> bool:
    """Run each job and verify its previous scheduled run; True when all is well."""
    client = MlflowClient(tracking_uri)
    all_well = True
    for job in jobs:
        previous = latest_run(
            client, experiment_name, job.pipeline, tag=f"{JOB_TAG}={job.name}"
        )
        echo(f"== job {job.name}: kedro run --pipelines={job.pipeline}")
        request = Launch([job.pipeline], job.env, job.params, {JOB_TAG: job.name})
        run_id = launch(project_path, request, tracking_uri, experiment_name)
        status = client.get_run(run_id).info.status if run_id else "not started"
        echo(f"== job {job.name}: run {run_id} {status}")
        all_well &= status == "FINISHED"
        if previous is None:
            echo(f"== job {job.name}: no earlier scheduled run to verify")
            continue
        echo(f"== job {job.name}: rerunning the previous run {previous.info.run_id}")
        try:
            outcome = rerun(previous.info.run_id, project_path, tracking_uri)
        except RerunRefused as error:
            echo(f"== job {job.name}: cannot rerun {previous.info.run_id}: {error}")
            all_well = False
            continue
        echo(outcome.report())
        all_well &= outcome.identical
    return all_well
