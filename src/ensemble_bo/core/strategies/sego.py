"""SEGO (Levesque et al. 2016, Alg. 1): ensemble optimization for classification."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.selection.stages import WEIGHTINGS
from ensemble_bo.core.settings import SearchSettings, check_loss, count, one_of, setting
from ensemble_bo.core.strategies.base import PoolScorer
from ensemble_bo.core.strategies.slots import SlotEnsemble


class Sego(SlotEnsemble):
    """SEGO: m fixed slots filled round-robin (slot j = i mod m).

    The optimizer models the squared-margin loss (eq. 9, multiclass margin of
    eq. 7) of the ensemble with slot j replaced by each model, and the slot
    gets the pool's argmin (strategies.slots). The final ensemble votes by
    (weighted) majority. Any other classification objective can take the
    squared margin's place (`loss`: the vote's error, or the log-loss or
    Brier score of mean probabilities, whose final ensemble then averages
    probabilities). `labels` are class codes 0..K-1.
    """

    def __init__(
        self,
        labels: np.ndarray,
        fold_ids: np.ndarray,
        ensemble_size: int = 12,
        loss: str = "squared_margin",
        budget: InferenceBudget | None = None,
    ) -> None:
        super().__init__(
            PoolScorer(labels, fold_ids, loss, task="classification"),
            ensemble_size,
            sizing="fixed",
            budget=budget,
        )


@dataclass(frozen=True)
class SegoSettings(SearchSettings):
    """`sego`: the search's block, with its ensemble's size, objective and weights."""

    ensemble_size: int = setting(count(1, "the number of ensemble slots"))
    loss: str = setting(check_loss)
    weighting: str = setting(one_of(WEIGHTINGS))
