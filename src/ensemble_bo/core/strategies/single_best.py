"""SMBO for one model (ESMBO Alg. 1, `s-m`), and random search over the same pool."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.selection.stages import AB_WEIGHTINGS, WEIGHTINGS
from ensemble_bo.core.settings import SearchSettings, check_loss, count, one_of, setting
from ensemble_bo.core.strategies.base import IterationContext, PoolScorer, Update


class SingleBest:
    """The optimizer models each model's own CV loss; the ensemble is the best one.

    With a RandomSearch optimizer this is random search (RS), and with the
    agnostic Bayes selection stage afterwards, ERS. `loss` "auto" is mse for
    regression and the error rate for classification. With an inference
    `budget`, the best model among those within its limits; the optimizer is
    then told no better than that model's loss for a model over the limits
    (max(own loss, held loss)), so that it proposes where the budget allows.
    """

    def __init__(
        self,
        y: np.ndarray,
        fold_ids: np.ndarray,
        loss: str = "auto",
        task: str = "regression",
        budget: InferenceBudget | None = None,
    ) -> None:
        self.scorer = PoolScorer(y, fold_ids, loss, task, auto_classification="error")
        self.budget = InferenceBudget() if budget is None else budget
        self._best: int | None = None
        self._held_loss = math.nan

    def start(self) -> None:
        self.budget.skipped = 0
        self._best = None
        self._held_loss = math.nan

    def begin(self, iteration: int, pool: Pool) -> IterationContext:
        return IterationContext(iteration, -1, self.scorer.fold_weights)

    def targets(
        self,
        context: IterationContext,
        pool: Pool,
        candidates: slice,
        single_losses: Sequence[float],
    ) -> np.ndarray:
        losses = np.asarray(single_losses, dtype=float)
        if not self.budget.active or self._best is None:
            return losses
        fits = self.budget.fits(pool, [])[candidates]
        return np.where(fits, losses, np.maximum(losses, self._held_loss))

    def update(
        self,
        context: IterationContext,
        pool: Pool,
        targets: np.ndarray,
        single_losses: Sequence[float],
    ) -> Update:
        if not np.isfinite(single_losses).any():
            return Update("none", math.nan)
        losses = np.asarray(single_losses, dtype=float)
        fits = self.budget.fits(pool, [])
        best = self.budget.best(losses, fits)
        if best is None:
            return Update("none", math.nan)
        self._best, self._held_loss = best, float(losses[best])
        # The whole pool is chosen from again at every trial: the budget's
        # turn-aways are the models better than the chosen one it refuses.
        self.budget.count_refused(losses, [best])
        return Update("select", float(losses[best]))

    def members(self) -> list[int]:
        return [] if self._best is None else [self._best]

    def weights(self) -> dict[int, float] | None:
        return None

    def search_metrics(self) -> dict[str, float]:
        return self.budget.metrics()


@dataclass(frozen=True)
class SingleBestSettings(SearchSettings):
    """`smbo` and `random_search`: the search's block, with the single model's CV loss."""

    loss: str = setting(check_loss)


@dataclass(frozen=True)
class ErsSettings(SearchSettings):
    """`ers`: a random search's block, with its agnostic Bayes ensemble's
    objective, posterior and final weights."""

    loss: str = setting(check_loss)
    posterior: str = setting(one_of(AB_WEIGHTINGS))
    n_samples: int = setting(count(1, "the number of posterior samples"))
    weighting: str = setting(one_of(WEIGHTINGS))
