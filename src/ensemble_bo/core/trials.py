"""A trial: one configuration's evaluation, as asked for and as it ended.

A search hands each `TrialRequest` to a runner (core.runners), which gives back
its `TrialResult`; the journal (core.journal) records both, and the
multi-fidelity driver (core.brackets) asks for a configuration's rungs as
requests of a share of the folds or of the rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ensemble_bo.core.time_budget import TimeBudget


@dataclass(frozen=True)
class TrialRequest:
    """One evaluation a search asks for.

    ticket: its number among the search's requests (the journal's index for a
    search replayed by proposal). config: the configuration to train; for a
    multi-fidelity rung on iterations, with that rung's number of trees,
    stages or epochs. folds: the CV folds to predict, the others' rows left
    NaN (None: every fold): a rung on folds. train_fraction: the share of each
    fold's training rows fitted on, < 1 on a rung on rows. deadline: the
    search's time budget, which cuts the trial when it runs out; None for a
    trial it never cuts (the search's first, or its first multi-fidelity
    bracket: the search needs a model to refit).
    """

    ticket: int
    config: Mapping[str, Any]
    folds: tuple[int, ...] | None = None
    train_fraction: float = 1.0
    deadline: TimeBudget | None = field(default=None, compare=False)

    @property
    def scope(self) -> tuple[tuple[int, ...] | None, float]:
        """(folds, train_fraction): the part of the evaluation it asks for."""
        return self.folds, self.train_fraction

    def same_evaluation(self, other: TrialRequest) -> bool:
        """Whether `other` asks for the same evaluation (ticket and deadline aside)."""
        return dict(self.config) == dict(other.config) and self.scope == other.scope


@dataclass(frozen=True)
class TrialResult:
    """Outcome of evaluating one configuration by cross-validation.

    `oof_predictions` has shape (n,) when `ok`, else is None and `error` says
    why. For classification, `oof_predictions` are class codes and
    `oof_probabilities` (n, K) the class probabilities of the same fits (None:
    the model has none, and the pool takes the one-hot of its labels).
    `never_ran`: the evaluation did not take place (its worker process could
    not start), so a resumed search trains it instead of replaying the failure.
    `predict_seconds_per_1000`: the fold models' prediction seconds per 1,000
    rows, measured on their held-out rows; `model_bytes`: the pickled size of
    one fold model, which a model refit on all rows is close to. Both NaN for
    a failed trial, or one recorded before they were measured.
    """

    oof_predictions: np.ndarray | None
    fit_seconds: float
    error: str | None = None
    oof_probabilities: np.ndarray | None = None
    never_ran: bool = False
    predict_seconds_per_1000: float = math.nan
    model_bytes: float = math.nan

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def seconds_taken(self) -> float:
        """What the evaluation cost in seconds: NaN where it never ran."""
        return math.nan if self.never_ran else self.fit_seconds
