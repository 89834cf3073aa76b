"""Exact environments: the lock pins and hashes everything, `make` installs exactly it.

Fast checks with no network and no installs: the lock is read as text and the
Makefile's targets are only dry-run (`make -n`), with the venv stamp held as
up to date so that nothing would be reinstalled either.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.support import PROJECT

LOCK = PROJECT / "requirements.lock"
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?:\[[A-Za-z0-9._,-]+\])?==(?P<version>[A-Za-z0-9.!+_-]+)(?: ; .+)?$"
)
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
# Everything `make` reads from the environment that would change what it prints.
MAKE_ENV = (
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "RUN",
    "ARGS",
    "MLFLOW_HOST",
    "MLFLOW_PORT",
    "SERVER_DIR",
    "MLFLOW_AUTH",
    "MLFLOW_AUTH_DEFAULT_PERMISSION",
    "MLFLOW_AUTH_CACHE_SECONDS",
    "MLFLOW_AUTH_CONFIG_PATH",
    "MLFLOW_AUTH_ADMIN_PASSWORD",
    "MLFLOW_ALLOWED_HOSTS",
)

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def lock_entries() -> list[tuple[str, list[str]]]:
    """(requirement, its --hash options) for every requirement in the lock."""
    entries: list[tuple[str, list[str]]] = []
    # A requirement's hashes are on continuation lines ("pin \\", "--hash=... \\").
    logical = LOCK.read_text().replace("\\\n", " ")
    for line in logical.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assert not line[0].isspace(), (
            f"an indented line outside a requirement: {line!r}"
        )
        requirement, *options = line.split()
        entries.append((requirement, options))
    return entries


def test_every_lock_requirement_is_pinned_and_hashed():
    entries = lock_entries()
    assert len(entries) > 50, "the lock should hold the whole dev environment"
    names = []
    for requirement, options in entries:
        match = PIN.match(requirement)
        assert match, f"not name==version: {requirement!r}"
        names.append(match["name"].lower().replace("_", "-"))
        hashes = [option for option in options if option.startswith("--hash=")]
        assert hashes, f"{requirement} has no --hash"
        assert options == hashes, f"{requirement}: options other than hashes {options}"
        for option in hashes:
            assert HASH.match(option), f"{requirement}: not a sha256 hash: {option!r}"
    assert len(names) == len(set(names)), "a package is pinned twice"
    for needed in ("kedro", "mlflow", "scikit-learn", "pytest", "ruff"):
        assert needed in names


def make(
    *args: str, installed: bool = True, **variables: str
) -> subprocess.CompletedProcess:
    """`make -n` in the project: what would run (`installed`: the venv taken as up to date)."""
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV}
    command = ["make", "--no-print-directory", "-n", "-o", ".venv/bin/uv"]
    if installed:
        command += ["-o", ".venv/.installed"]
    command += [*args, *(f"{name}={value}" for name, value in variables.items())]
    return subprocess.run(
        command,
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def commands(result: subprocess.CompletedProcess) -> str:
    """The dry run's commands, continuation lines joined and blanks collapsed."""
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.replace("\\\n", " ").split())


def test_install_syncs_exactly_the_lock_then_the_project_and_records_its_hash():
    # -W: as if the lock had just changed, so the install recipe is printed.
    out = make("-W", "requirements.lock", ".venv/.installed", installed=False)
    assert out.returncode == 0, out.stderr
    lines = [" ".join(line.split()) for line in out.stdout.splitlines()]
    sync = next(i for i, line in enumerate(lines) if "uv pip sync" in line)
    assert "--require-hashes" in lines[sync]
    assert lines[sync].endswith(" requirements.lock")
    assert not any(" -r requirements.lock" in line for line in lines)
    project = next(i for i, line in enumerate(lines) if "--no-deps -e ." in line)
    assert "uv pip install" in lines[project]
    assert project > sync, "sync removes the project: it must be installed after"
    recorded = next(
        i for i, line in enumerate(lines) if "> .venv/requirements.lock.sha256" in line
    )
    assert "hashlib.sha256" in lines[recorded - 1] + lines[recorded]
    assert lines[-1] == "touch .venv/.installed"
    assert recorded < len(lines) - 1


