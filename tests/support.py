"""Helpers for tests: a project copy, process trees, permissions, cheap parameters,
an optimizer that records what strategies tell it, finite-difference gradients,
a search's input of n rows."""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ensemble_bo.benchmarking.scripts import project_copy
from ensemble_bo.core.evaluation import CrossValidation
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.search import Search
from ensemble_bo.core.strategies import Esmbo, Sego, Segor, SingleBest
from ensemble_bo.core.trials import TrialRequest
from ensemble_bo.core.workers import WorkerEvaluator
from ensemble_bo.core.zoo import make_model

PROJECT = Path(__file__).resolve().parents[1]

# The default regression space, segor_sklearn (every family: 0.1-1 s a trial on
# concrete), is searched end to end by tests/test_run.py's concrete_run alone.
# Searches that test plumbing (a run, its tracking, a rerun, the API) use the
# papers' decision tree instead (~0.02 s a trial): as `kedro run --params` for a
# segor run ...
CHEAP_MODEL = "decision_tree_regressor"
CHEAP_SEGOR = f"segor.model={CHEAP_MODEL}"
# ... and for the methods whose `model` is auto (smbo, esmbo, ers,
# random_search), which take default_models.regression (and still log "auto").
CHEAP_AUTO = f"default_models.regression={CHEAP_MODEL}"
# The smallest segor run through `kedro run --params`: 3 trials, an ensemble of 2.
TINY_SEGOR = (
    "budget=3,ensemble.size=2,segor.optimizer.n_initial=3,segor.optimizer.gp_restarts=1,"
    + CHEAP_SEGOR
)


def cheap_parameters() -> dict:
    """The project's default parameters, searching CHEAP_MODEL for regression
    (segor's model and the `auto` methods'), for searches run in process."""
    from ensemble_bo.api import default_parameters  # noqa: PLC0415

    parameters = default_parameters()
    parameters["default_models"] = {
        **parameters["default_models"],
        "regression": CHEAP_MODEL,
    }
    parameters["segor"] = {**parameters["segor"], "model": CHEAP_MODEL}
    return parameters


def copy_project(root: Path, datasets: Iterable[str] = ("concrete",)) -> Path:
    """A runnable copy of the project at `root` (scripts.project_copy)."""
    return project_copy(PROJECT, root, list(datasets))


def git(root: Path, *args: str) -> str:
    """`git <args>`'s output in `root` (stripped); a failure raises."""
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()


