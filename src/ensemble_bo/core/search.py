"""A search: a strategy's objective minimized by an optimizer, trials run by a runner.

`Search(strategy, optimizer, evaluate).run(budget, ...)` is the one loop every
method runs (core.methods builds its parts): the strategy (core.strategies)
says what the optimizer's targets are and keeps the ensemble, the optimizer
(core.optimizer) proposes configurations, the runner (core.runners) trains
them, and the pool (core.pool) keeps every trial's out-of-fold predictions.
`SearchLoop` drives it one trial at a time, in sync (results taken in
proposal order) or async mode; a multi-fidelity schedule is driven by
core.brackets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ensemble_bo.core.inference_budget import ensemble_predict_seconds
from ensemble_bo.core.optimizer import Optimizer, Suggestion
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import (
    AllTrialsFailed,
    EnsembleSearchResult,
    IterationRecord,
    SearchInterrupted,
)
from ensemble_bo.core.runners import Evaluator, SerialRunner, TrialRunner
from ensemble_bo.core.settings import MODES, FidelitySettings
from ensemble_bo.core.strategies.base import IterationContext, Strategy
from ensemble_bo.core.time_budget import TimeBudget, deadline_for, is_seconds
from ensemble_bo.core.trials import TrialRequest, TrialResult

# A search whose first trials all fail stops after this many (the
# `max_initial_failures` parameter, conf/base/parameters.yml).
MAX_INITIAL_FAILURES = 10

Callback = Callable[[IterationRecord], None]


def check_max_initial_failures(value: object) -> int | None:
    """`max_initial_failures` as an int >= 1, or None (never stop early)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(
            f"max_initial_failures must be an integer >= 1 or null, got {value!r} "
            "(after that many failed trials with no success yet, the search stops)"
        )
    return int(value)


def members_trial_seconds(pool: Pool, members: Iterable[int]) -> float:
    """The seconds the trials of an ensemble's distinct `members` took, in
    all: what its final fit repeats (core.time_budget keeps it back)."""
    distinct = sorted(set(members))
    return float(np.nansum(np.asarray(pool.fit_seconds)[distinct])) if distinct else 0.0


class InitialTrialsFailed(Exception):
    """The first trials all failed; Search.run raises AllTrialsFailed."""


