"""Evaluating a configuration: k-fold out-of-fold predictions, failures recorded."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.model_selection import PredefinedSplit, cross_val_predict

from ensemble_bo.core.pool import TrialResult
from ensemble_bo.core.zoo import MODEL_FACTORIES, make_model


@dataclass
class CrossValidationEvaluator:
    """Callable config -> TrialResult over fixed folds.

    Strategies only see this interface, so the same loop can later run its
    evaluations elsewhere (joblib, Dask) without knowing it.

    X: (n, p) features; y: (n,) targets; fold_ids: (n,) fold index of each row.
    """

    algorithm: str
    X: np.ndarray
    y: np.ndarray
    fold_ids: np.ndarray
    random_state: int = 0

    def __post_init__(self) -> None:
        if self.algorithm not in MODEL_FACTORIES:
            raise ValueError(
                f"unknown algorithm {self.algorithm!r}; available: {sorted(MODEL_FACTORIES)}"
            )
        if not len(self.X) == len(self.y) == len(self.fold_ids):
            raise ValueError(
                f"X, y and fold_ids differ in length: {len(self.X)}, {len(self.y)}, "
                f"{len(self.fold_ids)}"
            )

    def __call__(self, config: dict[str, Any]) -> TrialResult:
        start = time.perf_counter()
        try:
            model = make_model(self.algorithm, config, self.random_state)
            predictions = cross_val_predict(
                model, self.X, self.y, cv=PredefinedSplit(self.fold_ids)
            )
            if not np.all(np.isfinite(predictions)):
                raise ValueError("the model predicted NaN or infinite values")
        except Exception as error:  # noqa: BLE001 - any training failure is a failed trial
            return TrialResult(
                None, time.perf_counter() - start, f"{type(error).__name__}: {error}"
            )
        return TrialResult(
            np.asarray(predictions, dtype=float), time.perf_counter() - start
        )
