"""Running a multi-fidelity schedule: brackets of rungs, for any strategy.

core.fidelity is the schedules' arithmetic (successive halving, Hyperband,
BOHB's model budget); this is their execution inside a search, as SMAC3 makes
successive halving an intensifier: `BracketDriver` runs the schedule's
brackets one after another on a SearchLoop (core.search), each rung one batch
of the loop's runner, every evaluation a journaled TrialRequest of a share of
the folds or rows (or of fewer iterations). Each rung is ranked by the
strategy's own target for the bracket's iteration (`rung_targets`), and only
configurations that reach full fidelity join the pool.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ensemble_bo.core.evaluation import merge_fold_results
from ensemble_bo.core.fidelity import (
    BOHB_RANDOM_FRACTION,
    BracketRun,
    Resource,
    bohb_model_budget,
    full_fidelity_equivalents,
)
from ensemble_bo.core.optimizer import Suggestion
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import RungEvaluation
from ensemble_bo.core.search import InitialTrialsFailed, SearchLoop
from ensemble_bo.core.settings import FidelitySettings
from ensemble_bo.core.strategies.base import IterationContext, Strategy
from ensemble_bo.core.time_budget import deadline_for
from ensemble_bo.core.trials import TrialRequest, TrialResult

# Full-fidelity equivalents a multi-fidelity bracket may exceed its budget by
# (floating-point sums of rung costs).
BUDGET_SLACK = 1e-9


def _filled(result: TrialResult, rows: np.ndarray) -> TrialResult:
    """A trial evaluated on some folds, its other rows made finite (they are
    weighed 0): prediction 0 (class 0) and uniform class probabilities."""
    if not result.ok:
        return result
    predictions = np.where(rows, result.oof_predictions, 0.0)
    probabilities = result.oof_probabilities
    if probabilities is not None:
        uniform = 1.0 / probabilities.shape[1]
        probabilities = np.where(rows[:, None], probabilities, uniform)
    return replace(result, oof_predictions=predictions, oof_probabilities=probabilities)


def rung_targets(
    strategy: Strategy,
    context: IterationContext,
    pool: Pool,
    candidates: Sequence[tuple[Suggestion, TrialResult]],
    rows: np.ndarray,
) -> np.ndarray:
    """Each candidate's target for the iteration `context` begins, (c,),
    estimated on `rows` ((n,) bool: the folds every candidate has evaluated).

    The multi-fidelity promotion rule: the strategy's own target, so for SEGOR
    and SEGO the loss of the current ensemble with the candidate in the slot,
    for ESMBO the risk on the iteration's bootstrap replica, and the
    candidate's own loss for the single best (and ERS's random search); NaN
    for a failed candidate. The candidates join a copy of the pool, and every
    weight over the rows is renormalized on `rows` alone
    (IterationContext.on_rows).
    """
    scratch = copy.deepcopy(pool)
    for suggestion, result in candidates:
        scratch.add(suggestion.config, suggestion.encoded, _filled(result, rows))
    on_rows = context.on_rows(rows)
    scorer = strategy.scorer
    outputs = scorer.outputs(scratch)
    singles = [
        scorer.cv_loss(outputs[i], on_rows.cv_weights) if scratch.ok[i] else math.nan
        for i in range(len(pool), len(scratch))
    ]
    targets = strategy.targets(on_rows, scratch, slice(len(pool), None), singles)
    return np.where(scratch.ok[len(pool) :], targets, math.nan)


class BracketDriver:
    """A search's multi-fidelity schedule, run on its loop (Li et al. 2017's
    brackets; for BOHB, Falkner et al. 2018's Algorithm 2).

    `budget` counts full-fidelity equivalents: brackets run while a whole one
    fits in what is left. The first bracket always runs and its trials are
    never cut by the time budget (its top rung brings the search's first
    model); a bracket the time budget ends is left unfinished.
    """

    def __init__(self, loop: SearchLoop, fidelity: FidelitySettings) -> None:
        self.loop = loop
        self.fidelity = fidelity
        self.pool = loop.pool
        # Random proposals (successive halving, Hyperband, BOHB's share) have
        # their own stream, apart from the optimizer's three.
        self.rng = np.random.default_rng(
            np.random.SeedSequence(loop.optimizer.seed).spawn(4)[3]
        )
        # Every rung evaluation is a runner trial with its own ticket, so that a
        # journal replays a resumed search's evaluations one by one.
        self.tickets = itertools.count()
        # BOHB's observations below max_resource, by resource (the pool holds
        # those at max_resource): its model may be fitted on them.
        self.lower: dict[Resource, list[tuple[Suggestion, TrialResult]]] = {}

    def run(self) -> None:
        """Brackets of the fidelity schedule, one after another, while the
        budget of full-fidelity equivalents allows a whole one."""
        loop, fidelity = self.loop, self.fidelity
        schedule = fidelity.schedule()
        loop.fidelity_spent = 0.0
        # Logged with the search's metrics: what the schedule spent, in
        # full-fidelity equivalents, on how many configurations and brackets.
        metrics = loop.result.search_metrics
        metrics.update(
            fidelity_full_equivalents=0.0,
            fidelity_whole_brackets_equivalents=0.0,
            fidelity_configurations=0.0,
            fidelity_brackets=0.0,
        )
        for k in itertools.count():
            bracket = schedule.bracket(k)
            # Folds evaluated stay evaluated; a larger share of rows is a new fit.
            cost = full_fidelity_equivalents(
                bracket, fidelity.max_resource, reuse=fidelity.resource == "folds"
            )
            # The slack: a budget copied from a logged spend (a rerun of a
            # time-budgeted search) meets sums added in another order.
            if k and loop.fidelity_spent + cost > loop.budget + BUDGET_SLACK:
                return
            if k and loop.clock.spent():
                loop.result.stopped_by = "time_budget"
                return
            context = loop.retarget(len(self.pool))
            suggestions = self._bracket_candidates(bracket[0].n_configs, context)
            metrics["fidelity_brackets"] += 1
            metrics["fidelity_configurations"] += len(suggestions)
            run = BracketRun(bracket, auto_promote=False)
            if not self._run_bracket(k, run, suggestions, context):
                loop.result.stopped_by = "time_budget"
                return
            # What repeats this search's pool without its time budget: a budget
            # of the whole brackets' spend (rerun.time_budget_note).
            metrics["fidelity_whole_brackets_equivalents"] = loop.fidelity_spent

    def _run_bracket(
        self,
        k: int,
        run: BracketRun,
        suggestions: list[Suggestion],
        context: IterationContext,
    ) -> bool:
        """Bracket k's rungs and promotions, each evaluation recorded, then its
        top rung's configurations into the pool; False when the time budget
        ended it first (the rest would be cut at once, one after another)."""
        loop, fidelity = self.loop, self.fidelity
        results: dict[int, TrialResult] = {}
        while not run.done:
            if k and loop.clock.spent():
                return False
            # A rung trains as one batch: side by side on parallel workers.
            rung = run.rung
            jobs: dict[int, tuple[int, Resource]] = {}
            requests: dict[int, TrialRequest] = {}
            for index, resource in run.next_jobs():
                request, cost = self._rung_request(
                    next(self.tickets),
                    suggestions[index].config,
                    resource,
                    run.resources_of(index),
                    first_bracket=k == 0,
                )
                loop.runner.submit(request)
                jobs[request.ticket], requests[request.ticket] = (
                    (index, resource),
                    request,
                )
                loop.fidelity_spent += cost
            loop.result.search_metrics["fidelity_full_equivalents"] = (
                loop.fidelity_spent
            )
            finished = dict(loop.runner.next_finished() for _ in jobs)
            for ticket, (index, resource) in jobs.items():
                earlier, part = results.get(index), finished[ticket]
                results[index] = (
                    merge_fold_results(earlier, part)
                    if fidelity.resource == "folds" and earlier is not None
                    else part
                )
                run.tell(index, resource, 0.0 if results[index].ok else None)
                if fidelity.scheduler == "bohb" and resource < fidelity.max_resource:
                    self.lower.setdefault(resource, []).append(
                        (suggestions[index], results[index])
                    )
            objectives: dict[int, float] = {}
            promoted: list[int] = []
            if run.awaiting_promotion:
                members = run.members(rung)
                values = rung_targets(
                    loop.strategy,
                    context,
                    self.pool,
                    [(suggestions[i], results[i]) for i in members],
                    self._rung_rows(run.bracket[rung].resource),
                )
                objectives = dict(zip(members, values.tolist(), strict=True))
                promoted = run.promote_with(objectives)
            # The top rung's configurations join the pool, in this order.
            joins = {i: len(self.pool) + n for n, i in enumerate(run.finished())}
            loop.result.rung_evaluations.extend(
                RungEvaluation(
                    k,
                    rung,
                    float(resource),
                    config=dict(requests[ticket].config),
                    status="ok" if finished[ticket].ok else "failed",
                    objective=objectives.get(index, math.nan),
                    promoted=index in promoted,
                    trial=joins.get(index, -1),
                    fit_seconds=finished[ticket].fit_seconds,
                    error=finished[ticket].error or "",
                )
                for ticket, (index, resource) in jobs.items()
            )
            self._stop_if_only_failures()
        # Failures can end a bracket below its top rung: then nothing joins.
        for index in run.finished():
            loop.finish(suggestions[index], results[index])
        return True

    def _stop_if_only_failures(self) -> None:
        """`max_initial_failures` counted over rung evaluations: failures below
        full fidelity never reach the pool, so a search whose every
        configuration fails would spend its whole budget on first rungs."""
        limit = self.loop.max_initial_failures
        evaluations = self.loop.result.rung_evaluations
        if (
            limit is not None
            and len(evaluations) >= limit
            and all(evaluation.status == "failed" for evaluation in evaluations)
        ):
            raise InitialTrialsFailed

    @property
    def _folds(self) -> np.ndarray:
        return np.unique(self.loop.strategy.scorer.fold_ids)

    def _rung_rows(self, resource: Resource) -> np.ndarray:
        """(n,) bool: the rows a rung at `resource` has predicted (on folds,
        those of its first folds; every row on rows and iterations)."""
        fold_ids = self.loop.strategy.scorer.fold_ids
        if self.fidelity.resource == "folds":
            return np.isin(fold_ids, self._folds[:resource])
        return np.ones(len(fold_ids), dtype=bool)

    def _rung_request(
        self,
        ticket: int,
        config: Mapping[str, Any],
        resource: Resource,
        earlier_rungs: list[Resource],
        first_bracket: bool,
    ) -> tuple[TrialRequest, float]:
        """What a configuration trains at a rung, and its cost in full-fidelity
        equivalents: on folds, the first `resource` folds less those it has; on
        rows, a new fit of every fold on that share of its training rows; on
        iterations, a new fit with `resource` trees, stages or epochs (the
        configuration itself at max_resource, so the pool holds the space's).
        The first bracket's requests are never cut by the time budget."""
        fidelity = self.fidelity
        deadline = deadline_for(self.loop.clock, first_bracket)
        if fidelity.resource == "rows":
            request = TrialRequest(
                ticket, config, train_fraction=float(resource), deadline=deadline
            )
            return request, float(resource)
        if fidelity.resource == "iterations":
            if resource < fidelity.max_resource:
                config = {**config, fidelity.iteration_setting: int(resource)}
            request = TrialRequest(ticket, config, deadline=deadline)
            return request, resource / fidelity.max_resource
        folds = self._folds
        done = earlier_rungs[-1] if earlier_rungs else 0
        new = tuple(int(fold) for fold in folds[done:resource])
        request = TrialRequest(ticket, config, folds=new, deadline=deadline)
        return request, len(new) / len(folds)

    def _bracket_candidates(
        self, n: int, context: IterationContext
    ) -> list[Suggestion]:
        """A bracket's first rung: random configurations, or for BOHB the
        proposals of the method's optimizer fitted on the largest resource with
        enough observations (Falkner et al. 2018, Algorithm 2), a share of them
        still random. The optimizer proposes through a copy (`told_only`) told
        the pool at max_resource, or below it `lower[resource]` with the
        strategy's targets for this iteration on the rows they predicted
        (`rung_targets`): its own design and random start-up are not
        spent on BOHB's model proposals."""
        loop, fidelity, rng = self.loop, self.fidelity, self.rng
        optimizer = loop.optimizer
        space = optimizer.space

        def random_suggestion() -> Suggestion:
            config = space.decode(rng.random(space.dim))
            return Suggestion(config, space.encode(config))

        if fidelity.scheduler != "bohb":
            return [random_suggestion() for _ in range(n)]
        observed: dict[Resource, int] = {
            resource: [result.ok for _, result in trials].count(True)
            for resource, trials in self.lower.items()
        }
        observed[fidelity.max_resource] = int(self.pool.ok.sum())
        budget = bohb_model_budget(observed, space.dim)
        if budget is None:
            return [random_suggestion() for _ in range(n)]
        if budget == fidelity.max_resource:  # the pool, targeted for this iteration
            model = optimizer.told_only(
                optimizer.X, optimizer.values, optimizer.seconds
            )
        else:
            trials = self.lower[budget]
            targets = rung_targets(
                loop.strategy, context, self.pool, trials, self._rung_rows(budget)
            )
            model = optimizer.told_only(
                np.array([suggestion.encoded for suggestion, _ in trials]),
                targets,
                np.array([result.seconds_taken for _, result in trials]),
            )
        proposals = model.ask_batch(n)
        return [
            random_suggestion() if rng.random() < BOHB_RANDOM_FRACTION else proposal
            for proposal in proposals
        ]
