"""Where runs are written, and stores that cannot take them.

Artifacts go beside a SQLite store for relative and absolute paths, with
spaces and through symlinks; a store that cannot be used is reported, naming
its URI or path, before a run is opened (and in seconds for a server that is down).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ensemble_bo.tracking.store import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    TrackingStoreError,
    display_uri,
    local_artifact_location,
    open_experiment,
    resolve_tracking_uri,
    sqlite_database,
)
from tests.support import (
    TINY_SEGOR,
    copy_project,
    kedro,
    read_only_files_are_enforced,
    respect_file_permissions,
)


def squeezed(text: str) -> str:
    """Text without whitespace: Kedro's console wraps long messages anywhere."""
    return "".join(text.split())


# ---------------------------------------------------------------- URIs


def test_sqlite_uris_name_their_database_file():
    assert sqlite_database("sqlite:///mlflow.db") == Path("mlflow.db")
    assert sqlite_database("sqlite:////abs/mlflow.db") == Path("/abs/mlflow.db")
    assert sqlite_database("sqlite:////a%20b/m.db?timeout=5") == Path("/a b/m.db")
    assert sqlite_database("sqlite:///:memory:") is None
    assert sqlite_database("http://127.0.0.1:5000") is None
    assert sqlite_database("postgresql://u:p@db/mlflow") is None


def test_relative_stores_resolve_into_the_project_and_read_back_exactly(tmp_path):
    project = tmp_path / "a project%"
    resolved = resolve_tracking_uri("sqlite:///store/mlflow.db?timeout=5", project)
    assert resolved.startswith("sqlite:////") and resolved.endswith("?timeout=5")
    assert sqlite_database(resolved) == project / "store" / "mlflow.db"
    assert resolve_tracking_uri("http://mlflow.internal:5000", tmp_path) == (
        "http://mlflow.internal:5000"
    )


def test_the_artifact_location_is_a_file_uri_without_a_host():
    # sqlite:////abs gave file:////abs, which MLflow reads as host `abs`
    assert local_artifact_location("sqlite:////srv/my store/mlflow.db") == (
        "file:///srv/my%20store/mlartifacts"
    )
    assert local_artifact_location("http://127.0.0.1:5000") is None


def test_messages_hide_passwords():
    assert display_uri("http://me:secret@host:5000/x") == "http://me:***@host:5000/x"
    assert (
        display_uri("postgresql://me:pw@db/mlflow") == "postgresql://me:***@db/mlflow"
    )
    assert display_uri("sqlite:////a/mlflow.db") == "sqlite:////a/mlflow.db"


def project_folder(tmp_path: Path, layout: str) -> Path:
    """The project as a user reaches it: plainly, through a spaced path, or a symlink."""
    if layout == "plain":
        folder = tmp_path / "project"
    elif layout == "spaced":
        folder = tmp_path / "my work" / "ensemble bo"
    else:
        target = tmp_path / "real disk" / "checkout"
        target.mkdir(parents=True)
        folder = tmp_path / "link"
        folder.symlink_to(target, target_is_directory=True)
    (folder / "store").mkdir(parents=True)
    return folder


@pytest.mark.parametrize("layout", ["plain", "spaced", "symlinked"])
@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_artifacts_are_written_beside_the_store(tmp_path, layout, kind):
    project = project_folder(tmp_path, layout)
    configured = (
        "sqlite:///store/mlflow.db"
        if kind == "relative"
        else f"sqlite:///{project / 'store' / 'mlflow.db'}"
    )
    uri = resolve_tracking_uri(configured, project)
    experiment_id = open_experiment(uri, "ensemble_bo")
    client = MlflowClient(uri)
    run = client.create_run(experiment_id)
    client.log_text(run.info.run_id, "hello", "notes/hello.txt")
    client.set_terminated(run.info.run_id)

    store = (project / "store").resolve()
    written = [path for path in tmp_path.rglob("hello.txt")]
    assert [path.resolve() for path in written] == [
        store / "mlartifacts" / run.info.run_id / "artifacts" / "notes" / "hello.txt"
    ]
    experiment = client.get_experiment(experiment_id)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


# ---------------------------------------------------------------- stores that cannot be used


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stopped_server(tmp_path: Path) -> tuple[str, str]:
    uri = f"http://127.0.0.1:{free_port()}"
    return uri, f"the MLflow tracking server {uri} cannot be reached"