def git_project(
    root: Path,
    datasets: Iterable[str] = ("cpu_performance",),
    files: Mapping[str, str] | None = None,
) -> Path:
    """copy_project as a git repository with one commit (what a rerun checks out):
    with the lock and the Makefile, `files` (path: text) written, and git
    ignoring the store and the outputs."""
    copy_project(root, datasets)
    for name in ("requirements.lock", "Makefile"):
        shutil.copy(PROJECT / name, root)
    (root / "src" / ".gitkeep").touch()
    (root / ".gitignore").write_text("store/\nmlflow.db\nmlartifacts/\ndata/0[2-8]*/\n")
    for path, text in (files or {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    git = ["git", "-c", "user.email=test@example.com", "-c", "user.name=test"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project"]):
        subprocess.run([*git, *command], cwd=root, check=True, capture_output=True)
    return root


def kedro_env(tracking_uri: str | None, **extra: str) -> dict[str, str]:
    """The environment of a `kedro` subprocess: no telemetry, this store (None: the default)."""
    env = {**os.environ, "DO_NOT_TRACK": "true", "KEDRO_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    if tracking_uri is not None:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    env.update(extra)
    return env


KEDRO = [sys.executable, "-m", "kedro"]
ENSEMBLE_BO = [sys.executable, "-m", "ensemble_bo"]


def kedro(
    project: Path,
    *args: str,
    tracking_uri: str | None,
    timeout: float = 600,
    preexec_fn=None,
    command: Sequence[str] = KEDRO,
    **extra_env: str,
) -> subprocess.CompletedProcess:
    """`kedro *args` (or `command *args`) run in `project`, its output captured."""
    return subprocess.run(
        [*command, *args],
        cwd=project,
        env=kedro_env(tracking_uri, **extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=preexec_fn,
    )


def serve_csv(model_uri: str, csv: Path, tracking_uri: str) -> list:
    """The predictions of `mlflow models predict -t csv --env-manager local` for
    the rows of `csv`, as a user serves a logged model (a failure raises)."""
    completed = subprocess.run(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "models",
            "predict",
            "-m",
            model_uri,
            "-i",
            str(csv),
            "-t",
            "csv",
            "--env-manager",
            "local",
        ],
        env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])["predictions"]


# ---------------------------------------------------------------- process trees


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> str | None:
    fields = _stat(pid)
    return None if fields is None else fields[19]


def is_running(pid: int, started: str | None) -> bool:
    """The process `pid` that started at `started` still exists and is not a zombie."""
    fields = _stat(pid)
    return (
        fields is not None
        and fields[0] not in ("Z", "X")
        and (started is None or fields[19] == started)
    )


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, with its start time (so a reused PID is not counted)."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            parents[int(entry.name)] = int(fields[1])
    found, pending = {}, [pid]
    while pending:
        parent = pending.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                ticks = start_ticks(child)
                if ticks is not None:
                    found[child] = ticks
                    pending.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def kill_group(process: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop a process started with start_new_session=True, and its whole group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # Children that left the group's leader behind are still in its group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_until(condition, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


# ---------------------------------------------------------------- permissions

# Capabilities with which root ignores file permissions (linux/capability.h).
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3
_PR_CAPBSET_DROP = 24


def respect_file_permissions() -> None:
    """preexec_fn: the child, even as root, cannot write a read-only file.

    Drops the capabilities that let root ignore file modes from the bounding
    set, so the program the child executes never gets them.
    """
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            os._exit(97)


def read_only_files_are_enforced(folder: Path) -> bool:
    """Whether a child started with respect_file_permissions is refused a 0444 file."""
    probe = folder / "read-only-probe"
    probe.write_text("")
    probe.chmod(0o444)
    try:
        completed = subprocess.run(
            [sys.executable, "-c", f"open({str(probe)!r}, 'a')"],
            preexec_fn=respect_file_permissions,
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        probe.chmod(0o644)
        probe.unlink()
    return completed.returncode == 1 and b"PermissionError" in completed.stderr


# ---------------------------------------------------------------- browser checks


def load_browser_pages():
    """scripts/browser_pages.py as a module (the helpers the docs screenshots use)."""
    import importlib.util  # noqa: PLC0415 - only the browser tests need it

    path = PROJECT / "scripts" / "browser_pages.py"
    spec = importlib.util.spec_from_file_location("browser_pages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_chromium(find_chromium) -> None:
    """Skip without Chromium on a developer's machine; under CI, fail instead."""
    import pytest  # noqa: PLC0415 - support is imported by tests only

    if find_chromium() is not None:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(
            "Chromium is not installed, and CI runs the browser checks: "
            ".ci/run installs it (apt-get install chromium)"
        )
    pytest.skip(
        "Chromium is not installed (apt-get install chromium); CI installs it "
        "and runs this test"
    )


# ---------------------------------------------------------------- the tracking hook


def start_hook_run(tracking_uri: str, pipeline_name: str = "segor", **changes):
    """An MlflowTrackingHook that has run before_pipeline_run as Kedro calls it:
    through Kedro's hook manager, after the input checks (InputValidationHook,
    registered first, so called last unless it runs `tryfirst`).

    For the registered pipeline, reading the project's default parameters
    (with `changes`) and its bundled data; the run is the active MLflow run.
    """
    from ensemble_bo.tracking.hook import MlflowTrackingHook  # noqa: PLC0415
    from ensemble_bo.validation import InputValidationHook  # noqa: PLC0415

    hook = MlflowTrackingHook()
    start_pipeline_run(
        [InputValidationHook(), hook], tracking_uri, pipeline_name, **changes
    )
    return hook


@contextmanager
def run_in_new_store(folder: Path, experiment: str) -> Iterator:
    """An active MLflow run of `experiment` in a new SQLite store in `folder`
    (its artifacts in folder/artifacts), the tracking URI set to it."""
    import mlflow  # noqa: PLC0415

    mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
    experiment_id = mlflow.create_experiment(
        experiment, artifact_location=(folder / "artifacts").as_uri()
    )
    with mlflow.start_run(experiment_id=experiment_id) as active:
        yield active


def hook_on_active_run(buffer: Path):
    """An MlflowTrackingHook logging to the active MLflow run, as its
    before_pipeline_run leaves it (a server that stopped answering: into a
    buffer in the folder `buffer`)."""
    import mlflow  # noqa: PLC0415

    from ensemble_bo.tracking.hook import MlflowTrackingHook  # noqa: PLC0415
    from ensemble_bo.tracking.run_link import RunLink  # noqa: PLC0415

    hook = MlflowTrackingHook()
    hook._link = RunLink(mlflow.get_tracking_uri(), buffer)
    hook._link.run = mlflow.active_run()
    return hook


def start_pipeline_run(
    hooks: list, tracking_uri: str, pipeline_name: str = "segor", **changes
) -> None:
    """Register `hooks` in a Kedro hook manager, in this order, and call their
    after_context_created and before_pipeline_run as `kedro run` does."""
    from types import SimpleNamespace  # noqa: PLC0415

    from kedro.framework.hooks.manager import (  # noqa: PLC0415
        _create_hook_manager,
        _register_hooks,
    )

    from ensemble_bo.api import default_parameters  # noqa: PLC0415
    from ensemble_bo.pipeline_registry import register_pipelines  # noqa: PLC0415

    parameters = {**default_parameters(), **changes}
    manager = _create_hook_manager()
    _register_hooks(manager, hooks)
    config = {
        "tracking_uri": tracking_uri,
        "experiment_name": "ensemble_bo",
        "log_outputs": {"*_test_metrics": {"as": "metrics"}},
    }
    manager.hook.after_context_created(
        context=SimpleNamespace(config_loader={"mlflow": config}, project_path=PROJECT)
    )
    manager.hook.before_pipeline_run(
        run_params={"pipeline_names": [pipeline_name]},
        pipeline=register_pipelines()[pipeline_name],
        catalog=SimpleNamespace(
            load=lambda name: parameters
            if name == "parameters"
            else parameters[name.removeprefix("params:")]
        ),
    )


class RecordingRetargets:
    """Mixin for an optimizer class: keeps every set of targets a search tells it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.retargets = []

    def retarget(self, values):
        self.retargets.append(np.array(values))
        super().retarget(values)


def central_gradient(f, X: np.ndarray, h: float = 2e-5) -> np.ndarray:
    """Gradient (m, d) of a row-wise f: (m, d) -> (m,) by central differences,
    Richardson-extrapolated (steps h and h/2) so truncation costs ~h^4."""

    def central(step: float) -> np.ndarray:
        grad = np.empty_like(X)
        for j in range(X.shape[1]):
            shift = np.zeros(X.shape[1])
            shift[j] = step
            grad[:, j] = (f(X + shift) - f(X - shift)) / (2.0 * step)
        return grad

    return (4.0 * central(h / 2.0) - central(h)) / 3.0


# An SVM's space with a conditional float and int (tests of spaces and optimizers)
SVM_SPEC = {
    "kernel": {"type": "categorical", "choices": ["rbf", "linear", "poly"]},
    "C": {"type": "float", "low": 1e-3, "high": 1e3, "log": True},
    "gamma": {
        "type": "float",
        "low": 1e-5,
        "high": 10.0,
        "log": True,
        "condition": {"kernel": ["rbf", "poly"]},
    },
    "degree": {"type": "int", "low": 2, "high": 5, "condition": {"kernel": "poly"}},
}


# --- evaluators, requests and searches ------------------------------------------------


def cross_validation_evaluator(
    model_name,
    X,
    y,
    fold_ids,
    random_state=0,
    time_limit=None,
    model_factory=make_model,
    worker_process=False,
) -> WorkerEvaluator:
    """What run_method builds: a model's k-fold evaluation under a time limit."""
    return WorkerEvaluator(
        CrossValidation(model_name, X, y, fold_ids, random_state, model_factory),
        time_limit,
        worker_process,
    )


def request(
    config, folds=None, train_fraction=1.0, deadline=None, ticket=0
) -> TrialRequest:
    """A search's request of `config` (on `folds`, None: all; `deadline`: the
    time budget that may cut it)."""
    return TrialRequest(
        ticket,
        config,
        None if folds is None else tuple(folds),
        train_fraction,
        deadline,
    )


def from_config(evaluate):
    """A search's evaluator (TrialRequest -> TrialResult) from a test's function of
    the configuration, which may also take the request's `folds` and
    `train_fraction`; an evaluator that takes requests is returned as it is."""
    parameters = inspect.signature(evaluate).parameters
    if (
        isinstance(evaluate, WorkerEvaluator | CrossValidation)
        or "request" in parameters
    ):
        return evaluate
    if "folds" in parameters:
        return lambda request: evaluate(
            dict(request.config),
            folds=request.folds,
            train_fraction=request.train_fraction,
        )
    return lambda request: evaluate(dict(request.config))


def strategy_search(strategy_class):
    """A function building a Search of `strategy_class` from (optimizer,
    evaluate: a function of the configuration, y, fold_ids, the strategy's
    other arguments)."""

    def search(optimizer, evaluate, y, fold_ids, *args, **options) -> Search:
        strategy = strategy_class(y, fold_ids, *args, **options)
        return Search(strategy, optimizer, from_config(evaluate))

    return search


segor_search = strategy_search(Segor)
sego_search = strategy_search(Sego)
esmbo_search = strategy_search(Esmbo)
single_best_search = strategy_search(SingleBest)


class Stop(Exception):
    """What `stop_after`'s callback raises."""


def stop_after(iteration: int):
    """A search callback that stops the search after the given iteration."""

    def callback(record):
        if record.iteration == iteration:
            raise Stop

    return callback


def default_ctrl_c() -> None:
    """A child's preexec_fn: Ctrl-C (SIGINT) handled by default and not
    blocked, as a terminal starts a command. A child inherits both from the
    test process, where an earlier test in the same worker may have left
    SIGINT ignored or blocked; Python started with SIGINT ignored never
    raises KeyboardInterrupt."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def parent_ctrl_c_state() -> str:
    """This process's SIGINT handler and whether it blocks SIGINT (for a
    failing Ctrl-C test's message)."""
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return f"test process: SIGINT handler {signal.getsignal(signal.SIGINT)!r}, blocked {blocked}"


def model_input(n: int, task: str) -> ModelInput:
    """A search's input of `n` rows in 4 folds: two features (the row number
    and noise), a noise target for regression, for classification class 1 on
    10% of each fold's rows."""
    rng = np.random.default_rng(0)
    target = (
        rng.normal(size=n)
        if task == "regression"
        else (np.arange(n) // 4 % 10 == 0).astype(int)  # 10% of each fold
    )
    return ModelInput(
        features=np.column_stack([np.arange(n), rng.normal(size=n)]),
        target=target,
        fold_ids=np.arange(n) % 4,
        task=task,
        target_scaling={"mean": 0.0, "std": 1.0},
        dataset={"name": "big", "task": task, "categorical_columns": []},
    )
