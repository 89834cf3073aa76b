"""ESMBO (Lacoste et al. 2014, s.4, Alg. 2): round-robin SMBO over bootstrap replicas."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ensemble_bo.core.agnostic_bayes import bootstrap_posterior, tune_rho
from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.selection.stages import AB_WEIGHTINGS, WEIGHTINGS
from ensemble_bo.core.settings import (
    InvalidInput,
    SearchSettings,
    check_loss,
    count,
    one_of,
    setting,
)
from ensemble_bo.core.strategies.base import (
    IterationContext,
    PoolScorer,
    Update,
    restricted,
)

# ESMBO's final ensemble (`esmbo.ensemble`): the whole pool weighed by the agnostic
# Bayes posterior (a selection stage, core.methods), or the replicas' winners.
ESMBO_ENSEMBLES = ("posterior", "replica_winners")


@dataclass(frozen=True)
class ReplicaContext(IterationContext):
    """An ESMBO iteration: its slot is the replica, whose bootstrap weights
    (n,) weigh each row of the risks the optimizer models."""

    replica_weights: np.ndarray | None = None

    def on_rows(self, rows: np.ndarray) -> ReplicaContext:
        """The replica's weights renormalized on `rows` (uniform there should
        the replica have drawn none of them), as the CV weights are."""
        return replace(
            super().on_rows(rows),
            replica_weights=restricted(self.replica_weights, rows),
        )


class Esmbo:
    """ESMBO: agnostic Bayes ensemble with SMBO.

    N bootstrap resamples S'_1..S'_N of the validation samples are drawn once.
    Iteration i runs SMBO for replica v = i mod N: the optimizer is told the
    risks R_{S'_v}(h) of every model in the pool (the cached per-sample losses
    make each new model update all N histories at once). The ensemble holds
    each replica's argmin; a model is weighted by the share of replicas it
    wins, a replica with tied minima splitting its share evenly (the method
    registry can instead weigh the whole pool by the agnostic Bayes posterior
    after the search: `esmbo.ensemble`).

    Each replica resamples ceil(rho n) of the n samples. The paper's holdout
    losses are independent, so rho = 1 is right there; the k-fold losses here
    come from models trained on overlapping data, worth fewer independent
    samples, and AB s.4.1 resamples ceil(rho n) with rho tuned (s.4.2).
    rho="auto" tunes it as ERS does (`tune_rho`: the bootstrap posterior's
    ensemble loss over RHO_GRID) on the pool of the first `rho_tuned_at` trials
    (or, if fewer than 2 of them trained, once 2 have), then draws the
    replicas again with it; until then they use rho = 1. Every target is
    recomputed from the pool each iteration, so the optimizer never mixes the
    two. The rho used is in the search's metrics (`esmbo_rho`).

    The replicas score single models ("auto": the zero-one loss for
    classification); the ensemble, like ERS's, by its weighted vote.

    With an inference `budget` (core.inference_budget) the replicas choose
    among the models that fit on their own; if their winners do not fit
    together, the heaviest that do are kept (`InferenceBudget.affordable`) and
    every replica chooses again among those.
    """

    def __init__(
        self,
        y: np.ndarray,
        fold_ids: np.ndarray,
        n_replicas: int = 10,
        loss: str = "auto",
        seed: int = 0,
        task: str = "regression",
        rho: float | str = 1.0,
        rho_tuned_at: int = 10,
        n_posterior_samples: int = 1000,
        budget: InferenceBudget | None = None,
    ) -> None:
        if int(n_replicas) != n_replicas or n_replicas < 1:
            raise ValueError(
                f"n_replicas must be a positive integer, got {n_replicas!r}"
            )
        if rho != "auto" and (
            isinstance(rho, bool)
            or not isinstance(rho, int | float)
            or not 0 < rho <= 1
        ):
            raise ValueError(f"rho must be in (0, 1] or 'auto', got {rho!r}")
        self.scorer = PoolScorer(y, fold_ids, loss, task, auto_classification="error")
        self.n_replicas = int(n_replicas)
        self.rho_setting = rho
        self.rho_tuned_at = int(rho_tuned_at)
        self.n_posterior_samples = int(n_posterior_samples)
        self.budget = budget if budget is not None else InferenceBudget()
        self._seed = seed
        self._draw_replicas(1.0 if rho == "auto" else float(rho))
        self.start()

    def _draw_replicas(self, rho: float) -> None:
        self.rho = rho
        n = len(self.scorer.target)
        size = math.ceil(rho * n)
        rng = np.random.default_rng(self._seed)
        # Row j: how often each validation sample appears in S'_j, over its size.
        self.replica_weights = np.array(
            [
                np.bincount(rng.integers(0, n, size=size), minlength=n) / size
                for _ in range(self.n_replicas)
            ]
        )
        # (n, N) and contiguous: the update multiplies every model's losses by it.
        self._replica_columns = np.ascontiguousarray(self.replica_weights.T)

    def _tune_rho(self, pool: Pool) -> None:
        """rho as ERS tunes it, on the pool so far (AB s.4.2; under an
        inference budget, on the models that fit), and replicas drawn with it."""
        ok = np.flatnonzero(pool.ok & self.budget.fits(pool, []))
        if ok.size < 2:  # nothing to weigh yet: rho = 1 until there is
            return
        self._rho_tuned = True
        losses = self.scorer.sample_losses(pool)[ok]
        tuned = tune_rho(
            lambda L, rng, rho: bootstrap_posterior(
                L, self.n_posterior_samples, rng, rho=rho
            ),
            losses,
            lambda weights: self.scorer.ensemble_cv_loss(
                pool, {int(i): w for i, w in zip(ok, weights, strict=True) if w > 0}
            ),
            np.random.default_rng(self._seed),
        )
        self._draw_replicas(float(tuned.value))

    def start(self) -> None:
        self.budget.skipped = 0
        self._winners: list[list[int]] = []
        self._rho_tuned = False
        if self.rho_setting == "auto":
            self._draw_replicas(1.0)

    def begin(self, iteration: int, pool: Pool) -> ReplicaContext:
        # The pool's size, not the iteration: a parallel search proposes
        # iterations past the trials that have ended.
        if (
            self.rho_setting == "auto"
            and not self._rho_tuned
            and len(pool) >= self.rho_tuned_at
        ):
            self._tune_rho(pool)
        replica = iteration % len(self.replica_weights)
        return ReplicaContext(
            iteration,
            replica,
            self.scorer.fold_weights,
            replica_weights=self.replica_weights[replica],
        )

    def targets(
        self,
        context: ReplicaContext,
        pool: Pool,
        candidates: slice,
        single_losses: Sequence[float],
    ) -> np.ndarray:
        return self.scorer.sample_losses(pool)[candidates] @ context.replica_weights

    def update(
        self,
        context: IterationContext,
        pool: Pool,
        targets: np.ndarray,
        single_losses: Sequence[float],
    ) -> Update:
        candidates = np.flatnonzero(pool.ok & self.budget.fits(pool, []))
        self._winners = self._replica_winners(pool, candidates)
        if self.budget.active and self._winners:
            kept = self.budget.affordable(pool, self.weights())
            if len(kept) < len(self.weights()):
                # Among models that fit together, any winners fit together.
                self._winners = self._replica_winners(pool, np.array(kept))
        if not self._winners:
            return Update("none", math.nan)
        if self.budget.active:
            self.budget.count_refused(single_losses, list(self.weights()))
        return Update("select", self.scorer.ensemble_cv_loss(pool, self.weights()))

    def _replica_winners(self, pool: Pool, candidates: np.ndarray) -> list[list[int]]:
        """Each replica's lowest-risk models among `candidates` (pool indices)."""
        if candidates.size == 0:
            return []
        risks = self.scorer.sample_losses(pool)[candidates] @ self._replica_columns
        # Exact ties (e.g. the same model trained twice) share the replica's vote.
        return [
            candidates[np.flatnonzero(column == column.min())].tolist()
            for column in risks.T
        ]

    def members(self) -> list[int]:
        return [winners[0] for winners in self._winners]

    def search_metrics(self) -> dict[str, float]:
        return {"esmbo_rho": self.rho, **self.budget.metrics()}

    def weights(self) -> dict[int, float] | None:
        if not self._winners:
            return None
        weights: dict[int, float] = {}
        for winners in self._winners:
            for index in winners:
                weights[index] = weights.get(index, 0.0) + 1.0 / (
                    len(winners) * len(self._winners)
                )
        return dict(sorted(weights.items()))