def silent(tmp_path: Path) -> tuple[str, str]:
    """A port on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    _open_sockets.append(server)
    uri = f"http://127.0.0.1:{server.getsockname()[1]}"
    return uri, f"the MLflow tracking server {uri} cannot be reached"


def missing_folder(tmp_path: Path) -> tuple[str, str]:
    folder = tmp_path / "no such folder"
    return f"sqlite:///{folder / 'mlflow.db'}", f"create {folder}"


def legacy(tmp_path: Path) -> tuple[str, str]:
    """A store whose experiment an earlier version created with `file:////abs`."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).create_experiment(
        "ensemble_bo", artifact_location=f"file:///{tmp_path / 'mlartifacts'}"
    )
    return uri, f"which MLflow reads as host {tmp_path.parts[1]!r}"


_open_sockets: list[socket.socket] = []


@pytest.fixture
def close_sockets():
    yield
    while _open_sockets:
        _open_sockets.pop().close()


@pytest.mark.parametrize("case", [stopped_server, silent, missing_folder, legacy])
def test_a_store_that_cannot_be_used_fails_fast_naming_it(
    tmp_path, close_sockets, case
):
    uri, expected = case(tmp_path)
    start = time.monotonic()
    with pytest.raises(TrackingStoreError) as raised:
        open_experiment(uri, "ensemble_bo")
    elapsed = time.monotonic() - start
    assert expected in str(raised.value)
    # MLflow's own retries took five minutes to report a server that is down
    assert elapsed < 10, f"{case.__name__}: {elapsed:.1f} s"
    if case is legacy:
        assert MlflowClient(uri).search_runs(["0", "1"]) == []


PERMISSION_CASES = (
    "read-only store file",
    "read-only store folder",
    "read-only artifacts",
)