class Search:
    """One search over a pool: `strategy` (what is minimized, which ensemble is
    kept), `optimizer` (a fresh one: every point it is told must be a model of
    this search's pool) and `evaluate`, which trains a request's configuration
    when the search runs its trials one at a time. `final_members(pool,
    members)`: the distinct members the final model will hold, where a stage
    after the search chooses them again (a bagged weighting), for the time
    kept back for its fit; None: the strategy's members."""

    def __init__(
        self,
        strategy: Strategy,
        optimizer: Optimizer,
        evaluate: Evaluator | None,
        final_members: Callable[[Pool, list[int]], list[int]] | None = None,
    ) -> None:
        if len(optimizer.X):
            # The targets are recomputed from the pool's predictions each iteration.
            raise ValueError(
                f"a search needs a fresh optimizer; this one was told "
                f"{len(optimizer.X)} points already"
            )
        self.strategy = strategy
        self.optimizer = optimizer
        self.evaluate = evaluate
        self.final_members = final_members

    def run(
        self,
        budget: float,
        callbacks: Iterable[Callback] = (),
        model_name: str = "",
        max_initial_failures: int | None = MAX_INITIAL_FAILURES,
        time_budget: TimeBudget | None = None,
        runner: TrialRunner | None = None,
        mode: str = "sync",
        fidelity: FidelitySettings | None = None,
    ) -> EnsembleSearchResult:
        """Train `budget` configurations; `model_name` names the model searched.

        With a `time_budget` (whose deadline each trial's request carries, so
        that whatever runs it cuts it at its end), the search also stops
        between trials once that is spent, whichever comes first; the first
        trial always starts, and is never cut by it. The result's
        `search_seconds` and `stopped_by` say how long it took and why it ended.

        runner: where the trials train (core.runners; None: one at a time
        through `evaluate`). With `runner.n_workers` = q > 1, both modes keep
        up to q trials training and give a free worker the next proposal.
        Mode "sync" proposes trial t from trials 0..t-q-1, the q after them
        as fantasies, and takes results in proposal order, so a seed and q
        give one result (SearchLoop.run_sync); "async" proposes from every
        trial that has ended, the others still training as fantasies, so
        results depend on which ends first. Fantasies are the optimizer's
        batch strategy's (on the targets of the iteration proposed for), and
        each finished trial updates the ensemble as in the serial loop.

        Each callback gets every iteration's record as it ends. Any exception
        (Ctrl-C included) is re-raised as SearchInterrupted holding the pool.
        When the first `max_initial_failures` trials all fail (None: never stop
        early), or the budget ends without one success, AllTrialsFailed (a
        SearchInterrupted) is raised instead of returning, listing the distinct
        errors, so that no refit is ever tried on an empty ensemble.

        fidelity: a multi-fidelity schedule (core.fidelity; None or scheduler
        none: every trial in full), run by core.brackets: `budget` then counts
        full-fidelity equivalents and only configurations that reach full
        fidelity join the pool.
        """
        multi_fidelity = fidelity is not None and fidelity.enabled
        if (
            isinstance(budget, bool)
            or not isinstance(budget, int | np.integer)
            or budget < 1
        ) and not (multi_fidelity and is_seconds(budget)):
            raise ValueError(
                "budget must be a positive integer (with a fidelity schedule, a "
                f"positive number of full-fidelity equivalents), got {budget!r}"
            )
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not one of {list(MODES)}")
        max_initial_failures = check_max_initial_failures(max_initial_failures)
        scorer = self.strategy.scorer
        result = EnsembleSearchResult(
            Pool(len(scorer.y), labels=scorer.labels),
            [],
            np.empty(0),
            target=scorer.target,
            model_name=model_name,
            objective=scorer.objective.name,
        )
        clock = TimeBudget() if time_budget is None else time_budget
        if not clock.started:  # a caller may start it earlier, to count its set-up
            clock.start()
        loop = SearchLoop(
            self.strategy,
            self.optimizer,
            SerialRunner(self.evaluate) if runner is None else runner,
            budget,
            list(callbacks),
            result,
            max_initial_failures,
            clock,
            self.final_members,
        )
        try:
            if multi_fidelity:
                # Imported here: brackets drives this module's loop.
                from ensemble_bo.core.brackets import BracketDriver  # noqa: PLC0415

                BracketDriver(loop, fidelity).run()
            elif mode == "async":
                loop.run_async()
            else:
                loop.run_sync()
        except InitialTrialsFailed:
            loop.finalize()
            raise AllTrialsFailed(result, int(budget), max_initial_failures) from None
        except BaseException as error:  # also Ctrl-C: nothing trained is lost
            loop.finalize()
            raise SearchInterrupted(result, int(budget), error) from error
        loop.finalize()
        if not result.pool.ok.any():
            raise AllTrialsFailed(result, int(budget), max_initial_failures)
        return result


