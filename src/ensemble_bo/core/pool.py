"""The pool: every evaluated configuration with its out-of-fold predictions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class TrialResult:
    """Outcome of evaluating one configuration by cross-validation.

    `oof_predictions` has shape (n,) when `ok`, else is None and `error` says why.
    """

    oof_predictions: np.ndarray | None
    fit_seconds: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Pool:
    """Trained-model history shared by all strategies (design.md s.3).

    Out-of-fold predictions are kept in one (capacity, n) array that doubles
    when full, so appending is amortized O(n) and `predictions` is a view.
    Failed trials keep a row of NaN so that row i is always trial i.

    For classification, `labels` (n,) are the true class codes: predictions are
    class codes too, and the pool also keeps each model's 0/1 correctness,
    which is what the strategies combine (see `outputs`).
    """

    def __init__(
        self,
        n_samples: int,
        initial_capacity: int = 64,
        labels: np.ndarray | None = None,
    ):
        self.n_samples = int(n_samples)
        self.labels = None if labels is None else np.asarray(labels)
        if self.labels is not None and self.labels.shape != (self.n_samples,):
            raise ValueError(
                f"labels of shape {self.labels.shape}, expected ({self.n_samples},)"
            )
        self._predictions = np.full((initial_capacity, self.n_samples), np.nan)
        # Classification: correctness computed once per model, not per iteration.
        self._correct = None if self.labels is None else self._predictions.copy()
        self.configs: list[dict[str, Any]] = []
        self.encoded: list[np.ndarray] = []
        self.fit_seconds: list[float] = []
        self.errors: list[str | None] = []

    def __len__(self) -> int:
        return len(self.configs)

    def add(
        self, config: dict[str, Any], encoded: np.ndarray, result: TrialResult
    ) -> int:
        """Append one trial; returns its index."""
        index = len(self)
        if result.ok:
            predictions = np.asarray(result.oof_predictions, dtype=float)
            if predictions.shape != (self.n_samples,):
                raise ValueError(
                    f"trial {index}: predictions of shape {predictions.shape}, "
                    f"expected ({self.n_samples},)"
                )
        if index == self._predictions.shape[0]:
            self._predictions = self._grown(self._predictions)
            if self._correct is not None:
                self._correct = self._grown(self._correct)
        if result.ok:
            self._predictions[index] = predictions
            if self._correct is not None:
                self._correct[index] = predictions == self.labels
        self.configs.append(dict(config))
        self.encoded.append(np.asarray(encoded, dtype=float))
        self.fit_seconds.append(float(result.fit_seconds))
        self.errors.append(result.error)
        return index

    def _grown(self, rows: np.ndarray) -> np.ndarray:
        grown = np.full((2 * len(rows), self.n_samples), np.nan)
        grown[: len(rows)] = rows
        return grown

    @property
    def predictions(self) -> np.ndarray:
        """Out-of-fold predictions, shape (t, n); rows of failed trials are NaN."""
        return self._predictions[: len(self)]

    @property
    def outputs(self) -> np.ndarray:
        """What the strategies average, shape (t, n); NaN rows for failed trials.

        Regression: the predictions. Classification: 1.0 where a model predicts
        the true class, else 0.0, so the mean over members is the fraction of
        correct votes that SEGO's margin losses are defined on.
        """
        if self._correct is None:
            return self.predictions
        return self._correct[: len(self)]

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of shape (t,): which trials trained successfully."""
        return np.array([error is None for error in self.errors], dtype=bool)

    def to_frame(self) -> pd.DataFrame:
        """One row per trial: its parameters, status, error text and fit time."""
        frame = pd.DataFrame(self.configs)
        frame.insert(0, "trial", np.arange(len(self)))
        frame["status"] = np.where(self.ok, "ok", "failed")
        frame["error"] = self.errors
        frame["fit_seconds"] = self.fit_seconds
        return frame
