"""What the tracking store holds runs no code here: a pool is read as data only,
and a logged model is checked against the sha256 its run recorded.

Anyone with write access to a shared server can log a run tagged
`pool.smbo_search_result` whose artifact is a crafted pickle; the posthoc
pipeline's default `posthoc_source=smbo` picks that run. Loading it must not
unpickle it. Anyone who can write a run's artifacts can change its model's
files; `ensemble-bo verify-model` must say so.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
from click.testing import CliRunner
from kedro.io.core import DatasetError
from mlflow.tracking import MlflowClient
from sklearn.linear_model import LinearRegression
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.cli import cli
from ensemble_bo.core.result_files import ResultFileError, read_result, write_result
from ensemble_bo.datasets import MlflowPoolDataset
from ensemble_bo.tracking.artifacts import log_model
from ensemble_bo.tracking.model_integrity import digest_tag, verify_model
from ensemble_bo.tracking.pools import PoolNotFound, find_pool, load_pool, log_pool
from ensemble_bo.tracking.store import open_experiment
from tests.core.test_result_files import every_field_result
from tests.support import (
    PROJECT,
    copy_project,
    kedro,
)

MODEL = "tree_model"


class CreatesAMarker:
    """Unpickled, creates the folder `path`: what a crafted pool's code could do."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    experiment = open_experiment(uri, "ensemble_bo")
    mlflow.set_tracking_uri(uri)
    yield uri, MlflowClient(uri), experiment
    if mlflow.active_run():
        mlflow.end_run()


def crafted_run(client, experiment, tmp_path, marker, folder_layout=False) -> str:
    """A FINISHED run tagged pool.smbo_search_result whose pool is a crafted
    pickle: logged as pools/smbo_search_result.pkl, as runs logged pools
    before, or (folder_layout) in place of both files of a result folder."""
    crafted = pickle.dumps(CreatesAMarker(marker))
    local = tmp_path / "crafted"
    local.mkdir()
    run_id = client.create_run(experiment).info.run_id
    if folder_layout:
        for name in ("result.json", "arrays.npz"):
            (local / name).write_bytes(crafted)
        client.log_artifacts(run_id, str(local), "pools/smbo_search_result")
        path = "pools/smbo_search_result"
    else:
        (local / "smbo_search_result.pkl").write_bytes(crafted)
        client.log_artifact(run_id, str(local / "smbo_search_result.pkl"), "pools")
        path = "pools/smbo_search_result.pkl"
    client.set_tag(run_id, "pool.smbo_search_result", path)
    client.set_terminated(run_id, "FINISHED")
    return run_id


def test_the_crafted_pickle_is_itself_code_that_runs_when_unpickled(tmp_path):
    pickle.loads(pickle.dumps(CreatesAMarker(tmp_path / "marker")))
    assert (tmp_path / "marker").is_dir()


def test_a_pool_logged_as_a_crafted_pickle_is_refused_not_unpickled(store, tmp_path):
    uri, client, experiment = store
    marker = tmp_path / "marker"
    run_id = crafted_run(client, experiment, tmp_path, marker)
    with mlflow.start_run(experiment_id=experiment):
        for source in ("smbo", f"runs:/{run_id}"):
            with pytest.raises(PoolNotFound, match="is never loaded from the tracking"):
                load_pool(source)
            # the posthoc pipeline's catalog entry, which Kedro's error wraps
            with pytest.raises(DatasetError, match="convert-pool <file> --trust"):
                MlflowPoolDataset(source).load()
    assert not marker.exists()


def test_a_crafted_pickle_in_place_of_a_pool_s_files_is_refused(store, tmp_path):
    uri, client, experiment = store
    marker = tmp_path / "marker"
    run_id = crafted_run(client, experiment, tmp_path, marker, folder_layout=True)
    with mlflow.start_run(experiment_id=experiment):
        with pytest.raises(
            ResultFileError,
            match=re.escape(
                f"the pool pools/smbo_search_result of run {run_id} is not a search "
                "result as ensemble_bo writes one: result.json is not JSON text"
            ),
        ):
            load_pool("smbo")
    assert not marker.exists()


@pytest.mark.parametrize("path", ["../../../etc", "/etc/passwd"])
def test_a_pool_path_out_of_the_run_s_artifacts_is_refused(store, path):
    uri, client, experiment = store
    run_id = client.create_run(experiment).info.run_id
    client.set_tag(run_id, "pool.smbo_search_result", path)
    client.set_terminated(run_id, "FINISHED")
    with pytest.raises(PoolNotFound, match="which is not a path inside its artifacts"):
        find_pool("smbo", client, experiment)


