"""Concurrent runs and `ensemble-bo rerun`, end to end on a git repository.

Two `kedro run`s at once (seeds 1 and 2) in one project and store; each is then
rerun from its commit in another process: the rerun, a search of its own, is
the solo run their pool and metrics must match. (A rerun that differs exits 1
with the table: tests/test_mlflow_server.py, against a server.) The refusals
run in-process on runs recorded by hand, without training anything.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ensemble_bo import provenance
from ensemble_bo.cli import cli
from ensemble_bo.core.result_files import read_result
from ensemble_bo.reporting import trial_history
from ensemble_bo.rerun import (
    REFUSED,
    RerunOutcome,
    async_note,
    differences,
    format_table,
    latest_run,
    measured_seconds_note,
    recorded_launch,
    time_budget_note,
)
from ensemble_bo.tracking.run_tags import RUNTIME_PARAMS_ARTIFACT
from tests.support import CHEAP_SEGOR, ENSEMBLE_BO, git, git_project, kedro_env

PARAMS = f"dataset=cpu_performance,budget=6,segor.optimizer.n_initial=3,{CHEAP_SEGOR}"
EXPERIMENT = "ensemble_bo"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = git_project(tmp_path_factory.mktemp("rerun") / "project")
    (root / "store").mkdir()
    return root


def store(project: Path) -> str:
    return f"sqlite:///{project / 'store' / 'mlflow.db'}"


@pytest.fixture(scope="module")
def concurrent_runs(project):
    """Seed -> the finished run of each of two `kedro run`s started together."""
    processes = {
        seed: subprocess.Popen(
            [
                *ENSEMBLE_BO,
                "--pipelines=segor",
                "--params",
                f"{PARAMS},seed={seed}",
            ],
            cwd=project,
            env=kedro_env(store(project)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    }
    for process in processes.values():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
    client = MlflowClient(store(project))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    assert {run.info.status for run in runs} == {"FINISHED"}
    return {int(run.data.params["seed"]): run for run in runs}


def rerun(project, *args, extra_env=None):
    return subprocess.run(
        [*ENSEMBLE_BO, "rerun", *args],
        cwd=project,
        env=kedro_env(store(project), **(extra_env or {})),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def reruns_of(project, run_id):
    client = MlflowClient(store(project))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.rerun_of = '{run_id}'"
    )


@pytest.mark.slow
def test_concurrent_runs_keep_their_own_outputs(project, concurrent_runs, tmp_path):
    client = MlflowClient(store(project))
    sessions = {
        seed: run.data.tags["kedro.session_id"] for seed, run in concurrent_runs.items()
    }
    assert sessions[1] != sessions[2]
    histories = {}
    for seed, run in concurrent_runs.items():
        session = sessions[seed]
        saved = project / "data" / "06_models" / "segor_search_result" / session
        local = read_result(saved / "segor_search_result")
        logged = read_result(
            client.download_artifacts(
                run.info.run_id, "pools/segor_search_result", str(tmp_path)
            )
        )
        # the run's own file under data/ is the pool it logged
        pd.testing.assert_frame_equal(trial_history(local), trial_history(logged))
        histories[seed] = trial_history(logged)
        metrics = json.loads(
            (
                project
                / "data"
                / "08_reporting"
                / "segor_test_metrics.json"
                / session
                / "segor_test_metrics.json"
            ).read_text()
        )
        assert metrics["test_mse_ensemble"] == run.data.metrics["test_mse_ensemble"]
    assert not histories[1].equals(histories[2])  # two seeds, two searches
    # the dataset and the seed came from --params
    for seed, run in concurrent_runs.items():
        # ... and name the run, with the other overrides that set it apart
        name = run.info.run_name
        assert name.startswith(f"segor-cpu_performance-{seed} budget=6 "), name
        assert "segor.optimizer.n_initial=3" in name
        assert run.data.params["dataset_info.name"] == "cpu_performance"
        assert run.data.params["dataset_info.rows"] == "209"
    # each run says which outputs are its own
    assert {run.data.tags["data.sha256"] for run in concurrent_runs.values()} == {
        provenance.file_sha256(project / "data" / "01_raw" / "cpu_performance.csv")
    }


@pytest.mark.slow
def test_reruns_alone_reproduce_each_concurrent_run(project, concurrent_runs):
    # the project moved on since: a rerun runs the configuration of its run's commit
    segor = project / "conf" / "base" / "parameters_segor.yml"
    segor.write_text(segor.read_text().replace("variant: f-m", "variant: g-h"))
    git(project, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qam", "g-h")
    # both reruns at once, too: each in its own worktree
    processes = {
        seed: subprocess.Popen(
            [*ENSEMBLE_BO, "rerun", run.info.run_id],
            cwd=project,
            env=kedro_env(store(project)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed, run in concurrent_runs.items()
    }
    for seed, process in processes.items():
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
        original = concurrent_runs[seed]
        assert f"(rerun of {original.info.run_id}) has the same" in stdout
        (new,) = reruns_of(project, original.info.run_id)
        assert new.info.status == "FINISHED"
        assert new.info.run_name == (
            f"{original.info.run_name} rerun of {original.info.run_id[:8]}"
        )
        assert (
            new.data.tags["mlflow.source.git.commit"]
            == (original.data.tags["mlflow.source.git.commit"])
        )
        assert (
            new.data.tags["kedro.runtime_params"]
            == (original.data.tags["kedro.runtime_params"])
        )
    # the worktrees they ran in are gone
    assert len(git(project, "worktree", "list").splitlines()) == 1


# ------------------------------------------------------------- refusals


@pytest.fixture
def in_project(project, monkeypatch):
    """CLI calls in the project, on a store experiment of runs recorded by hand."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store(project))
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "recorded")
    return project