def test_lock_target_compiles_with_hashes():
    out = commands(make("lock"))
    assert (
        ".venv/bin/uv pip compile pyproject.toml --extra dev --extra lightgbm"
        " --extra catboost --python-version 3.11"
        " --no-header --generate-hashes --output-file requirements.lock"
    ) in out


def test_server_target_defaults():
    out = commands(make("server"))
    store = PROJECT / "mlflow-server"  # make's $(abspath): from the project root
    assert "mkdir -p mlflow-server/artifacts" in out
    assert (
        ".venv/bin/mlflow server --host 127.0.0.1 --port 5000"
        f" --backend-store-uri sqlite:///{store}/mlflow.db"
        f" --serve-artifacts --artifacts-destination {store}/artifacts"
    ) in out


def test_server_target_overrides(tmp_path):
    server_dir = tmp_path / "team"
    out = commands(
        make(
            "server",
            MLFLOW_HOST="0.0.0.0",
            MLFLOW_PORT="5999",
            SERVER_DIR=str(server_dir),
            MLFLOW_AUTH="none",
        )
    )
    assert f"mkdir -p {server_dir}/artifacts" in out
    assert (
        ".venv/bin/mlflow server --host 0.0.0.0 --port 5999"
        f" --backend-store-uri sqlite:///{server_dir}/mlflow.db"
        f" --serve-artifacts --artifacts-destination {server_dir}/artifacts"
    ) in out
    assert not server_dir.exists(), "a dry run creates nothing"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "mlflow.team"])
def test_server_refuses_an_open_server_on_another_host(host):
    # Even with the lock newer than the venv, it stops before reinstalling.
    out = make("-W", "requirements.lock", "server", installed=False, MLFLOW_HOST=host)
    assert out.returncode != 0
    assert (
        f"make server MLFLOW_HOST={host} lets other machines in, and nobody would "
        "be asked for a password. Add MLFLOW_AUTH=basic for MLflow's user logins"
    ) in out.stderr
    assert "or MLFLOW_AUTH=none to accept an open server" in out.stderr
    assert "uv pip" not in out.stdout
    assert "mlflow server" not in out.stdout


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "::1"])
def test_server_on_a_loopback_host_is_open_without_asking(host):
    out = commands(make("server", MLFLOW_HOST=host))
    assert f".venv/bin/mlflow server --host {host} --port 5000" in out
    assert "--app-name" not in out
    assert "--allowed-hosts" not in out


def test_server_with_logins_and_the_allowed_hosts(tmp_path):
    server_dir = tmp_path / "team"
    settings = server_dir / "basic_auth.ini"
    out = commands(
        make(
            "server",
            MLFLOW_HOST="0.0.0.0",
            SERVER_DIR=str(server_dir),
            MLFLOW_AUTH="basic",
            MLFLOW_ALLOWED_HOSTS="mlflow.team:5000,10.0.0.7:5000",
            MLFLOW_AUTH_ADMIN_PASSWORD="the-admin-s-first-password",
        )
    )
    # MLflow's auth settings, beside the store and without a password
    assert (
        "printf '%s\\n' '; written by make server at each start' '[mlflow]'"
        " 'default_permission = READ'"
        f" 'database_uri = sqlite:///{server_dir}/basic_auth.db'"
        f" 'admin_username = admin' 'auth_cache_ttl_seconds = 60' > {settings}"
    ) in out
    assert f"MLFLOW_AUTH_CONFIG_PATH={settings} MLFLOW_FLASK_SERVER_SECRET_KEY=" in out
    assert out.endswith(
        f"--artifacts-destination {server_dir}/artifacts"
        " --allowed-hosts 'mlflow.team:5000,10.0.0.7:5000' --app-name basic-auth"
    )
    assert "the-admin-s-first-password" not in out
    assert not server_dir.exists(), "a dry run creates nothing"