def test_a_pool_logged_as_data_is_read_back_and_tagged_where_it_came_from(
    store, tmp_path
):
    uri, client, experiment = store
    result = every_field_result()
    with mlflow.start_run(experiment_id=experiment) as source:
        log_pool("smbo_search_result", result)
    client.set_terminated(source.info.run_id, "FINISHED")
    with mlflow.start_run(experiment_id=experiment) as reader:
        loaded = load_pool("smbo")
    assert loaded.pool.configs == result.pool.configs
    np.testing.assert_array_equal(loaded.pool.predictions, result.pool.predictions)
    assert client.get_run(reader.info.run_id).data.tags["pool_source"] == (
        f"runs:/{source.info.run_id}/pools/smbo_search_result"
    )
    # a local result folder, named by the user
    write_result(result, tmp_path / "local")
    with mlflow.start_run(experiment_id=experiment) as local_reader:
        assert load_pool(f"file:{tmp_path / 'local'}").members == result.members
    assert client.get_run(local_reader.info.run_id).data.tags["pool_source"] == (
        f"file:{tmp_path / 'local'}"
    )


@pytest.mark.slow
def test_kedro_run_posthoc_refuses_a_crafted_pickle_before_anything_runs(tmp_path):
    """The issue's case as written: `kedro run --pipelines=posthoc` (the default
    posthoc_source=smbo) after someone logged a crafted pickle as a pool."""
    project = copy_project(tmp_path / "project")
    uri = f"sqlite:///{project / 'mlflow.db'}"
    client = MlflowClient(uri)
    marker = tmp_path / "marker"
    experiment = open_experiment(uri, "ensemble_bo")
    run_id = crafted_run(client, experiment, tmp_path, marker)
    completed = kedro(project, "run", "--pipelines=posthoc", tracking_uri=uri)
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert not marker.exists()
    assert (
        f"posthoc_source='smbo': run {run_id} logged its pool as a pickle "
        "(pools/smbo_search_result.pkl), which is never loaded from the tracking "
        "store"
    ) in " ".join(completed.stderr.split())
    # refused before a run opened: the crafted run is the experiment's only one
    assert [run.info.run_id for run in client.search_runs([experiment])] == [run_id]


def test_convert_pool_reads_a_local_pickle_only_when_the_user_trusts_it(tmp_path):
    result = every_field_result()
    pickled = tmp_path / "smbo_search_result.pkl"
    pickled.write_bytes(pickle.dumps(result))
    refused = CliRunner().invoke(cli, ["convert-pool", str(pickled)])
    assert refused.exit_code == 2 and "add --trust-pickle" in refused.output
    assert not (tmp_path / "smbo_search_result").exists()
    converted = CliRunner().invoke(
        cli, ["convert-pool", str(pickled), "--trust-pickle"]
    )
    assert converted.exit_code == 0, converted.output
    folder = tmp_path / "smbo_search_result"
    assert f"posthoc_source=file:{folder}" in converted.output
    assert read_result(folder).pool.configs == result.pool.configs
    again = CliRunner().invoke(cli, ["convert-pool", str(pickled), "--trust-pickle"])
    assert again.exit_code == 1 and "exists already" in again.output
    # a pickle of something else is not written as a pool
    (tmp_path / "other.pkl").write_bytes(pickle.dumps({"a": 1}))
    other = CliRunner().invoke(
        cli, ["convert-pool", str(tmp_path / "other.pkl"), "--trust-pickle"]
    )
    assert other.exit_code == 1 and "holds a dict, not a search result" in other.output


