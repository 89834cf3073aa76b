"""A team server with logins: `make server MLFLOW_AUTH=basic` on 127.0.0.1.

The server is started by the Makefile's own recipe (MLflow's basic-auth app,
the allowed hosts given). Its admin creates teammates; one teammate's
`kedro run` with MLFLOW_TRACKING_USERNAME/PASSWORD is recorded there. A client
without credentials or with a wrong password is refused (401), by the server
and by the pre-run store check, which says what to set; a Host header in the
allowed list is served and another refused (403). Another teammate reads the
run but may write to its experiment only once an admin grants EDIT, and the
store check says so before a run opens.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import requests
from mlflow.exceptions import MlflowException
from mlflow.server import get_app_client
from mlflow.tracking import MlflowClient

from ensemble_bo.tracking.store import TrackingStoreError, open_experiment
from tests.mlflow_server import MlflowServer
from tests.support import KEDRO, PROJECT, TINY_SEGOR, copy_project, kedro_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]

# MLflow's basic-auth app wants passwords of 12 characters or more.
ADMIN = ("admin", "admin-password-for-tests")
ALICE = ("alice", "alice-password-for-tests")
BOB = ("bob", "bob-password-for-tests")
CAROL = ("carol", "carol-password-for-tests")
TEAM_HOST = "mlflow.team:5000"  # the name teammates' URIs give, as a proxy sends it
EXPERIMENT = "ensemble_bo"  # conf/base/mlflow.yml


class TeamServer(MlflowServer):
    """`make server MLFLOW_AUTH=basic` with this store, port and allowed hosts."""

    def command(self) -> list[str]:
        return [
            "make",
            "--no-print-directory",
            "-C",
            str(PROJECT),
            "-o",
            ".venv/.installed",
            "server",
            f"BIN={Path(sys.executable).parent}",  # this interpreter's mlflow
            "MLFLOW_HOST=127.0.0.1",
            f"MLFLOW_PORT={self.port}",
            f"SERVER_DIR={self.root}",
            "MLFLOW_AUTH=basic",
            f"MLFLOW_ALLOWED_HOSTS={TEAM_HOST},127.0.0.1:{self.port}",
            f"MLFLOW_AUTH_ADMIN_PASSWORD={ADMIN[1]}",
        ]


@contextmanager
def signed_in(user: tuple[str, str] | None) -> Iterator[None]:
    """MLflow clients in this process send `user`'s credentials (None: none)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
        patch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
        if user is not None:
            patch.setenv("MLFLOW_TRACKING_USERNAME", user[0])
            patch.setenv("MLFLOW_TRACKING_PASSWORD", user[1])
        yield


def credentials(user: tuple[str, str]) -> dict[str, str]:
    return {"MLFLOW_TRACKING_USERNAME": user[0], "MLFLOW_TRACKING_PASSWORD": user[1]}


