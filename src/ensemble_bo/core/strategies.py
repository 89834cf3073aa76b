"""Search strategies: one SMBO loop, different objectives.

Every strategy asks an optimizer for a configuration, gets its out-of-fold
predictions from an evaluator (it never trains a model itself), records it
in the pool and updates its ensemble.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ensemble_bo.core.losses import (
    cv_loss_of_mean_ensembles,
    fold_weights,
    regression_loss,
)
from ensemble_bo.core.optimizer import GPEIOptimizer
from ensemble_bo.core.pool import Pool, TrialResult


@dataclass(frozen=True)
class IterationRecord:
    """What one iteration did; the metrics a run logs per step."""

    iteration: int
    slot: int
    trial: int
    status: str
    ensemble_loss: float
    best_single_loss: float
    ensemble_size: int
    acquisition_value: float
    fit_seconds: float


@dataclass
class EnsembleSearchResult:
    """The pool, the final ensemble (pool indices, one per slot) and the history."""

    pool: Pool
    members: list[int]
    single_losses: np.ndarray
    history: list[IterationRecord] = field(default_factory=list)

    @property
    def member_weights(self) -> dict[int, float]:
        """Pool index -> weight: a model filling k of the m slots weighs k / m."""
        counts = Counter(self.members)
        return {
            index: count / len(self.members) for index, count in sorted(counts.items())
        }

    @property
    def best_single(self) -> int:
        """Pool index of the model with the lowest individual CV loss (`s-m`)."""
        return int(np.nanargmin(self.single_losses))


class SegorSearch:
    """SEGOR with a fixed ensemble size and the mean combiner (SEGOR s.3, Alg. 1).

    At iteration i the model in slot j = i mod m is taken out; the GP is fit
    on f(gamma | E without slot j) for every model of the pool, EI picks the
    next configuration, it is trained, and slot j is refilled with the pool's
    argmin. Slots may hold the same model twice (selection with replacement).
    """

    def __init__(
        self,
        optimizer: GPEIOptimizer,
        evaluate: Callable[[dict[str, Any]], TrialResult],
        y: np.ndarray,
        fold_ids: np.ndarray,
        ensemble_size: int = 12,
        loss: str = "mse",
    ):
        if int(ensemble_size) != ensemble_size or ensemble_size < 1:
            raise ValueError(
                f"ensemble size must be a positive integer, got {ensemble_size!r}"
            )
        self.optimizer = optimizer
        self.evaluate = evaluate
        self.y = np.asarray(y, dtype=float)
        self.weights = fold_weights(fold_ids)
        self.per_sample_loss = regression_loss(loss)
        self.ensemble_size = int(ensemble_size)

    def run(
        self, budget: int, callbacks: Iterable[Callable[[IterationRecord], None]] = ()
    ) -> EnsembleSearchResult:
        if int(budget) != budget or budget < 1:
            raise ValueError(f"budget must be a positive integer, got {budget!r}")
        callbacks = list(callbacks)
        pool = Pool(len(self.y))
        result = EnsembleSearchResult(pool, [], np.empty(0))
        slots: list[int | None] = [None] * self.ensemble_size
        single_losses: list[float] = []
        for iteration in range(int(budget)):
            slot = iteration % self.ensemble_size
            others = [
                index
                for k, index in enumerate(slots)
                if k != slot and index is not None
            ]
            # Summing m rows afresh costs O(m n) and cannot drift like a running update.
            member_sum = pool.predictions[others].sum(axis=0)

            # f(gamma | E without slot j) for the whole pool; NaN rows stay NaN (failed).
            self.optimizer.relabel(
                self._losses_with_each(member_sum, len(others), pool.predictions)
            )
            suggestion = self.optimizer.ask()
            trial_result = self.evaluate(suggestion.config)
            trial = pool.add(suggestion.config, suggestion.encoded, trial_result)
            new_row = pool.predictions[trial : trial + 1]
            self.optimizer.tell(
                suggestion,
                float(self._losses_with_each(member_sum, len(others), new_row)[0])
                if trial_result.ok
                else None,
            )
            single_losses.append(
                float(self.per_sample_loss(new_row[0] - self.y) @ self.weights)
                if trial_result.ok
                else math.nan
            )

            losses = self.optimizer.values
            slots[slot] = (
                int(np.nanargmin(losses)) if np.isfinite(losses).any() else None
            )
            record = IterationRecord(
                iteration=iteration,
                slot=slot,
                trial=trial,
                status="ok" if trial_result.ok else "failed",
                ensemble_loss=float(np.nanmin(losses))
                if np.isfinite(losses).any()
                else math.nan,
                best_single_loss=float(np.nanmin(single_losses))
                if np.isfinite(single_losses).any()
                else math.nan,
                ensemble_size=sum(index is not None for index in slots),
                acquisition_value=suggestion.acquisition_value,
                fit_seconds=trial_result.fit_seconds,
            )
            result.history.append(record)
            for callback in callbacks:
                callback(record)

        result.members = [index for index in slots if index is not None]
        result.single_losses = np.array(single_losses)
        return result

    def _losses_with_each(
        self, member_sum: np.ndarray, member_count: int, candidates: np.ndarray
    ) -> np.ndarray:
        return cv_loss_of_mean_ensembles(
            member_sum,
            member_count,
            candidates,
            self.y,
            self.per_sample_loss,
            self.weights,
        )
