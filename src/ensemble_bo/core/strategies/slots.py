"""The round-robin ensemble of slots that SEGO and SEGOR share (SEGO Alg. 1, SEGOR s.3)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.strategies.base import IterationContext, PoolScorer, Update

SIZINGS = ("fixed", "growing", "dynamic")


class SlotEnsemble:
    """An ensemble refilled one slot per iteration, round robin.

    At iteration i the model at index j = i mod |E| is taken out; the optimizer
    is told f(gamma | E, j) = L(E[j] <- h) for every model h of the pool, it
    proposes the next configuration and it is trained. Then the ensemble is
    updated (SEGOR s.3.2), after the BO step so sizing never changes the
    optimizer's targets:

    - fixed (F): m slots, empty at first; slot j gets the pool's argmin of
      L(E[j] <- h);
    - growing (BG): E starts empty; replace at j or add the argmin of
      L(E + h), whichever gives the lower loss;
    - dynamic (BD): as BG, or remove the model at j, whichever is lowest.

    Models may appear several times (selection with replacement). `scorer`
    holds the objective L and the data it is computed on. With an inference
    `budget` (core.inference_budget), a replacement or an addition is chosen
    among the models the ensemble can take within its limits, and the
    optimizer is told what the ensemble would become: a model it cannot take
    leaves slot j's model in place (or the slot empty), so its target is
    max(L(E[j] <- h), L(E)), no better than the ensemble as it is. Proposals
    then turn to the configurations the budget allows (a constraint that EI
    otherwise cannot see); the update still chooses by every model's own
    L(E[j] <- h).
    """

    def __init__(
        self,
        scorer: PoolScorer,
        ensemble_size: int = 12,
        sizing: str = "fixed",
        budget: InferenceBudget | None = None,
    ) -> None:
        if int(ensemble_size) != ensemble_size or ensemble_size < 1:
            raise ValueError(
                f"ensemble size must be a positive integer, got {ensemble_size!r}"
            )
        if sizing not in SIZINGS:
            raise ValueError(f"sizing={sizing!r} is not one of {list(SIZINGS)}")
        self.scorer = scorer
        self.ensemble_size = int(ensemble_size)
        self.sizing = sizing
        self.budget = InferenceBudget() if budget is None else budget
        self.start()

    def start(self) -> None:
        self.budget.skipped = 0
        # Fixed: m slots, None while empty. Growing/dynamic: the members, any length.
        self._slots: list[int | None] = (
            [None] * self.ensemble_size if self.sizing == "fixed" else []
        )

    def begin(self, iteration: int, pool: Pool) -> IterationContext:
        slots = self._slots
        slot = iteration % len(slots) if slots else -1
        others = tuple(
            index for k, index in enumerate(slots) if k != slot and index is not None
        )
        return IterationContext(iteration, slot, self.scorer.fold_weights, others)

    def targets(
        self,
        context: IterationContext,
        pool: Pool,
        candidates: slice,
        single_losses: Sequence[float],
    ) -> np.ndarray:
        """f(gamma | E, j) = L(E[j] <- h) for each candidate h; under a
        budget, L(E) at least for a model the ensemble cannot take."""
        losses = self._replacement_losses(context, pool, candidates)
        if not self.budget.active:
            return losses
        slot, others = context.slot, list(context.members)
        current = self._slots[slot] if 0 <= slot < len(self._slots) else None
        if current is not None:  # L(E[j] <- its own model) = L(E)
            held = self._replacement_losses(context, pool, slice(current, current + 1))
        elif others:  # an empty slot: the ensemble is the others
            first = others[0]
            held = self.scorer.losses_with_each(
                pool, others[1:], slice(first, first + 1), context.cv_weights
            )
        else:
            return losses
        fits = self.budget.fits(pool, others)[candidates]
        # np.maximum keeps a failed trial's NaN: it stays out of the GP.
        return np.where(fits, losses, np.maximum(losses, held[0]))

    def _replacement_losses(
        self, context: IterationContext, pool: Pool, candidates: slice
    ) -> np.ndarray:
        """L(E[j] <- h) for each candidate h."""
        # Summing m rows afresh costs O(m n) and cannot drift like a running update.
        return self.scorer.losses_with_each(
            pool, context.members, candidates, context.cv_weights
        )

    def members(self) -> list[int]:
        return [index for index in self._slots if index is not None]

    def weights(self) -> dict[int, float] | None:
        return None

    def search_metrics(self) -> dict[str, float]:
        return self.budget.metrics()

    def update(
        self,
        context: IterationContext,
        pool: Pool,
        targets: np.ndarray,
        single_losses: Sequence[float],
    ) -> Update:
        """Apply the sizing method's best action to the ensemble; `targets` are
        the optimizer's targets of every model of the pool (under a budget
        they cap what a model the ensemble cannot take would give, so the
        choice is made on L(E[j] <- h) itself)."""
        slots, others = self._slots, list(context.members)
        slot = None if context.slot < 0 else context.slot
        if not np.isfinite(targets).any():  # every model so far failed
            return Update("none", math.nan)
        if self.budget.active:
            targets = self._replacement_losses(context, pool, slice(None))
        options = []
        best_replacement = self.budget.best(targets, self.budget.fits(pool, others))
        if best_replacement is not None:
            options.append(("replace", float(targets[best_replacement])))
        if self.sizing != "fixed" and slots:
            grow_losses = self.scorer.losses_with_each(
                pool, slots, slice(None), self.scorer.fold_weights
            )
            best_addition = self.budget.best(
                grow_losses, self.budget.fits(pool, self.members())
            )
            if best_addition is not None:
                options.append(("grow", float(grow_losses[best_addition])))
            if self.sizing == "dynamic" and others:
                options.append(("shrink", self._loss(pool, others)))
        if not options:  # no model fits the inference budget: the slot stays
            members = self.members()
            return Update("none", self._loss(pool, members) if members else math.nan)
        # min keeps the first of equal losses: replace, then grow, then shrink.
        action, loss = min(options, key=lambda option: option[1])
        if action == "replace" and slot is not None:
            slots[slot] = best_replacement
        elif action == "replace":
            slots.append(best_replacement)  # the first member of a growing ensemble
        elif action == "grow":
            slots.append(best_addition)
        else:
            del slots[slot]
        return Update(action, loss)

    def _loss(self, pool: Pool, members: list[int]) -> float:
        """CV loss of the ensemble `members` (repeats weigh by their count)."""
        counts = {i: float(members.count(i)) for i in sorted(set(members))}
        return self.scorer.ensemble_cv_loss(pool, counts)