def recorded_experiment(project, client) -> str:
    """The experiment of runs recorded by hand; artifacts in the project's store
    (MLflow's default would be ./mlruns in the current folder)."""
    experiment = client.get_experiment_by_name("recorded")
    if experiment is not None:
        return experiment.experiment_id
    artifacts = (project / "store" / "recorded").as_uri()
    return client.create_experiment("recorded", artifact_location=artifacts)


def recorded_run(project, status="FINISHED", drop=(), **tags) -> str:
    """A run as the tracking hook records one (no results): its id."""
    client = MlflowClient(store(project))
    experiment_id = recorded_experiment(project, client)
    commit = git(project, "rev-parse", "HEAD")
    recorded = {
        "kedro.pipeline": "segor",
        "kedro.env": "",
        provenance.COMMIT_TAG: commit,
        provenance.DIRTY_TAG: "false",
        **tags,
    }
    run = client.create_run(
        experiment_id, tags={k: v for k, v in recorded.items() if k not in drop}
    )
    client.log_text(run.info.run_id, "{}", RUNTIME_PARAMS_ARTIFACT)
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def refused(run_id: str, *options: str) -> str:
    result = CliRunner().invoke(cli, ["rerun", run_id, *options])
    assert result.exit_code == REFUSED, result.output
    return result.output


def test_a_run_on_uncommitted_changes_is_refused_unless_allowed(in_project):
    run_id = recorded_run(
        in_project,
        **{provenance.DIRTY_TAG: "true", provenance.DIRTY_FILES_TAG: "src/x.py"},
    )
    output = refused(run_id)
    assert "uncommitted changes (src/x.py)" in output
    assert "--allow-dirty" in output


@pytest.mark.parametrize(
    ("status", "drop", "tags", "message"),
    [
        ("FAILED", (), {}, "is FAILED, not FINISHED"),
        ("FINISHED", (provenance.COMMIT_TAG,), {}, "records no git commit"),
        ("FINISHED", ("kedro.env",), {}, "did not record how it was started"),
        (
            "FINISHED",
            (),
            {"kedro.partial_run": '{"tags": ["fit"]}'},
            "ran part of its pipeline",
        ),
    ],
    ids=["not-finished", "no-commit", "no-launch-tags", "partial"],
)
def test_runs_that_cannot_be_rerun_are_refused(in_project, status, drop, tags, message):
    assert message in refused(recorded_run(in_project, status, drop, **tags))


