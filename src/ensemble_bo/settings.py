"""Project settings: configuration loading and the MLflow tracking hook."""

from kedro.config import OmegaConfigLoader
from omegaconf.resolvers import oc

from ensemble_bo.tracking import MlflowTrackingHook

HOOKS = (MlflowTrackingHook(),)
# No usage data leaves a run, whether or not DO_NOT_TRACK is set (the Makefile sets it).
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-telemetry",)

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # conf/base/mlflow.yml is read by the tracking hook.
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
    # MLFLOW_TRACKING_URI may point the runs at an `mlflow server`.
    "custom_resolvers": {"oc.env": oc.env},
}