def check_rho(path: str, value: Any, tasks: tuple[str, ...]) -> None:
    """`esmbo.rho`: auto, or the share of the samples a replica draws."""
    if value == "auto":
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= 1
    ):
        raise InvalidInput(
            f"{path}={value!r} is not 'auto' or a number in (0, 1] (the share of "
            "the n validation samples each bootstrap replica draws)"
        )


def check_loss_or_ensemble(path: str, value: Any, tasks: tuple[str, ...]) -> None:
    """`esmbo.loss`, which `esmbo:<variant>` sets when the variant is no ensemble."""
    try:
        check_loss(path, value, tasks)
    except InvalidInput as error:
        raise InvalidInput(
            f"{error} (esmbo:<variant> is a loss or an ensemble: "
            f"{list(ESMBO_ENSEMBLES)})"
        ) from None


@dataclass(frozen=True)
class EsmboSettings(SearchSettings):
    """`esmbo`: the search's block, with its replicas and its final ensemble."""

    n_replicas: int = setting(count(1, "the number of bootstrap replicas"))
    rho: float | str = setting(check_rho)
    ensemble: str = setting(one_of(ESMBO_ENSEMBLES))
    posterior: str = setting(one_of(AB_WEIGHTINGS))
    n_samples: int = setting(count(1, "the number of posterior samples"))
    loss: str = setting(check_loss_or_ensemble)
    weighting: str = setting(one_of(WEIGHTINGS))
