"""Configuration loading: an env and `--params` override only the keys they name."""

import subprocess
import sys
from pathlib import Path

from kedro.config import OmegaConfigLoader
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from ensemble_bo import settings

PROJECT = Path(__file__).resolve().parents[1]


def _params(env, runtime_params):
    bootstrap_project(PROJECT)
    with KedroSession.create(
        project_path=PROJECT, env=env, runtime_params=runtime_params
    ) as session:
        return session.load_context().params


def test_params_in_a_conf_env_keep_the_rest_of_the_block():
    base = _params(None, None)
    params = _params("results", {"segor": {"weighting": "bfgs"}})
    assert params["segor"]["weighting"] == "bfgs"
    assert params["segor"]["optimizer"] == base["segor"]["optimizer"]
    assert params["segor"]["model"] == base["segor"]["model"]
    # blocks interpolating segor's still resolve
    assert params["esmbo"]["optimizer"] == base["segor"]["optimizer"]
    assert params["benchmark"]["repetitions"] == 5  # conf/results' own value


def test_an_env_overrides_nested_keys_without_dropping_their_siblings(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "team").mkdir()
    (tmp_path / "base" / "parameters.yml").write_text(
        "segor:\n  size: 12\n  optimizer:\n    mode: map\n    n_initial: 10\n"
    )
    (tmp_path / "team" / "parameters.yml").write_text(
        "segor:\n  optimizer:\n    mode: slice\n"
    )
    loader = OmegaConfigLoader(str(tmp_path), env="team", **settings.CONFIG_LOADER_ARGS)
    assert loader["parameters"] == {
        "segor": {"size": 12, "optimizer": {"mode": "slice", "n_initial": 10}}
    }


def _objects_frozen_at_exit(setup: str) -> int:
    """gc.get_freeze_count() in the last exit handler of a process running `setup`."""
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print(gc.get_freeze_count()))\n" + setup
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return int(completed.stdout.strip())


def test_a_kedro_command_exits_without_collecting_what_it_loaded():
    # Every `kedro` command loads the settings; the objects alive at exit are
    # frozen before Python's final collections, after the other exit handlers.
    assert _objects_frozen_at_exit("import ensemble_bo.settings") > 100_000
    assert _objects_frozen_at_exit("import mlflow") == 0
