"""An inference budget: ensembles whose prediction time and size stay within limits.

Every trial measures its fold models' prediction seconds per 1,000 rows and
one fold model's pickled size (core.evaluation.FoldCosts). An ensemble
predicts with each of its distinct members, so its cost is the sum over its
distinct members (weights and repeats cost nothing). With a budget, a member
is placed only where the ensemble it joins stays within every limit: the
ensemble methods' slot refills and growth, post-hoc greedy selection and the
single best model all choose among the candidates that fit, and count how
often the best candidate did not (`skipped`; for a choice made from the whole
pool at once, how many better models it refused). A weighted ensemble of the
whole pool (agnostic Bayes) keeps its heaviest members that fit (`affordable`)
and is weighed again among them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ensemble_bo.core.pool import Pool
from ensemble_bo.core.row_capped import size_growth
from ensemble_bo.core.zoo import make_model

# MB as the parameter is written (10**6 bytes), as disk sizes are.
_BYTES_PER_MB = 1e6
# What a selection says when no model of its pool is within the budget.
NOTHING_AFFORDABLE = "no usable pool member fits the inference budget on its own"


def ensemble_predict_seconds(pool: Pool, members: Sequence[int]) -> float:
    """An ensemble's prediction seconds per 1,000 rows as its trials measured
    them: the sum over its distinct members; NaN for an empty ensemble or a
    member without a measurement."""
    distinct = sorted(set(members))
    if not distinct:
        return math.nan
    return float(np.sum(np.asarray(pool.predict_seconds_per_1000)[distinct]))


@dataclass
class InferenceBudget:
    """Limits on an ensemble's prediction seconds per 1,000 rows and its size
    in MB (None: no limit), and how many best candidates they turned away.

    size_scale: what a trial's measured size (one fold model's) is multiplied
    by to stand for its member refit on every training row: a number for
    every trial (e.g. the final model's rows over a fold model's,
    refit_size_scale), or a function of the trial's configuration
    (RefitSizeScale: by how its model's size grows with its rows).
    """

    max_seconds_per_1000_rows: float | None = None
    max_model_mb: float | None = None
    skipped: int = 0
    size_scale: float | Callable[[Mapping[str, Any]], float] = 1.0

    def __post_init__(self) -> None:
        # the trial scales of the configurations list last costed
        self._scaled: list | None = None
        self._scales: list[float] = []
        if not callable(self.size_scale) and not (
            math.isfinite(self.size_scale) and self.size_scale > 0
        ):
            raise ValueError(f"size_scale must be positive, got {self.size_scale!r}")
        for name in ("max_seconds_per_1000_rows", "max_model_mb"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(
                    f"inference.{name}={value!r} is not a positive number or null"
                )

    @property
    def active(self) -> bool:
        return (
            self.max_seconds_per_1000_rows is not None or self.max_model_mb is not None
        )

    def _limits(self) -> np.ndarray:
        return np.array(
            [
                np.inf if limit is None else limit
                for limit in (self.max_seconds_per_1000_rows, self.max_model_mb)
            ]
        )

    def costs(self, pool: Pool) -> np.ndarray:
        """(t, 2): each trial's prediction seconds per 1,000 rows and MB (of
        its refit model: size_scale)."""
        costs = np.column_stack(
            [
                np.asarray(pool.predict_seconds_per_1000, dtype=float),
                np.asarray(pool.model_bytes, dtype=float)
                * self._size_scales(pool)
                / _BYTES_PER_MB,
            ]
        )
        unmeasured = pool.ok & np.isnan(costs).any(axis=1)
        if unmeasured.any():
            raise ValueError(
                f"trials {np.flatnonzero(unmeasured).tolist()[:10]} have no measured "
                "prediction time or size (a pool saved before trials measured them): "
                "an inference budget cannot be kept on it"
            )
        return costs

    def _size_scales(self, pool: Pool) -> float | np.ndarray:
        """size_scale, or for a function of the configuration, each trial's:
        kept for the pool's trials so far, as a pool only grows."""
        if not callable(self.size_scale):
            return self.size_scale
        same = self._scaled is pool.configs and len(self._scales) <= len(pool)
        known = self._scales if same else []
        known += [self.size_scale(c) for c in pool.configs[len(known) :]]
        self._scaled, self._scales = pool.configs, known
        return np.array(known, dtype=float)

    def ensemble_cost(self, pool: Pool, members: Sequence[int]) -> np.ndarray:
        """(2,): the prediction seconds per 1,000 rows and MB of an ensemble
        (pool indices, repeats allowed): the sum over its distinct members."""
        distinct = sorted(set(members))
        return self.costs(pool)[distinct].sum(axis=0)

    def fits(self, pool: Pool, members: Sequence[int]) -> np.ndarray:
        """(t,) bool: which models of the pool the ensemble `members` can take
        (a model already in it always: repeats cost nothing)."""
        if not self.active:
            return np.ones(len(pool), dtype=bool)
        costs = self.costs(pool)
        distinct = sorted(set(members))
        total = costs[distinct].sum(axis=0) + costs
        total[distinct] = costs[distinct].sum(axis=0)
        return (total <= self._limits()).all(axis=1)

    def affordable(self, pool: Pool, weights: Mapping[int, float]) -> list[int]:
        """The members of a weighted ensemble (pool index -> weight) kept
        within the budget: the heaviest first (ties by index), each where it
        still fits. All of them without limits."""
        kept: list[int] = []
        for index in sorted(weights, key=lambda i: (-weights[i], i)):
            if not self.active or self.fits(pool, kept)[index]:
                kept.append(index)
        return sorted(kept)

    def count_refused(self, losses: np.ndarray, members: Sequence[int]) -> None:
        """`skipped` for a choice made from the whole pool at once: the models
        left out whose loss is below every member's (the better models the
        budget refused; `losses` (t,), NaN for failed trials)."""
        losses = np.asarray(losses, dtype=float)
        outside = np.ones(len(losses), dtype=bool)
        outside[list(members)] = False
        best_member = losses[list(members)].min() if len(members) else np.inf
        self.skipped = int(np.sum(outside & (losses < best_member)))

    def best(self, losses: np.ndarray, fits: np.ndarray) -> int | None:
        """The index of the lowest finite loss among the candidates that fit
        (None if none does); counts a skip where the overall best did not fit."""
        losses = np.where(np.isfinite(losses), losses, np.inf)
        allowed = np.where(fits, losses, np.inf)
        if not np.isfinite(allowed).any():
            if np.isfinite(losses).any():
                self.skipped += 1
            return None
        chosen = int(np.argmin(allowed))
        if chosen != int(np.argmin(losses)):
            self.skipped += 1
        return chosen

    def metrics(self) -> dict[str, float]:
        """What the run logs: how many best candidates the budget turned away."""
        return {"inference_budget_skipped": float(self.skipped)} if self.active else {}