@pytest.mark.parametrize(
    "tags",
    [
        {"data.file": "data/01_raw/private.csv", "data.sha256": "{logged}"},
        {"data.sha256.private": "{logged}"},  # a benchmark's dataset
    ],
    ids=["dataset", "benchmark"],
)
def test_data_that_changed_since_the_run_is_refused_naming_the_file(in_project, tags):
    # a file git does not have (the rerun takes it from the project), changed since
    data = in_project / "data" / "01_raw" / "private.csv"
    data.write_text("x,target\n1,2\n")
    logged = provenance.file_sha256(data)
    data.write_text("x,target\n1,3\n")
    try:
        run_id = recorded_run(
            in_project, **{k: v.format(logged=logged) for k, v in tags.items()}
        )
        output = refused(run_id)
    finally:
        data.unlink()
    assert f"data/01_raw/private.csv changed since run {run_id}" in output
    assert logged[:12] in output


def test_a_conf_local_that_changed_since_the_run_is_refused(in_project):
    local = in_project / "conf" / "local"
    run_id = recorded_run(
        in_project, **{provenance.LOCAL_CONF_TAG: provenance.folder_sha256(local)}
    )
    (local / "parameters.yml").write_text("seed: 5\n")
    try:
        output = refused(run_id)
    finally:
        (local / "parameters.yml").unlink()
    assert "conf/local changed since run" in output and "--allow-dirty" in output


def test_another_python_is_refused(in_project):
    output = refused(recorded_run(in_project, **{provenance.PYTHON_TAG: "3.10.0"}))
    assert "ran on Python 3.10.0" in output


def test_an_environment_unlike_the_runs_lock_is_refused_naming_packages(
    in_project, monkeypatch
):
    lock = in_project / provenance.LOCK_FILE
    pinned = provenance.locked_versions(lock.read_text())["numpy"]
    installed = provenance.installed_version
    monkeypatch.setattr(provenance, "venv_lock_sha256", lambda: None)
    monkeypatch.setattr(
        provenance,
        "installed_version",
        lambda name: "1.0.0" if name == "numpy" else installed(name),
    )
    run_id = recorded_run(
        in_project, **{provenance.LOCK_TAG: provenance.file_sha256(lock)}
    )
    output = refused(run_id)
    assert f"numpy {pinned} (here 1.0.0)" in output
    assert "1 packages" in output


def test_an_unknown_run_is_refused(in_project):
    assert "no run 'nosuchrun'" in refused("nosuchrun")


def test_last_finds_the_latest_finished_run_of_the_pipeline(in_project):
    first = recorded_run(in_project)
    recorded_run(in_project, status="FAILED")
    recorded_run(in_project, **{"kedro.pipeline": "sego"})
    client = MlflowClient(store(in_project))
    assert latest_run(client, "recorded", "segor").info.run_id == first
    assert latest_run(client, "recorded", "esmbo") is None
    assert latest_run(client, "nosuch", "segor") is None
    usage = CliRunner().invoke(cli, ["rerun", "--last"])
    assert usage.exit_code == 2 and "--last --pipeline=NAME" in usage.output
    # the command takes that run: here a dirty one, so it is refused by its id
    dirty = recorded_run(in_project, **{provenance.DIRTY_TAG: "true"})
    result = CliRunner().invoke(cli, ["rerun", "--last", "--pipeline=segor"])
    assert result.exit_code == REFUSED
    assert f"run {dirty} ran on uncommitted changes" in result.output


def test_the_comparison_covers_metrics_tables_of_any_depth_and_parameters(
    project, tmp_path
):
    client = MlflowClient(store(project))
    experiment_id = recorded_experiment(project, client)

    def logged(test_mse, seconds, cell_loss, seed):
        run = client.create_run(experiment_id)
        run_id = run.info.run_id
        client.log_metric(run_id, "test_mse_ensemble", test_mse)
        client.log_metric(run_id, "cv_loss_ensemble", seconds)  # not a test metric
        client.log_param(run_id, "seed", seed)
        client.log_text(
            run_id,
            f"trial,cv_loss_single,fit_seconds\n0,0.5,{seconds}\n",
            "tables/segor_trial_history.csv",
        )
        client.log_text(
            run_id,
            f"key,test_loss\na,{cell_loss}\n",
            "tables/benchmark_tables/cells.csv",
        )
        client.log_text(run_id, "x\n1\n", "tables/benchmark_tables/trees/ranks.csv")
        return client.get_run(run_id)

    original = logged(0.25, 1.0, 0.4, "0")
    # timings and other metrics may differ: the same result
    assert differences(client, original, logged(0.25, 2.0, 0.4, "0")) == []
    rows = differences(client, original, logged(0.26, 1.0, 0.5, "1"))
    assert rows == [
        ("metric test_mse_ensemble", "0.25", "0.26"),
        ("param seed", "0", "1"),
        (
            "tables/benchmark_tables/cells.csv",
            "key=a, test_loss=0.4",
            "key=a, test_loss=0.5",
        ),
    ]
    table = format_table(rows).splitlines()
    assert table[0].split() == ["difference", "original", "rerun"]
    assert set(table[1]) == {"-", " "}
    assert table[2].split() == ["metric", "test_mse_ensemble", "0.25", "0.26"]