# Run where root, too, is refused read-only files (tests.support.respect_file_permissions).
_CHECK_STORES = """
import json, sys
from ensemble_bo.tracking.store import TrackingStoreError, open_experiment
results = {}
for case, uri in json.loads(sys.argv[1]).items():
    try:
        open_experiment(uri, "ensemble_bo")
        results[case] = None
    except TrackingStoreError as error:
        results[case] = str(error)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def permission_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("permissions")
    if not read_only_files_are_enforced(root):
        pytest.skip("this machine cannot deny a process write access to a file")
    stores, folders = {}, []
    for case in PERMISSION_CASES:
        folder = root / case.replace(" ", "_")
        folder.mkdir()
        database = folder / "mlflow.db"
        stores[case] = f"sqlite:///{database}"
        if case == "read-only store folder":
            folder.chmod(0o555)
            folders.append(folder)
            continue
        open_experiment(stores[case], "ensemble_bo")
        if case == "read-only store file":
            database.chmod(0o444)
        else:
            (folder / "mlartifacts").chmod(0o555)
            folders.append(folder / "mlartifacts")
    try:
        completed = subprocess.run(
            [sys.executable, "-c", _CHECK_STORES, json.dumps(stores)],
            preexec_fn=respect_file_permissions,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        for folder in folders:
            folder.chmod(0o755)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    return root, stores, results


@pytest.mark.parametrize(
    ("case", "named", "cause"),
    [
        ("read-only store file", "read-only_store_file/mlflow.db", "readonly"),
        ("read-only store folder", "read-only_store_folder", "Permission denied"),
        ("read-only artifacts", "read-only_artifacts/mlartifacts", "Permission denied"),
    ],
)
def test_a_read_only_store_is_reported_naming_the_path(
    permission_results, case, named, cause
):
    root, stores, results = permission_results
    message = results[case]
    assert message is not None, f"{case}: no error"
    assert str(root / named.split("/")[0]) in message and named in message
    assert cause in message
    assert "autoflush" not in message
    database = sqlite_database(stores[case])
    if database.exists():  # nothing was opened in it
        assert MlflowClient(stores[case]).search_runs(["0", "1"]) == []


# ---------------------------------------------------------------- end to end


def artifact_files(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def listing(folder: Path) -> set[str]:
    return set(os.listdir(folder))


@pytest.mark.slow
def test_a_run_writes_every_artifact_inside_the_project_by_default(tmp_path):
    """The default store, a project reached through a symlink, with spaces."""
    real = copy_project(tmp_path / "real disk" / "my project")
    link = tmp_path / "projects link"
    link.symlink_to(real, target_is_directory=True)
    before_root, before_around = listing(Path("/")), listing(tmp_path)
    before_parent = listing(real.parent)

    completed = kedro(
        link, "run", "--pipelines=segor", "--params", TINY_SEGOR, tracking_uri=None
    )
    assert completed.returncode == 0, completed.stderr[-3000:]

    assert listing(Path("/")) == before_root
    assert listing(tmp_path) == before_around
    assert listing(real.parent) == before_parent
    # the old bug's target: the project path with its first folder read as a host
    assert not Path("/", *real.parts[2:]).exists()
    client = MlflowClient(f"sqlite:///{real / 'mlflow.db'}")
    (run,) = client.search_runs(
        [client.get_experiment_by_name("ensemble_bo").experiment_id]
    )
    assert run.info.status == "FINISHED"
    store = real / "mlartifacts"
    artifacts = store / run.info.run_id / "artifacts"
    # every artifact MLflow lists for the run is a file there
    listed, pending = set(), [None]
    while pending:
        for info in client.list_artifacts(run.info.run_id, pending.pop()):
            (pending.append(info.path) if info.is_dir else listed.add(info.path))
    assert "tables/segor_trial_history.csv" in listed
    assert {artifacts / path for path in listed} == artifact_files(artifacts)
    # MLflow 3 keeps the logged model beside the runs, under models/
    (model,) = store.glob("models/*/artifacts/MLmodel")
    assert run.info.run_id in model.read_text()
    assert (model.parent / "code" / "ensemble_bo").is_dir()
    # and nothing was written anywhere else in the temporary folder
    outside = [
        Path(folder, name)
        for folder, _, names in os.walk(tmp_path)
        for name in names
        if not Path(folder, name).is_relative_to(real)
    ]
    assert outside == []


@pytest.mark.slow
def test_kedro_run_against_a_stopped_server_fails_in_seconds_naming_it(tmp_path):
    project = copy_project(tmp_path / "project")
    uri = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    completed = kedro(project, "run", "--pipelines=segor", tracking_uri=uri)
    elapsed = time.monotonic() - start
    assert completed.returncode != 0
    assert squeezed(f"the MLflow tracking server {uri} cannot be reached") in squeezed(
        completed.stderr
    )
    assert "SEGOR on concrete" not in completed.stderr  # no search started
    # Kedro's own start-up included; MLflow's retries used to take five minutes.
    assert elapsed < 60, elapsed


@pytest.mark.parametrize("form", ["path", "file-uri", "relative"])
def test_a_folder_as_the_store_is_refused_naming_the_forms_a_store_takes(
    tmp_path, monkeypatch, form
):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "nonexistent" / "dir"
    uri = {"path": str(folder), "file-uri": folder.as_uri(), "relative": "runs"}[form]
    with pytest.raises(TrackingStoreError) as raised:
        open_experiment(uri, "ensemble_bo")
    message = str(raised.value)
    assert message.startswith(f"MLFLOW_TRACKING_URI={uri} is a folder, which MLflow 3")
    database = (
        "sqlite:///runs/mlflow.db" if form == "relative" else f"sqlite:///{folder}"
    )
    assert database in message and "http(s)://host:port" in message
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.slow
def test_kedro_run_with_a_folder_as_the_store_creates_nothing(tmp_path):
    project = copy_project(tmp_path / "project")
    folder = tmp_path / "nonexistent" / "dir"
    completed = kedro(
        project,
        "run",
        "--pipelines=segor",
        tracking_uri=str(folder),
        # MLflow's own way out of its refusal, which created the folder
        MLFLOW_ALLOW_FILE_STORE="true",
    )
    assert completed.returncode != 0
    assert squeezed(
        f"MLFLOW_TRACKING_URI={folder} is a folder, which MLflow 3 no longer takes "
        f"as a store; set it to a database, e.g. sqlite:///{folder}/mlflow.db"
    ) in squeezed(completed.stderr)
    assert not (tmp_path / "nonexistent").exists()
    assert "SEGOR on concrete" not in completed.stderr


@pytest.mark.slow
def test_kedro_run_into_a_read_only_store_fails_before_opening_a_run(tmp_path):
    if not read_only_files_are_enforced(tmp_path):
        pytest.skip("this machine cannot deny a process write access to a file")
    project = copy_project(tmp_path / "project")
    database = tmp_path / "store" / "mlflow.db"
    database.parent.mkdir()
    uri = f"sqlite:///{database}"
    open_experiment(uri, "ensemble_bo")
    database.chmod(0o444)
    completed = kedro(
        project,
        "run",
        "--pipelines=segor",
        tracking_uri=uri,
        preexec_fn=respect_file_permissions,
    )
    database.chmod(0o644)
    assert completed.returncode != 0
    assert squeezed(f"the MLflow store {database} cannot be written") in squeezed(
        completed.stderr
    )
    assert "autoflush" not in completed.stderr
    assert MlflowClient(uri).search_runs(["0", "1"]) == []