def test_server_with_logins_from_the_user_s_own_auth_settings(tmp_path):
    own = tmp_path / "auth.ini"
    own.write_text("[mlflow]\ndefault_permission = READ\n")
    out = commands(
        make("server", MLFLOW_AUTH="basic", MLFLOW_AUTH_CONFIG_PATH=str(own))
    )
    assert f"MLFLOW_AUTH_CONFIG_PATH={own} MLFLOW_FLASK_SERVER_SECRET_KEY=" in out
    assert "basic_auth.ini" not in out
    assert out.endswith("--app-name basic-auth")


def test_server_with_logins_restarts_without_the_admin_s_password(tmp_path):
    (tmp_path / "basic_auth.db").touch()  # the admin was created at the first start
    out = commands(make("server", MLFLOW_AUTH="basic", SERVER_DIR=str(tmp_path)))
    assert out.endswith("--app-name basic-auth")


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"MLFLOW_AUTH": "bsic"},
            "MLFLOW_AUTH=bsic is not a choice: basic (a user name and password for "
            "every request) or none (an open server)",
        ),
        (
            {"MLFLOW_AUTH": "basic"},
            "MLFLOW_AUTH=basic: the first start creates the server's admin user and "
            "needs its password in MLFLOW_AUTH_ADMIN_PASSWORD",
        ),
        (
            {
                "MLFLOW_AUTH": "basic",
                "MLFLOW_AUTH_ADMIN_PASSWORD": "the-admin-s-first-password",
                "MLFLOW_AUTH_DEFAULT_PERMISSION": "read",
            },
            "MLFLOW_AUTH_DEFAULT_PERMISSION=read is not a permission: READ, USE, "
            "EDIT, MANAGE or NO_PERMISSIONS",
        ),
        *(
            (
                {
                    "MLFLOW_AUTH": "basic",
                    "MLFLOW_AUTH_ADMIN_PASSWORD": "the-admin-s-first-password",
                    "MLFLOW_AUTH_CACHE_SECONDS": seconds,
                },
                f"MLFLOW_AUTH_CACHE_SECONDS={seconds} is not a whole number of "
                "seconds (0: check the password on every request)",
            )
            for seconds in ("1m", "-5", "")
        ),
        (
            {
                "MLFLOW_AUTH": "basic",
                "MLFLOW_AUTH_CONFIG_PATH": "/nonexistent/auth.ini",
            },
            "MLFLOW_AUTH_CONFIG_PATH=/nonexistent/auth.ini: no such file",
        ),
    ],
)
def test_server_refuses_unclear_auth_settings(tmp_path, variables, message):
    out = make("server", SERVER_DIR=str(tmp_path / "team"), **variables)
    assert out.returncode != 0
    assert message in out.stderr
    assert "mlflow server" not in out.stdout


def test_rerun_target():
    assert ".venv/bin/ensemble-bo rerun abc" in commands(make("rerun", RUN="abc"))
    out = commands(make("rerun", RUN="abc", ARGS="--dry-run"))
    assert ".venv/bin/ensemble-bo rerun abc --dry-run" in out
    assert ".venv/bin/ensemble-bo rerun --last" in commands(
        make("rerun", ARGS="--last")
    )


def test_rerun_without_a_run_stops_before_installing_anything():
    # Even with the lock newer than the venv, it stops before reinstalling.
    out = make("-W", "requirements.lock", "rerun", installed=False)
    assert out.returncode != 0
    assert "make rerun RUN=<mlflow run id> (or ARGS=--last ...)" in out.stderr
    assert "uv pip" not in out.stdout


def test_scheduled_target():
    assert ".venv/bin/ensemble-bo scheduled" in commands(make("scheduled"))
    out = commands(make("scheduled", ARGS="--once"))
    assert ".venv/bin/ensemble-bo scheduled --once" in out


@pytest.mark.parametrize("target", ["server", "rerun", "scheduled"])
def test_new_targets_are_phony_and_need_the_venv(target):
    makefile = (PROJECT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.MULTILINE)
    assert phony and target in phony[1].split()
    assert re.search(rf"^{target}: \$\(VENV\)/\.installed$", makefile, re.MULTILINE)