class SearchLoop:
    """One run of a search: proposals handed to a runner, trials taken as they end.

    Proposing iteration i begins it in the strategy (its context: slot,
    replica) and tells the optimizer i's targets of the pool, then asks with
    the trials still running as fantasies; taking a finished trial as
    iteration t begins t anew unless nothing has changed since its proposal
    (always so when serial), then adds the trial to the pool, tells the
    optimizer its target and updates the ensemble.
    """

    def __init__(
        self,
        strategy: Strategy,
        optimizer: Optimizer,
        runner: TrialRunner,
        budget: float,
        callbacks: list[Callback],
        result: EnsembleSearchResult,
        max_initial_failures: int | None,
        clock: TimeBudget,
        final_members: Callable[[Pool, list[int]], list[int]] | None = None,
    ) -> None:
        self.strategy = strategy
        self.final_members = final_members
        self.optimizer = optimizer
        self.runner = runner
        self.budget = budget
        self.callbacks = callbacks
        self.result = result
        self.pool = result.pool
        self.single_losses: list[float] = []
        self.max_initial_failures = max_initial_failures
        self.clock = clock
        # The context and targets the optimizer was last told, for one iteration;
        # None once a trial has ended since (the pool, and so the targets, changed).
        self._targeted: tuple[IterationContext, np.ndarray] | None = None
        # full-fidelity equivalents a multi-fidelity search has spent; NaN: none
        self.fidelity_spent = math.nan
        strategy.scorer.forget()
        strategy.start()

    def may_propose(self, running: int) -> bool:
        """Whether the trial after the pool and `running` ones may start."""
        started = len(self.pool) + running
        if started >= self.budget:
            return False
        if started and self.clock.spent():
            self.result.stopped_by = "time_budget"
            return False
        return True

    def retarget(self, iteration: int) -> IterationContext:
        """Begin `iteration` in the strategy and tell the optimizer its targets
        of every model of the pool; its context."""
        context = self.strategy.begin(iteration, self.pool)
        # NaN rows (failed trials) stay NaN: the optimizer counts them as the
        # worst target told (core.optimizer.failed_as_worst).
        targets = self.strategy.targets(
            context, self.pool, slice(None), self.single_losses
        )
        self.optimizer.retarget(targets)
        self._targeted = (context, np.asarray(targets, dtype=float))
        return context

    def request(self, ticket: int, suggestion: Suggestion) -> TrialRequest:
        """The request of a full evaluation; the search's first is never cut by
        its time budget."""
        first = ticket == 0 and not len(self.pool)
        return TrialRequest(
            ticket, suggestion.config, deadline=deadline_for(self.clock, first)
        )

    def _propose(self, iteration: int, running: list[Suggestion]) -> Suggestion:
        self.retarget(iteration)
        return self.optimizer.ask([each.encoded for each in running])

    def _take_recorded(self) -> None:
        """Trials an async search's journal holds, as if they had just ended."""
        space = self.optimizer.space
        recorded = self.runner.recorded_trials()
        for request, trial_result in recorded:
            config = dict(request.config)
            self.finish(Suggestion(config, space.encode(config)), trial_result)
        self.optimizer.skip_proposed([dict(request.config) for request, _ in recorded])

    def run_sync(self) -> None:
        """Trial t is proposed from the results of trials 0..t-lag-1, with the
        lag of them after those as fantasies, and results are taken in ticket
        order: what t sees does not depend on which trial ended first, so a
        seed and n_workers give one result. lag = n_workers (0 when serial):
        one fantasy more than async has, so that a worker that frees up gets
        the next proposal without waiting for the slowest trial running, as
        a batch of n_workers waited for would."""
        n_workers = self.runner.n_workers
        lag = n_workers if n_workers > 1 else 0
        waiting: dict[int, Suggestion] = {}  # proposed, not taken yet
        ended: dict[int, TrialResult] = {}  # of those, the ones that ended
        ticket, proposing = 0, True
        while True:
            # Taking trial k before k + lag is proposed would change what k + lag sees.
            taken = len(self.pool)
            while taken in ended and (taken < ticket - lag or not proposing):
                self.finish(waiting.pop(taken), ended.pop(taken))
                taken += 1
            if proposing and len(waiting) - len(ended) < n_workers:
                if taken >= ticket - lag:
                    if self.may_propose(len(waiting)):
                        suggestion = self._propose(ticket, list(waiting.values()))
                        self.runner.submit(self.request(ticket, suggestion))
                        waiting[ticket] = suggestion
                        ticket += 1
                    else:
                        proposing = False
                    continue
            if not waiting:
                return
            done, trial_result = self.runner.next_finished()
            ended[done] = trial_result

    def run_async(self) -> None:
        self._take_recorded()
        running: dict[int, Suggestion] = {}
        ticket = 0
        while True:
            while len(running) < self.runner.n_workers and self.may_propose(
                len(running)
            ):
                suggestion = self._propose(
                    len(self.pool) + len(running), list(running.values())
                )
                self.runner.submit(self.request(ticket, suggestion))
                running[ticket] = suggestion
                ticket += 1
            if not running:
                return
            done, trial_result = self.runner.next_finished()
            self.finish(running.pop(done), trial_result)

    def finish(self, suggestion: Suggestion, trial_result: TrialResult) -> None:
        """The trial joins the pool as the next iteration: the optimizer is told
        its target, the strategy updates its ensemble, callbacks hear of it."""
        strategy, pool, single_losses = self.strategy, self.pool, self.single_losses
        iteration = len(pool)
        targeted = self._targeted
        if targeted is None or targeted[0].iteration != iteration:
            self.retarget(iteration)
        context, targets = self._targeted
        self._targeted = None
        trial = pool.add(suggestion.config, suggestion.encoded, trial_result)
        scorer = strategy.scorer
        new_single = (
            scorer.cv_loss(scorer.outputs(pool)[trial], scorer.fold_weights)
            if trial_result.ok
            else math.nan
        )
        new_target = None
        if trial_result.ok:
            joined = slice(trial, trial + 1)
            new_target = float(strategy.targets(context, pool, joined, [new_single])[0])
        self.optimizer.tell(suggestion, new_target, trial_result.seconds_taken)
        single_losses.append(new_single)
        told = np.append(targets, math.nan if new_target is None else new_target)
        update = strategy.update(context, pool, told, single_losses)
        members = strategy.members()
        if self.final_members is not None and self.clock.seconds is not None:
            members = self.final_members(pool, members)
        self.clock.reserve_final_fit(members_trial_seconds(pool, members))
        record = IterationRecord(
            iteration=iteration,
            slot=context.slot,
            trial=trial,
            status="ok" if trial_result.ok else "failed",
            action=update.action,
            ensemble_loss=update.ensemble_loss,
            best_single_loss=float(np.nanmin(single_losses))
            if np.isfinite(single_losses).any()
            else math.nan,
            ensemble_size=len(members),
            acquisition_value=suggestion.acquisition_value,
            fit_seconds=trial_result.fit_seconds,
            fidelity_spent=self.fidelity_spent,
            ensemble_predict_seconds=ensemble_predict_seconds(pool, members),
        )
        self.result.history.append(record)
        for callback in self.callbacks:
            callback(record)
        if (
            self.max_initial_failures is not None
            and len(pool) >= self.max_initial_failures
            and not pool.ok.any()
        ):
            raise InitialTrialsFailed

    def finalize(self) -> None:
        """The result's ensemble, timings and metrics, as the search left them."""
        result, strategy = self.result, self.strategy
        # What this search took: the budget also counts replayed trials at the
        # seconds they took when trained, an earlier run's time.
        result.search_seconds = self.clock.elapsed - self.clock.charged
        # A multi-fidelity search has written what it spent there as it went.
        result.search_metrics = {**result.search_metrics, **strategy.search_metrics()}
        if self.optimizer.weighs_seconds:
            # a rerun cannot repeat its proposals (ensemble_bo.rerun says so)
            result.search_metrics["proposals_weighed_seconds"] = 1.0
        if self.clock.seconds is not None and self.clock.final_fit_factor:
            # beside refit_seconds, how well the time kept back was estimated
            result.search_metrics["final_fit_seconds_kept"] = self.clock.reserve
        result.members = strategy.members()
        result.weights = strategy.weights()
        # An interruption between training a model and scoring it leaves one unscored.
        missing = len(result.pool) - len(self.single_losses)
        result.single_losses = np.array(self.single_losses + [math.nan] * missing)