class Team(NamedTuple):
    server: TeamServer
    project: Path
    run_id: str


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Iterator[Team]:
    """The server, its users (alice, bob, carol), and alice's run on it."""
    root = tmp_path_factory.mktemp("team_server")
    with TeamServer(root, startup_timeout=180) as server:
        with signed_in(ADMIN):
            admin = get_app_client("basic-auth", tracking_uri=server.uri)
            for user in (ALICE, BOB, CAROL):
                admin.create_user(*user)
        project = copy_project(tmp_path_factory.mktemp("team") / "project")
        completed = subprocess.run(
            [*KEDRO, "run", "--pipelines=segor", "--params", TINY_SEGOR],
            cwd=project,
            env=kedro_env(server.uri, **credentials(ALICE)),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        with signed_in(ALICE):
            client = MlflowClient(server.uri)
            experiment = client.get_experiment_by_name(EXPERIMENT)
            [run] = client.search_runs([experiment.experiment_id])
        yield Team(server, project, run.info.run_id)
    assert server.group_is_gone(), "make, mlflow and its workers are stopped"


def test_the_makefile_wrote_the_auth_settings_beside_the_store(team):
    settings = (team.server.root / "basic_auth.ini").read_text()
    assert "default_permission = READ" in settings
    assert "auth_cache_ttl_seconds = 60" in settings
    assert f"database_uri = sqlite:///{team.server.root}/basic_auth.db" in settings
    assert ADMIN[1] not in settings, "the admin's password stays in the environment"
    assert (team.server.root / "basic_auth.db").is_file()


def test_a_teammate_s_search_is_recorded_with_her_credentials(team):
    with signed_in(ALICE):
        run = MlflowClient(team.server.uri).get_run(team.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["segor.model"] == "decision_tree_regressor"
    assert run.data.metrics["trials"] == 3
    assert "test_mse_ensemble" in run.data.metrics
    # artifacts and the model went through the server, with her credentials
    stored = team.server.artifacts / run.info.experiment_id
    assert (stored / team.run_id / "artifacts/tables/segor_trial_history.csv").is_file()
    assert list(stored.glob("models/*/artifacts/MLmodel"))


@pytest.mark.parametrize("user", [None, (ALICE[0], "a-wrong-password")])
def test_a_client_without_the_right_credentials_is_refused(team, user):
    with signed_in(user), pytest.raises(MlflowException) as refused:
        MlflowClient(team.server.uri).get_run(team.run_id)
    assert refused.value.get_http_status_code() == 401
    answer = requests.get(
        f"{team.server.uri}/api/2.0/mlflow/runs/get",
        params={"run_id": team.run_id},
        auth=user,
        timeout=30,
    )
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Basic")


def test_the_store_check_says_to_set_the_credentials(team):
    with signed_in(None), pytest.raises(TrackingStoreError) as anonymous:
        open_experiment(team.server.uri, EXPERIMENT)
    assert str(anonymous.value) == (
        f"the MLflow tracking server {team.server.uri} refused the request without "
        "credentials: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
        "~/.mlflow/credentials) to your user on that server (its admin creates users)"
    )
    # as `kedro run` prints it, before anything is computed
    completed = subprocess.run(
        [*KEDRO, "run", "--pipelines=segor", "--params", TINY_SEGOR],
        cwd=team.project,
        env=kedro_env(team.server.uri, **credentials((ALICE[0], "a-wrong-password"))),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 1
    printed = " ".join((completed.stdout + completed.stderr).split())
    assert (
        f"the MLflow tracking server {team.server.uri} refused the credentials of "
        "user 'alice': set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
    ) in printed
    assert "cannot be reached" not in printed
    assert "SEGOR on concrete" not in printed, "nothing was searched"


def test_only_the_allowed_host_names_are_served(team):
    def search(host: str) -> requests.Response:
        return requests.get(
            f"{team.server.uri}/api/2.0/mlflow/experiments/search",
            params={"max_results": 1},
            headers={"Host": host},
            auth=ALICE,
            timeout=30,
        )

    assert search(TEAM_HOST).status_code == 200
    refused = search("mlflow.elsewhere:5000")
    assert refused.status_code == 403
    assert "Invalid Host header" in refused.text
    # a name the server does not answer to, as the store check reports it
    port = team.server.port
    with signed_in(ALICE), pytest.raises(TrackingStoreError) as check:
        open_experiment(f"http://localhost:{port}", EXPERIMENT)
    assert str(check.value).startswith(
        f"the MLflow tracking server http://localhost:{port} does not answer to the "
        f"name 'localhost:{port}' (403 Invalid Host header): its allowed hosts must "
        f"include it (make server MLFLOW_ALLOWED_HOSTS=localhost:{port},...)"
    )


def test_teammates_read_every_run_and_write_where_they_are_granted(team):
    uri = team.server.uri
    with signed_in(BOB):
        assert MlflowClient(uri).get_run(team.run_id).info.status == "FINISHED"
        with pytest.raises(TrackingStoreError) as refused:
            open_experiment(uri, EXPERIMENT)
    assert str(refused.value) == (
        f"the MLflow tracking server {uri} does not let user 'bob' write runs to "
        f"experiment '{EXPERIMENT}': ask its creator or an admin for EDIT on it (a "
        "run writes there), or set MLFLOW_EXPERIMENT_NAME to an experiment of your own"
    )
    with signed_in(BOB):
        own = open_experiment(uri, "ensemble_bo-bob")  # his own: he manages it
    with signed_in(ADMIN):
        experiment_id = (
            MlflowClient(uri).get_experiment_by_name(EXPERIMENT).experiment_id
        )
        admin = get_app_client("basic-auth", tracking_uri=uri)
        admin.grant_user_permission(BOB[0], "experiment", experiment_id, "EDIT")
        admin.grant_user_permission(CAROL[0], "experiment", experiment_id, "DENY")
    with signed_in(BOB):
        assert open_experiment(uri, EXPERIMENT) == experiment_id != own
    with signed_in(CAROL), pytest.raises(TrackingStoreError) as denied:
        open_experiment(uri, EXPERIMENT)
    assert f"does not let user 'carol' read experiment '{EXPERIMENT}'" in str(
        denied.value
    )
