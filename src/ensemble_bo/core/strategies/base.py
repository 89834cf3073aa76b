"""What a search strategy is: the interface the search loop drives, and the
objective computations every strategy shares.

A strategy decides what the optimizer minimizes (the GP's targets for every
model of the pool) and which ensemble the pool makes. It never trains a model
and never talks to the optimizer: the loop (core.search) asks it for the
iteration's context, the pool's targets and, after each trial, its update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ensemble_bo.core.losses import (
    CLASS_CODES,
    PROBABILITIES,
    PROBABILITY_SQUARE_NORM,
    TRUE_CLASS_PROBABILITY,
    Objective,
    brier_of_mean_ensembles,
    cv_loss_of_mean_ensembles,
    fold_weights,
    log_loss_of_mean_ensembles,
    objective,
)
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.selection.greedy import plurality_vote_cv_errors
from ensemble_bo.core.selection.stages import ensemble_cv_loss


@dataclass(frozen=True)
class IterationContext:
    """What one iteration works on, fixed when it begins (Strategy.begin).

    iteration: its index; slot: the ensemble slot (SEGO, SEGOR) or bootstrap
    replica (ESMBO) it works on, -1 for none; cv_weights: (n,) each row's
    weight in the iteration's CV losses, summing to 1 (the folds' weights, or
    only the rows a multi-fidelity rung has evaluated, `on_rows`); members:
    the pool indices of the ensemble the candidates join (SEGO, SEGOR: the
    ensemble without the slot's model; repeats allowed).
    """

    iteration: int
    slot: int
    cv_weights: np.ndarray
    members: tuple[int, ...] = ()

    def on_rows(self, rows: np.ndarray) -> IterationContext:
        """The context estimated on `rows` alone ((n,) bool, e.g. a rung's
        evaluated folds): their weights renormalized, the others 0."""
        return replace(self, cv_weights=restricted(self.cv_weights, rows))


def restricted(weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Row weights (n,) kept on `rows` and renormalized to sum 1; uniform on
    `rows` where they hold no weight there (a bootstrap replica may draw none)."""
    kept = np.where(rows, weights, 0.0)
    if kept.sum() <= 0:
        kept = np.asarray(rows, dtype=float)
    return kept / kept.sum()


@dataclass(frozen=True)
class Update:
    """What a trial did to the strategy's ensemble: the action taken (replace,
    grow, shrink, select, none) and the ensemble's CV loss after it."""

    action: str
    ensemble_loss: float


class Strategy(Protocol):
    """The interface the search loop (core.search.SearchLoop) drives.

    Per run: `start()` empties the ensemble. Per iteration i: `begin(i, pool)`
    returns its context (and may adapt the strategy to the pool so far, as
    ESMBO tunes rho once); `targets(context, pool, candidates, single_losses)`
    gives the optimizer's targets of the pool's models `candidates` (a slice),
    lower is better, NaN for failed trials; after the iteration's trial joins
    the pool, `update(context, pool, targets, single_losses)` updates the
    ensemble, `targets` being those of every model of the pool for this
    iteration (as told to the optimizer). `members()`, `weights()` and
    `search_metrics()` describe the ensemble and the search at any point.
    single_losses: each pool model's own CV loss under the strategy's
    objective (NaN for failed trials).

    A new strategy is one module of this package plus its registry entry
    (core.methods).
    """

    scorer: PoolScorer

    def start(self) -> None: ...

    def begin(self, iteration: int, pool: Pool) -> IterationContext: ...

    def targets(
        self,
        context: IterationContext,
        pool: Pool,
        candidates: slice,
        single_losses: Sequence[float],
    ) -> np.ndarray: ...

    def update(
        self,
        context: IterationContext,
        pool: Pool,
        targets: np.ndarray,
        single_losses: Sequence[float],
    ) -> Update: ...

    def members(self) -> list[int]:
        """The ensemble's pool indices, one per slot (repeats allowed)."""
        ...

    def weights(self) -> dict[int, float] | None:
        """Explicit member weights by pool index; None: the members' counts."""
        ...

    def search_metrics(self) -> dict[str, float]:
        """Quantities of the search worth logging with the run's metrics."""
        ...


class PoolScorer:
    """A strategy's objective over a pool: CV losses of its models and ensembles.

    y: the pool's target (n,), regression values or class codes; fold_ids: (n,).
    `loss` "auto" is mse for regression and `auto_classification` for
    classification. Each model's per-sample losses are computed once
    (`sample_losses`), in a buffer that doubles like the pool's.
    """

    def __init__(
        self,
        y: np.ndarray,
        fold_ids: np.ndarray,
        loss: str = "auto",
        task: str = "regression",
        auto_classification: str = "squared_margin",
    ) -> None:
        self.objective: Objective = objective(task, loss, auto=auto_classification)
        self.per_sample_loss = self.objective.per_sample_loss
        self.target = np.asarray(y)
        self.labels = self.target if task == "classification" else None
        # What the mean of the members' outputs is compared with (Objective.target):
        # y for regression, 1 for correctness, one-hot labels for probabilities.
        self.y = self.objective.target(self.target)
        self.fold_ids = np.asarray(fold_ids)
        self.fold_weights = fold_weights(fold_ids)
        self.forget()

    def forget(self) -> None:
        """Drop the cached per-sample losses (a new run, on a new pool)."""
        self._cached_pool: Pool | None = None
        self._sample_loss_rows = np.empty((0, len(self.target)))
        self._sample_losses_done = 0

    def outputs(self, pool: Pool) -> np.ndarray:
        """What each model of the pool contributes to the objective: (t, n) or (t, n, K)."""
        return pool.member_outputs(self.objective.outputs)

    def cv_loss(self, prediction: np.ndarray, cv_weights: np.ndarray) -> float:
        """k-fold CV loss of one combined output, (n,) or (n, K)."""
        return float(self.per_sample_loss(prediction - self.y) @ cv_weights)

    def losses_with_each(
        self,
        pool: Pool,
        members: Sequence[int],
        candidates: slice,
        cv_weights: np.ndarray,
    ) -> np.ndarray:
        """CV loss of the ensemble `members` (pool indices, repeats allowed) plus
        each candidate (a slice of the pool: a view, never a copy); NaN for
        failed candidates."""
        if self.objective.vote and len(members):
            return self._vote_losses_with_each(pool, members, candidates, cv_weights)
        outputs = self.outputs(pool)
        member_sum = outputs[list(members)].sum(axis=0)
        if self.objective.outputs == PROBABILITIES:  # the Brier score
            return brier_of_mean_ensembles(
                member_sum,
                len(members),
                outputs[candidates],
                pool.member_outputs(PROBABILITY_SQUARE_NORM)[candidates],
                pool.member_outputs(TRUE_CLASS_PROBABILITY)[candidates],
                self.labels.astype(int),
                cv_weights,
            )
        if self.objective.outputs == TRUE_CLASS_PROBABILITY:  # the log-loss
            return log_loss_of_mean_ensembles(
                member_sum, len(members), outputs[candidates], cv_weights
            )
        return cv_loss_of_mean_ensembles(
            member_sum,
            len(members),
            outputs[candidates],
            self.y,
            self.per_sample_loss,
            cv_weights,
        )

    def _vote_losses_with_each(
        self,
        pool: Pool,
        members: Sequence[int],
        candidates: slice,
        cv_weights: np.ndarray,
    ) -> np.ndarray:
        labels = self.labels.astype(int)
        codes = pool.member_outputs(CLASS_CODES)
        votes = np.zeros((len(labels), pool.n_classes))
        for member in members:
            votes[np.arange(len(labels)), codes[member]] += 1
        indices = np.arange(len(pool))[candidates]
        ok = pool.ok[indices]
        losses = np.full(len(indices), math.nan)
        # A view of the codes when every candidate trained, the usual case.
        losses[ok] = plurality_vote_cv_errors(
            votes,
            codes[candidates] if ok.all() else codes[indices[ok]],
            labels,
            cv_weights,
        )
        return losses

    def sample_losses(self, pool: Pool) -> np.ndarray:
        """Each model's own per-sample losses (t, n), NaN rows for failed trials.

        Cached for the first pool it is asked about after `forget()` (the
        search's), so single-model risks under any weighting are then one
        matrix product; any other pool (a multi-fidelity rung's scratch copy)
        is computed afresh.
        """
        if self._cached_pool is None:
            self._cached_pool = pool
        if pool is not self._cached_pool:
            return self.per_sample_loss(self.outputs(pool) - self.y)
        done, total = self._sample_losses_done, len(pool)
        if done < total:
            if total > len(self._sample_loss_rows):
                grown = np.full((max(64, 2 * total), len(self.target)), math.nan)
                if done:
                    grown[:done] = self._sample_loss_rows[:done]
                self._sample_loss_rows = grown
            self._sample_loss_rows[done:total] = self.per_sample_loss(
                self.outputs(pool)[done:total] - self.y
            )
            self._sample_losses_done = total
        return self._sample_loss_rows[:total]

    def ensemble_cv_loss(self, pool: Pool, weights: dict[int, float]) -> float:
        """CV loss of the ensemble weighing pool model i by weights[i] (any scale)."""
        return ensemble_cv_loss(
            pool,
            self.objective,
            self.target,
            self.fold_ids,
            weights,
            self.fold_weights,
        )
