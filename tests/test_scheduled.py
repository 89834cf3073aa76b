"""The schedule that ships with the repo: its CI workflow, its job list, their checks.

`make scheduled` itself runs twice against a real server in
tests/test_mlflow_server.py.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner
from omegaconf import OmegaConf

from ensemble_bo.api import default_parameters
from ensemble_bo.cli import cli
from ensemble_bo.pipeline_registry import register_pipelines
from ensemble_bo.scheduled import SCHEDULE, Job, read_schedule
from ensemble_bo.validation import check_run_inputs
from tests.support import PROJECT

WORKFLOW = PROJECT / ".github" / "workflows" / "scheduled.yml"


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_runs_on_a_cron_schedule_and_by_hand(workflow):
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    (schedule,) = triggers["schedule"]
    fields = schedule["cron"].split()
    assert len(fields) == 5, schedule["cron"]
    assert "workflow_dispatch" in triggers
    assert workflow["concurrency"]["cancel-in-progress"] is False


def test_the_workflow_logs_to_the_server_of_a_secret_with_the_whole_history(
    workflow,
):
    (job,) = workflow["jobs"].values()
    assert job["env"]["MLFLOW_TRACKING_URI"] == "${{ secrets.MLFLOW_TRACKING_URI }}"
    checkout = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")
    )
    assert checkout["with"]["fetch-depth"] == 0  # reruns check out older commits
    python = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python")
    )
    assert python["with"]["python-version"] == "3.11"


def test_the_workflows_commands_are_make_targets_that_exist(workflow):
    (job,) = workflow["jobs"].values()
    commands = [
        line.strip()
        for step in job["steps"]
        for line in step.get("run", "").splitlines()
        if line.strip().startswith("make ")
    ]
    assert commands == ['make scheduled ARGS="--schedule $SCHEDULE"']
    for command in commands:
        target = shlex.split(command)[1]
        dry_run = subprocess.run(
            [
                "make",
                "-n",
                "-o",
                f"{sys.prefix}/.installed",
                f"VENV={sys.prefix}",
                target,
            ],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert dry_run.returncode == 0, dry_run.stderr
        assert f"ensemble-bo {target}" in dry_run.stdout


def test_the_shipped_jobs_are_runs_that_would_start(tmp_path):
    jobs = read_schedule(PROJECT / SCHEDULE)
    assert jobs
    pipelines = register_pipelines()
    for job in jobs:
        assert job.pipeline in pipelines, job
        parameters = OmegaConf.to_container(
            OmegaConf.merge(default_parameters(), job.params)
        )
        check_run_inputs(job.pipeline, parameters, PROJECT)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected `jobs:`"),
        ("jobs: [a, b]", "expected `jobs:`"),
        ("jobs: {a: {params: {seed: 1}}}", "jobs.a needs `pipeline: <name>`"),
        (
            "jobs: {a: {pipeline: segor, budget: 3}}",
            "jobs.a has unknown keys ['budget']",
        ),
        (
            "jobs: {a: {pipeline: segor, params: [1]}}",
            "jobs.a.params must be a mapping",
        ),
        ("jobs: {a: [", "cannot read the schedule"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_file_and_the_entry(
    tmp_path, text, message
):
    path = tmp_path / "schedule.yml"
    path.write_text(text)
    with pytest.raises(ValueError, match="schedule.yml") as error:
        read_schedule(path)
    assert message in str(error.value)


def test_a_good_schedule_reads_as_jobs(tmp_path):
    path = tmp_path / "schedule.yml"
    path.write_text(
        "jobs:\n  nightly:\n    pipeline: sego\n    env: team\n"
        "    params: {dataset: wine, seed: 3}\n  plain: {pipeline: segor}\n"
    )
    assert read_schedule(path) == [
        Job("nightly", "sego", {"dataset": "wine", "seed": 3}, "team"),
        Job("plain", "segor", {}, None),
    ]


def test_ensemble_bo_scheduled_stops_on_a_bad_schedule_before_running_anything(
    monkeypatch, tmp_path
):
    monkeypatch.chdir(PROJECT)
    missing = tmp_path / "nosuch.yml"
    result = CliRunner().invoke(cli, ["scheduled", "--schedule", str(missing)])
    assert result.exit_code == 1
    assert f"cannot read the schedule {missing}" in result.output