def logged_tree_model(root: Path) -> tuple[str, str, Path, str]:
    """(store, run id, the model's folder in the artifact store, the model's id)
    of a run that logged a small model as the tracking hook logs one."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    experiment = open_experiment(uri, "ensemble_bo")
    mlflow.set_tracking_uri(uri)
    features = np.random.default_rng(0).normal(size=(30, 2))
    estimator = DecisionTreeRegressor(max_depth=2).fit(features, features[:, 0])
    with mlflow.start_run(experiment_id=experiment) as run:
        log_model(MODEL, estimator, None)
    (model,) = MlflowClient(uri).search_logged_models([experiment])
    folder = Path(model.artifact_location.removeprefix("file://"))
    return uri, run.info.run_id, folder, model.model_id


@pytest.fixture(scope="module")
def shared_model(tmp_path_factory):
    return logged_tree_model(tmp_path_factory.mktemp("model"))


@pytest.fixture
def logged_model(shared_model):
    """shared_model, its files put back as logged after the test."""
    uri, _, folder, _ = shared_model
    backup = folder.parent / "as_logged"
    shutil.copytree(folder, backup)
    mlflow.set_tracking_uri(uri)
    yield shared_model
    shutil.rmtree(folder)
    backup.rename(folder)


def verify(uri, *arguments, monkeypatch):
    monkeypatch.chdir(PROJECT)  # the project's commands run in the project
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return CliRunner().invoke(cli, ["verify-model", *arguments])


def test_verify_model_passes_the_model_as_logged(logged_model, monkeypatch, tmp_path):
    uri, run_id, folder, model_id = logged_model
    assert {"MLmodel", "model.skops"} <= {path.name for path in folder.iterdir()}
    tag = MlflowClient(uri).get_run(run_id).data.tags[digest_tag(MODEL)]
    kept = tmp_path / "verified"
    result = verify(
        uri,
        f"runs:/{run_id}/{MODEL}",
        f"--expected-sha256={tag}",
        f"--download-to={kept}",
        monkeypatch=monkeypatch,
    )
    assert result.exit_code == 0, result.output
    assert f"Verified: runs:/{run_id}/{MODEL} is the model run {run_id} logged" in (
        result.output
    )
    # the verified copy is the one to load
    loaded = mlflow.pyfunc.load_model(str(kept / MODEL))
    assert loaded.predict(np.zeros((1, 2))).shape == (1,)
    check = verify_model(f"models:/{model_id}")
    assert check.matches, check.report()


@pytest.mark.parametrize(
    ("tamper", "difference"),
    [
        (
            lambda folder: (folder / "model.skops").write_bytes(b"other model"),
            "model.skops: changed",
        ),
        (
            lambda folder: (folder / "code" / "ensemble_bo" / "__init__.py").write_text(
                "import os  # code that runs on load\n"
            ),
            "code/ensemble_bo/__init__.py: changed",
        ),
        (
            lambda folder: (folder / "code" / "sitecustomize.py").write_text("x = 1\n"),
            "code/sitecustomize.py: added",
        ),
        (
            lambda folder: (folder / "MLmodel").write_text(
                (folder / "MLmodel")
                .read_text()
                .replace(
                    "skops_trusted_types:", "skops_trusted_types:\n    - builtins.eval"
                )
            ),
            "MLmodel: skops is told to trust types the run did not record: "
            "['builtins.eval']",
        ),
        (lambda folder: (folder / "MLmodel").unlink(), "MLmodel: missing"),
    ],
    ids=["model", "code", "added-code", "trusted-types", "missing"],
)
def test_verify_model_names_what_was_tampered_with(
    logged_model, monkeypatch, tamper, difference
):
    uri, run_id, folder, _ = logged_model
    tamper(folder)
    result = verify(uri, f"runs:/{run_id}/{MODEL}", monkeypatch=monkeypatch)
    assert result.exit_code == 1, result.output
    assert f"DIFFERENT: runs:/{run_id}/{MODEL} is not the model run {run_id}" in (
        result.output
    )
    assert difference in result.output


def test_a_changed_record_or_tag_is_named(monkeypatch, tmp_path):
    uri, run_id, folder, _ = logged_tree_model(tmp_path)
    client = MlflowClient(uri)
    tag = client.get_run(run_id).data.tags[digest_tag(MODEL)]
    # the tag as the user noted it, against a run whose tag was rewritten
    client.set_tag(run_id, digest_tag(MODEL), "0" * 64)
    result = verify(
        uri,
        f"runs:/{run_id}/{MODEL}",
        f"--expected-sha256={tag}",
        monkeypatch=monkeypatch,
    )
    assert result.exit_code == 1
    assert f"the run's tag {digest_tag(MODEL)} is {'0' * 64}, not the {tag}" in (
        result.output
    )
    assert "integrity/tree_model.json is not the one it logged" in result.output
    # a record rewritten to match tampered files, without its tag
    client.set_tag(run_id, digest_tag(MODEL), tag)
    (folder / "model.skops").write_bytes(b"other model")
    local = Path(
        client.download_artifacts(run_id, f"integrity/{MODEL}.json", str(tmp_path))
    )
    record = json.loads(local.read_text())
    record["files"]["model.skops"] = "f" * 64
    local.write_text(json.dumps(record))
    client.log_artifact(run_id, str(local), "integrity")
    result = verify(uri, f"runs:/{run_id}/{MODEL}", monkeypatch=monkeypatch)
    assert result.exit_code == 1
    assert "is not the one it logged" in result.output


def test_a_model_without_a_record_cannot_be_verified(store, monkeypatch):
    uri, client, experiment = store
    with mlflow.start_run(experiment_id=experiment) as run:
        mlflow.sklearn.log_model(LinearRegression().fit([[0], [1]], [0, 1]), name="m")
    result = verify(uri, f"runs:/{run.info.run_id}/m", monkeypatch=monkeypatch)
    assert result.exit_code == 1
    assert "cannot verify: run" in result.output and "no tag model.m.sha256" in (
        result.output
    )
    result = verify(uri, "s3://bucket/model", monkeypatch=monkeypatch)
    assert result.exit_code == 1 and "give runs:/<run id>/<model name>" in result.output
