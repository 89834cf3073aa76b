"""Project settings: configuration loading, the hooks, two warnings silenced, a quick exit.

No usage data leaves a run, however it is started (`make`, `kedro run` or
`ensemble-bo` in an activated venv): MLflow's telemetry is switched off below,
Kedro's by `.telemetry`.
"""

import atexit
import gc
import os
import warnings

# MLflow 3 starts its telemetry client (an installation id written under
# ~/.config/mlflow, usage events sent to MLflow's servers) when `mlflow` is
# first imported, reading its opt-out then: so it is set here, before the
# hooks below import MLflow. Kedro loads these settings before any other module
# of the project that imports MLflow, for `kedro run` and `ensemble-bo` alike.
# Setting MLFLOW_DISABLE_TELEMETRY=false in the environment opts back in.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from kedro.config import OmegaConfigLoader
from omegaconf.resolvers import oc

from ensemble_bo.journal_cleanup import JournalCleanupHook
from ensemble_bo.tracking.hook import MlflowTrackingHook
from ensemble_bo.validation import InputValidationHook

# InputValidationHook checks the inputs first (tryfirst), before the tracking
# hook opens the store and an MLflow run.
HOOKS = (InputValidationHook(), MlflowTrackingHook(), JournalCleanupHook())

# Python's exit ends with garbage collections over every object still alive,
# for a run the million or so of MLflow, scikit-learn, SciPy and the run itself:
# 1.5-2 s after its last line is printed. Frozen at exit, they are skipped: their
# memory goes back with the process, and every exit handler still runs.
atexit.register(gc.freeze)

# `.telemetry` (consent: false) in the project root turns kedro-telemetry off for
# every `kedro` command; its project hooks also go. kedro-viz (a dev tool) would
# otherwise write .viz/ stats on every run.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-telemetry", "kedro-viz")


def silence_known_warnings() -> None:
    """Filter the two warnings a run would print that are neither ours nor the user's.

    - Kedro 1.7's OmegaConfigLoader registers its resolvers (globals,
      runtime_params and the oc.env below) through OmegaConf 2.4's deprecated
      register_new_resolver(): Kedro's call, silenced where Kedro makes it only.
    - MLflow's hint on integer input columns when the tracking hook logs a model.
    """
    warnings.filterwarnings(
        "ignore",
        message=r"register_new_resolver\(\) is deprecated",
        category=UserWarning,
        module=r"kedro\.config\.omegaconf_config",
    )
    warnings.filterwarnings(
        "ignore",
        message="Hint: Inferred schema contains integer column",
        category=UserWarning,
        module=r"mlflow\.types\.utils",
    )


silence_known_warnings()

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # conf/base/mlflow.yml is read by the tracking hook.
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
    # MLFLOW_TRACKING_URI may point the runs at an `mlflow server`.
    "custom_resolvers": {"oc.env": oc.env},
    # An env (conf/results, `--env=...`) overrides only the parameter keys it
    # names. Kedro's default replaces whole top-level blocks, and Kedro 1.7 merges
    # `--params` into the env's blocks first, so `--env=results --params
    # segor.weighting=bfgs` left a `segor` block holding nothing else.
    "merge_strategy": {"parameters": "soft"},
}
