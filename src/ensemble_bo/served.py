"""The logged model as MLflow serves it: predictions, or intervals and sets.

A run logs its final model as an MLflow sklearn model whose python_function
flavor loads through this module (tracking.artifacts.log_model), so that
`mlflow.pyfunc.load_model(uri).predict(df)` and `mlflow models serve` give
point predictions by default and, with the parameter `coverage`, conformal
prediction intervals (regression) or prediction sets (classification):

    model.predict(df, params={"coverage": 0.9})
    # regression: a frame with columns prediction, lower, upper
    # classification: a frame with columns prediction, prediction_set (a list
    # of the classes in the set)

A served model is asked the same way: {"dataframe_split": ..., "params":
{"coverage": 0.9}}. The model itself is the sklearn flavor's: loaded by
`mlflow.sklearn.load_model`, from the skops file with the types the run
trusted.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

# The parameter that asks for intervals or sets, and its type in the signature.
COVERAGE = "coverage"


class ServedEnsemble:
    """The pyfunc model: `predict(data, params)` as the module docstring says."""

    def __init__(self, model: Any):
        self.model = model

    def get_raw_model(self) -> Any:
        """The scikit-learn model (core.conformal's model, or the ensemble)."""
        return self.model

    def predict(self, data: pd.DataFrame, params: dict[str, Any] | None = None):
        """Predictions (n,), or with params {"coverage": c} a frame of the
        prediction and its interval or set at coverage c."""
        coverage = (params or {}).get(COVERAGE)
        if coverage is None:
            return self.model.predict(data)
        if hasattr(self.model, "predict_interval"):
            bounds = self.model.predict_interval(data, float(coverage))
            return pd.DataFrame(
                {
                    "prediction": self.model.predict(data),
                    "lower": bounds[:, 0],
                    "upper": bounds[:, 1],
                }
            )
        if hasattr(self.model, "predict_set"):
            sets = self.model.predict_set(data, float(coverage))
            classes = np.asarray(self.model.classes_)
            return pd.DataFrame(
                {
                    "prediction": self.model.predict(data),
                    "prediction_set": [classes[row].tolist() for row in sets],
                }
            )
        raise ValueError(
            f"params {{'{COVERAGE}': {coverage!r}}}: this model was logged without "
            "conformal fold models (the run's conformal=false), so it gives point "
            "predictions only; predict without params"
        )


def _load_pyfunc(path: str) -> ServedEnsemble:
    """MLflow's pyfunc loader: `path` is the model's skops file (or its folder)."""
    import mlflow.sklearn  # noqa: PLC0415 - MLflow imports this module lazily too

    folder = path if os.path.isdir(path) else os.path.dirname(path)
    return ServedEnsemble(mlflow.sklearn.load_model(folder))