@dataclass
class RefitSizeScale:
    """A trial's size_scale by how its model's size grows with its rows
    (core.row_capped.size_growth): `rows` (refit_size_scale to every training
    row) for trees and forests, `capped` for members refit on at most the
    search's rows, `rounds` for histogram boosting (the most its rounds grow
    refit on every row, core.row_capped.rounds_growth), 1 for models of
    bounded size (linear models, networks), whose fold model's size is their
    refit's.

    model_name: the searched model, which builds each configuration (zoo).
    Each configuration's model is built once per budget and pool
    (InferenceBudget keeps the scales of a pool's trials).
    """

    model_name: str
    rows: float
    capped: float
    rounds: float = 1.0

    def __call__(self, config: Mapping[str, Any]) -> float:
        try:
            growth = size_growth(make_model(self.model_name, dict(config), 0))
        except ImportError:
            # a saved pool selected again where an optional learner's
            # package is missing: counted as growing with its rows
            growth = "rows"
        return {
            "rows": self.rows,
            "capped": self.capped,
            "rounds": self.rounds,
            "bounded": 1.0,
        }[growth]


def refit_size_scale(fold_ids: np.ndarray, training_rows: int | None = None) -> float:
    """How much larger a model refit on `training_rows` (None: the rows of
    `fold_ids`) is than the fold model a trial measured, by rows: that over
    a fold model's rows, the rows of `fold_ids` less a mean fold. A search
    on a sample of large data (core.preparation.search_input) measures fold
    models of the sample, and its members are refit on every row."""
    rows = len(fold_ids)
    fold_rows = rows - rows / len(np.unique(fold_ids))
    return (rows if training_rows is None else training_rows) / fold_rows