def test_a_posthoc_run_is_rerun_on_the_pool_it_read(in_project):
    pool = "runs:/abc/pools/smbo_search_result"
    run_id = recorded_run(
        in_project, **{"kedro.pipeline": "posthoc", "pool_source": pool}
    )
    client = MlflowClient(store(in_project))
    launch = recorded_launch(client, client.get_run(run_id))
    assert launch.pipelines == ["posthoc"]
    assert launch.params == {"posthoc_source": pool}  # not "the latest smbo run"
    assert launch.tags == {"rerun_of": run_id}
    # its parameter differs from the original's "smbo" on purpose: the tag is compared
    original, rerun = (
        client.get_run(recorded_run(in_project, **{"pool_source": pool}))
        for _ in range(2)
    )
    client.log_param(original.info.run_id, "posthoc_source", "smbo")
    client.log_param(rerun.info.run_id, "posthoc_source", pool)
    assert (
        differences(
            client,
            client.get_run(original.info.run_id),
            client.get_run(rerun.info.run_id),
        )
        == []
    )


def run_record(params, metrics=None):
    """What the rerun notes read of an MLflow run: run r1's params and metrics."""
    return SimpleNamespace(
        info=SimpleNamespace(run_id="r1"),
        data=SimpleNamespace(params=params, metrics=metrics or {}),
    )


def test_a_time_budgeted_run_s_differences_come_with_how_to_repeat_its_trials():
    def run(time_budget):
        return run_record({"time_budget": time_budget}, {"trials": 37.0})

    assert time_budget_note(run("None")) == ""
    note = time_budget_note(run("60"))
    assert "time budget of 60 s" in note and "another number than its 37" in note
    assert "--params budget=37,time_budget=null repeats them" in note
    outcome = RerunOutcome("r1", "r2", [("trials", "37", "35")], note)
    assert outcome.report().endswith(note)
    assert RerunOutcome("r1", "r2", [], note).report().startswith("Reproduced")
    # a multi-fidelity search: its budget counts full-fidelity equivalents
    multi_fidelity = run("60")
    multi_fidelity.data.metrics["fidelity_whole_brackets_equivalents"] = 8.4 + 1e-15
    note = time_budget_note(multi_fidelity)
    assert "brackets of its multi-fidelity schedule" in note
    assert f"--params budget={8.4 + 1e-15!r},time_budget=null repeats it" in note


def test_a_run_that_weighed_trial_seconds_says_a_rerun_may_search_elsewhere():
    def run(metrics):
        return run_record({"time_budget": "60"}, {"trials": 37.0, **metrics})

    assert measured_seconds_note(run({})) == ""
    weighed = run({"proposals_weighed_seconds": 1.0})
    note = measured_seconds_note(weighed)
    assert "chose its configurations by EI per second" in note
    assert "other configurations than its 37 trials" in note
    assert "--params segor.optimizer.acquisition=ei" in note
    # the time budget's note would promise the first trials of a search without
    # one, which EI per second does not give
    assert time_budget_note(weighed) == ""
    assert time_budget_note(run({})) != ""


def test_an_async_run_s_differences_come_with_how_to_search_reproducibly():
    def run(**parallel):
        return run_record(
            {f"parallel.{name}": str(value) for name, value in parallel.items()}
        )

    assert async_note(run(backend="local", n_workers=1, mode="async")) == ""
    assert async_note(run(backend="dask", n_workers=4, mode="sync")) == ""
    assert async_note(run()) == ""  # a run from before the parallel block
    note = async_note(run(backend="dask", n_workers=4, mode="async"))
    assert "async mode (parallel.n_workers=4)" in note
    assert "--params parallel.mode=sync" in note
