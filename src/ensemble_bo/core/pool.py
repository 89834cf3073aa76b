"""The pool: every evaluated configuration with its out-of-fold predictions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.core.losses import (
    CLASS_CODES,
    CORRECTNESS,
    PREDICTIONS,
    PROBABILITIES,
    PROBABILITY_SQUARE_NORM,
    TRUE_CLASS_PROBABILITY,
)
from ensemble_bo.core.trials import TrialResult


def n_classes(labels: np.ndarray) -> int:
    """K for class codes 0..K-1 (the largest code + 1)."""
    return int(np.max(labels)) + 1


def _empty_rows(shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Rows for an output kind as failed trials leave them: NaN (-1 for codes)."""
    if kind == CLASS_CODES:
        return np.full(shape, -1, dtype=np.int32)
    return np.full(shape, np.nan)


class Pool:
    """Trained-model history shared by all strategies, selections and the refit.

    Out-of-fold outputs are kept in (capacity, n) arrays that double when
    full, so appending is amortized O(n) and reading them is a view. Failed
    trials keep rows of NaN (-1 for class codes) so that row i is always trial i.

    For classification, `labels` (n,) are the true class codes 0..K-1:
    predictions are class codes too, and the pool also keeps, computed once
    per model, what the objectives combine (losses.Objective.outputs): each
    model's 0/1 correctness, its class probabilities (n, K) and its
    probability of the true class (see `member_outputs`).
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
        shapes = {PREDICTIONS: (self.n_samples,)}
        if self.labels is not None:
            self.n_classes = n_classes(self.labels)
            shapes |= {
                CLASS_CODES: (self.n_samples,),
                CORRECTNESS: (self.n_samples,),
                TRUE_CLASS_PROBABILITY: (self.n_samples,),
                PROBABILITIES: (self.n_samples, self.n_classes),
                PROBABILITY_SQUARE_NORM: (self.n_samples,),
            }
        self._outputs = {
            kind: _empty_rows((initial_capacity, *shape), kind)
            for kind, shape in shapes.items()
        }
        self.configs: list[dict[str, Any]] = []
        self.encoded: list[np.ndarray] = []
        self.fit_seconds: list[float] = []
        self.predict_seconds_per_1000: list[float] = []
        self.model_bytes: list[float] = []
        self.errors: list[str | None] = []

    def __len__(self) -> int:
        return len(self.configs)

    # Pickled: the rows in use of the outputs the others derive from. A
    # classification pool's correctness, true-class probability and square norm
    # are recomputed on load, so its pickle holds (1 + K) n values per trial.
    _PICKLED = (PREDICTIONS, PROBABILITIES)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if "_outputs" not in state:  # an old-format pool not yet loaded
            return state
        state["_outputs"] = {
            kind: rows[: len(self)]
            for kind, rows in self._outputs.items()
            if kind in self._PICKLED
        }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, recomputing the derived outputs; also a pool saved before
        probabilities were kept (one array of predictions), whose classifiers
        count as giving one-hot probabilities."""
        state = dict(state)
        outputs = state.pop("_outputs", None)
        if outputs is None:
            outputs = {PREDICTIONS: state.pop("_predictions")}
            state.pop("_correct", None)
        self.__dict__.update(state)
        self.__init__(self.n_samples, max(len(self), 1), self.labels)
        self.__dict__.update({k: v for k, v in state.items() if k != "n_classes"})
        for costs in ("predict_seconds_per_1000", "model_bytes"):
            if costs not in state:  # pickled before trials measured them
                setattr(self, costs, [math.nan] * len(self))
        probabilities = outputs.get(PROBABILITIES)
        for index in np.flatnonzero(self.ok):
            trial = TrialResult(
                outputs[PREDICTIONS][index],
                0.0,
                oof_probabilities=None
                if probabilities is None
                else probabilities[index],
            )
            for kind, values in self._trial_outputs(int(index), trial).items():
                self._outputs[kind][index] = values

    def add(
        self, config: dict[str, Any], encoded: np.ndarray, result: TrialResult
    ) -> int:
        """Append one trial; returns its index."""
        index = len(self)
        outputs = self._trial_outputs(index, result) if result.ok else {}
        if index == len(self._outputs[PREDICTIONS]):
            self._outputs = {
                kind: self._grown(rows, kind) for kind, rows in self._outputs.items()
            }
        for kind, values in outputs.items():
            self._outputs[kind][index] = values
        self.configs.append(dict(config))
        self.encoded.append(np.asarray(encoded, dtype=float))
        self.fit_seconds.append(float(result.fit_seconds))
        self.predict_seconds_per_1000.append(float(result.predict_seconds_per_1000))
        self.model_bytes.append(float(result.model_bytes))
        self.errors.append(result.error)
        return index

    def _trial_outputs(self, index: int, result: TrialResult) -> dict[str, np.ndarray]:
        """Every output kind of a successful trial, its shapes checked."""
        predictions = np.asarray(result.oof_predictions, dtype=float)
        if predictions.shape != (self.n_samples,):
            raise ValueError(
                f"trial {index}: predictions of shape {predictions.shape}, "
                f"expected ({self.n_samples},)"
            )
        if self.labels is None:
            return {PREDICTIONS: predictions}
        codes = predictions.astype(np.int32)
        if (
            not np.array_equal(codes, predictions)
            or codes.min() < 0
            or codes.max() >= self.n_classes
        ):
            raise ValueError(
                f"trial {index}: predicted class codes must be whole numbers in "
                f"[0, {self.n_classes}), got {sorted(set(predictions.tolist()))[:10]}"
            )
        if result.oof_probabilities is None:
            probabilities = np.eye(self.n_classes)[codes]
        else:
            probabilities = np.asarray(result.oof_probabilities, dtype=float)
            expected = (self.n_samples, self.n_classes)
            if probabilities.shape != expected:
                raise ValueError(
                    f"trial {index}: probabilities of shape {probabilities.shape}, "
                    f"expected {expected}"
                )
        return {
            PREDICTIONS: predictions,
            CLASS_CODES: codes,
            CORRECTNESS: predictions == self.labels,
            PROBABILITIES: probabilities,
            PROBABILITY_SQUARE_NORM: np.square(probabilities).sum(axis=1),
            TRUE_CLASS_PROBABILITY: probabilities[
                np.arange(self.n_samples), self.labels.astype(int)
            ],
        }

    @staticmethod
    def _grown(rows: np.ndarray, kind: str) -> np.ndarray:
        grown = _empty_rows((2 * len(rows), *rows.shape[1:]), kind)
        grown[: len(rows)] = rows
        return grown

    @property
    def predictions(self) -> np.ndarray:
        """Out-of-fold predictions, shape (t, n); rows of failed trials are NaN."""
        return self.member_outputs(PREDICTIONS)

    def member_outputs(self, kind: str) -> np.ndarray:
        """What each model contributes to an objective (losses.Objective.outputs).

        "predictions" (t, n); for classification also "correctness" (t, n), 1.0
        where a model predicts the true class, so the mean over members is the
        fraction of correct votes that SEGO's margin losses are defined on;
        "probabilities" (t, n, K); "true_class_probability" (t, n);
        "probability_square_norm" (t, n), sum_k p_k**2; "class_codes" (t, n),
        the predictions as int32. Rows of failed trials are NaN (-1 in
        "class_codes").
        """
        if kind not in self._outputs:
            raise ValueError(
                f"a {'classification' if self.labels is not None else 'regression'} "
                f"pool has no {kind!r} outputs; it has {sorted(self._outputs)}"
            )
        return self._outputs[kind][: len(self)]

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of shape (t,): which trials trained successfully."""
        return np.array([error is None for error in self.errors], dtype=bool)

    def to_frame(self) -> pd.DataFrame:
        """One row per trial: its parameters, status, error text, fit time,
        prediction seconds per 1,000 rows and model size (MiB, pickled)."""
        frame = pd.DataFrame(self.configs)
        frame.insert(0, "trial", np.arange(len(self)))
        frame["status"] = np.where(self.ok, "ok", "failed")
        frame["error"] = self.errors
        frame["fit_seconds"] = self.fit_seconds
        frame["predict_seconds_per_1000"] = self.predict_seconds_per_1000
        frame["model_mib"] = np.asarray(self.model_bytes) / 2**20
        return frame
