"""Search strategies: one SMBO loop, different objectives.

Every strategy asks an optimizer for a configuration, gets its out-of-fold
predictions from an evaluator (it never trains a model itself), records it
in the pool and updates its ensemble.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ensemble_bo.core.agnostic_bayes import (
    Tuned,
    argmin_weights,
    bayesian_bootstrap_posterior,
    bootstrap_posterior,
    mean_ensemble_cv_loss,
    softmin_weights,
    student_t_posterior,
    tune_alpha,
    tune_parameter,
    tune_rho,
)
from ensemble_bo.core.evaluation import merge_fold_results
from ensemble_bo.core.fidelity import (
    BOHB_RANDOM_FRACTION,
    BracketRun,
    FidelitySettings,
    Resource,
    bohb_model_budget,
    full_fidelity_equivalents,
)
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
    regression_loss,
)
from ensemble_bo.core.optimizer import Optimizer, Suggestion
from ensemble_bo.core.parallel import MODES, SerialRunner, TrialRunner
from ensemble_bo.core.pool import Pool, TrialResult
from ensemble_bo.core.results import (
    AllTrialsFailed,
    EnsembleSearchResult,
    IterationRecord,
    RungEvaluation,
    SearchInterrupted,
)
from ensemble_bo.core.selection import (
    bfgs_weights,
    greedy_selection_with_replacement,
    greedy_vote_selection,
    plurality_vote_cv_errors,
    weighted_vote_cv_error,
)
from ensemble_bo.core.time_budget import TimeBudget, is_seconds

# Ensemble sizing of SEGOR s.3.2, by name and the paper's shorthand.
SIZE_METHODS = {
    "fixed": "fixed",
    "f": "fixed",
    "growing": "growing",
    "best-growing": "growing",
    "bg": "growing",
    "g": "growing",
    "dynamic": "dynamic",
    "best-dynamic": "dynamic",
    "bd": "dynamic",
    "d": "dynamic",
}


# The grammar of a SEGOR variant (SEGOR s.4's shorthand), for messages.
SEGOR_VARIANT_GRAMMAR = (
    "<sizing>-<loss>: sizing f (fixed, F), g (best-growing, BG) or d (best-dynamic, "
    "BD); loss m (mse), h (huber) or t (tukey); e.g. f-m, g-h, d-t"
)


def size_method(name: str) -> str:
    """'fixed', 'growing' or 'dynamic' for a sizing name or shorthand (F, BG, BD)."""
    try:
        return SIZE_METHODS[str(name).lower()]
    except KeyError:
        raise ValueError(
            f"unknown ensemble size method {name!r}; choose one of {sorted(SIZE_METHODS)}"
        ) from None


def segor_variant(variant: str) -> tuple[str, str]:
    """(sizing, loss) of a SEGOR variant in the paper's shorthand (s.4).

    'f-m' is fixed size with MSE, 'g-h' best-growing with Huber, 'd-t'
    best-dynamic with Tukey; long names work too ('dynamic-huber'). A bad
    variant is refused naming every bad part and showing the grammar.
    """
    sizing, _, loss = str(variant).rpartition("-")
    if not sizing:
        raise ValueError(
            f"SEGOR variant {variant!r} is not <sizing>-<loss>; a variant is "
            f"{SEGOR_VARIANT_GRAMMAR}"
        )
    problems = []
    if str(sizing).lower() not in SIZE_METHODS:
        problems.append(f"unknown ensemble size method {sizing!r}")
    try:
        regression_loss(loss)
    except ValueError:
        problems.append(f"unknown regression loss {loss!r}")
    if problems:
        raise ValueError(
            f"SEGOR variant {variant!r}: {' and '.join(problems)}; a variant is "
            f"{SEGOR_VARIANT_GRAMMAR}"
        )
    return size_method(sizing), loss


# A search whose first trials all fail stops after this many (the
# `max_initial_failures` parameter, conf/base/parameters.yml).
MAX_INITIAL_FAILURES = 10


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


# Full-fidelity equivalents a multi-fidelity bracket may exceed its budget by
# (floating-point sums of rung costs).
BUDGET_SLACK = 1e-9


class _InitialTrialsFailed(Exception):
    """Internal: the first trials all failed; `run` raises AllTrialsFailed."""


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


class PoolSearch:
    """The SMBO loop every strategy shares; subclasses say what the GP minimizes.

    `loss` "auto" is mse for regression and, for classification,
    AUTO_CLASSIFICATION_OBJECTIVE: SEGO's squared margin for the ensemble
    searches, the error rate for the searches that score single models.

    Each iteration: the strategy sets the GP targets of every model in the pool
    (`_targets`), the optimizer proposes a configuration, the evaluator trains
    it, the pool keeps its out-of-fold predictions, the optimizer is told its
    target, and the strategy updates its ensemble (`_update`).
    """

    AUTO_CLASSIFICATION_OBJECTIVE = "squared_margin"

    def __init__(
        self,
        optimizer: Optimizer,
        evaluate: Callable[[dict[str, Any]], TrialResult],
        y: np.ndarray,
        fold_ids: np.ndarray,
        loss: str = "auto",
        task: str = "regression",
    ):
        if len(optimizer.X):
            # Every told point must be a model of this run's pool: the targets
            # are recomputed from the pool's predictions each iteration.
            raise ValueError(
                f"{type(self).__name__} needs a fresh optimizer; this one was told "
                f"{len(optimizer.X)} points already"
            )
        self.optimizer = optimizer
        self.evaluate = evaluate
        self.objective = objective(task, loss, auto=self.AUTO_CLASSIFICATION_OBJECTIVE)
        self.per_sample_loss = self.objective.per_sample_loss
        self.target = np.asarray(y)
        self.labels = self.target if task == "classification" else None
        # What the mean of the members' outputs is compared with (Objective.target):
        # y for regression, 1 for correctness, one-hot labels for probabilities.
        self.y = self.objective.target(self.target)
        self.fold_ids = np.asarray(fold_ids)
        self.weights = fold_weights(fold_ids)
        self._forget_sample_losses()

    def run(
        self,
        budget: float,
        callbacks: Iterable[Callable[[IterationRecord], None]] = (),
        model_name: str = "",
        max_initial_failures: int | None = MAX_INITIAL_FAILURES,
        time_budget: TimeBudget | None = None,
        runner: TrialRunner | None = None,
        mode: str = "sync",
        fidelity: FidelitySettings | None = None,
    ) -> EnsembleSearchResult:
        """Train `budget` configurations; `model_name` names the model searched.

        With a `time_budget` (shared with the evaluator, which cuts a trial at
        its end), the search also stops between trials once that is spent,
        whichever comes first; the first trial always starts. The result's
        `search_seconds` and `stopped_by` say how long it took and why it ended.

        runner: where the trials train (core.parallel; None: one at a time
        through `evaluate`). With `runner.n_workers` = q > 1, mode "sync"
        proposes q configurations at once, trains them together and takes their
        results in proposal order, so a seed and q give one result; "async"
        keeps q trials running and proposes the next as soon as one ends, so
        results depend on which ends first. Either way each proposal sees the
        configurations still training as fantasies (kriging believer, on the
        targets of the iteration it is proposed for), and each finished trial
        updates the ensemble as in the serial loop.

        Each callback gets every iteration's record as it ends. Any exception
        (Ctrl-C included) is re-raised as SearchInterrupted holding the pool.
        When the first `max_initial_failures` trials all fail (None: never stop
        early), or the budget ends without one success, AllTrialsFailed (a
        SearchInterrupted) is raised instead of returning, listing the distinct
        errors, so that no refit is ever tried on an empty ensemble.

        fidelity: a multi-fidelity schedule (core.fidelity; None or scheduler
        none: every trial in full). Each bracket's configurations race on
        growing sets of folds, shares of rows or numbers of iterations, ranked
        at each rung by this strategy's target for the iteration
        (`rung_objectives`); only those that reach full fidelity join the pool. `budget` then counts
        full-fidelity equivalents; each rung is one batch of the runner's
        (sync, whatever `mode`), one journaled trial per evaluation.
        """
        if (
            isinstance(budget, bool)
            or not isinstance(budget, int | np.integer)
            or budget < 1
        ) and not (fidelity is not None and fidelity.enabled and is_seconds(budget)):
            raise ValueError(
                "budget must be a positive integer (with a fidelity schedule, a "
                f"positive number of full-fidelity equivalents), got {budget!r}"
            )
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not one of {list(MODES)}")
        max_initial_failures = check_max_initial_failures(max_initial_failures)
        result = EnsembleSearchResult(
            Pool(len(self.y), labels=self.labels),
            [],
            np.empty(0),
            target=self.target,
            model_name=model_name,
            objective=self.objective.name,
        )
        single_losses: list[float] = []
        clock = TimeBudget() if time_budget is None else time_budget
        if not clock.started:  # a caller may start it earlier, to count its set-up
            clock.start()
        loop = _Loop(
            self,
            SerialRunner(self.evaluate) if runner is None else runner,
            budget,
            list(callbacks),
            result,
            single_losses,
            max_initial_failures,
            clock,
        )
        try:
            if fidelity is not None and fidelity.enabled:
                loop.run_brackets(fidelity)
            elif mode == "async":
                loop.run_async()
            else:
                loop.run_sync()
        except _InitialTrialsFailed:
            self._finalize(result, single_losses, clock)
            raise AllTrialsFailed(result, int(budget), max_initial_failures) from None
        except BaseException as error:  # also Ctrl-C: nothing trained is lost
            self._finalize(result, single_losses, clock)
            raise SearchInterrupted(result, int(budget), error) from error
        self._finalize(result, single_losses, clock)
        if not result.pool.ok.any():
            raise AllTrialsFailed(result, int(budget), max_initial_failures)
        return result

    def _finalize(
        self,
        result: EnsembleSearchResult,
        single_losses: list[float],
        clock: TimeBudget,
    ) -> None:
        result.search_seconds = clock.elapsed
        # A multi-fidelity search has written what it spent there as it went.
        result.search_metrics = {**result.search_metrics, **self._search_metrics()}
        result.members = self._members()
        result.weights = self._weights()
        # An interruption between training a model and scoring it leaves one unscored.
        missing = len(result.pool) - len(single_losses)
        result.single_losses = np.array(single_losses + [math.nan] * missing)

    def _label(self, iteration: int, pool: Pool, single_losses: list[float]) -> int:
        """Prepare `iteration` and tell the optimizer its targets; its slot."""
        slot = self._begin_iteration(iteration, pool)
        # NaN rows (failed trials) stay NaN and out of the GP.
        self.optimizer.retarget(self._targets(pool, slice(None), single_losses))
        return slot

    def _outputs(self, pool: Pool) -> np.ndarray:
        """What each model of the pool contributes to the objective: (t, n) or (t, n, K)."""
        return pool.member_outputs(self.objective.outputs)

    def _cv_loss(self, prediction: np.ndarray) -> float:
        """k-fold CV loss of one combined output, (n,) or (n, K)."""
        return float(self.per_sample_loss(prediction - self.y) @ self.weights)

    def _losses_with_each(
        self, pool: Pool, members: Sequence[int], candidates: slice
    ) -> np.ndarray:
        """CV loss of the ensemble `members` (pool indices, repeats allowed) plus
        each candidate (a slice of the pool: a view, never a copy); NaN for
        failed candidates."""
        if self.objective.vote and len(members):
            return self._vote_losses_with_each(pool, members, candidates)
        outputs = self._outputs(pool)
        member_sum = outputs[list(members)].sum(axis=0)
        if self.objective.outputs == PROBABILITIES:  # the Brier score
            return brier_of_mean_ensembles(
                member_sum,
                len(members),
                outputs[candidates],
                pool.member_outputs(PROBABILITY_SQUARE_NORM)[candidates],
                pool.member_outputs(TRUE_CLASS_PROBABILITY)[candidates],
                self.labels.astype(int),
                self.weights,
            )
        if self.objective.outputs == TRUE_CLASS_PROBABILITY:  # the log-loss
            return log_loss_of_mean_ensembles(
                member_sum, len(members), outputs[candidates], self.weights
            )
        return cv_loss_of_mean_ensembles(
            member_sum,
            len(members),
            outputs[candidates],
            self.y,
            self.per_sample_loss,
            self.weights,
        )

    def _vote_losses_with_each(
        self, pool: Pool, members: Sequence[int], candidates: slice
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
            self.weights,
        )
        return losses

    def _forget_sample_losses(self) -> None:
        self._sample_loss_rows = np.empty((0, len(self.target)))
        self._sample_losses_done = 0

    def _sample_losses(self, pool: Pool) -> np.ndarray:
        """Each model's own per-sample losses (t, n), NaN rows for failed trials.

        Computed once per model (single-model risks under any weighting are then
        one matrix product), in a buffer that doubles like the pool's.
        """
        done, total = self._sample_losses_done, len(pool)
        if done < total:
            if total > len(self._sample_loss_rows):
                grown = np.full((max(64, 2 * total), len(self.target)), math.nan)
                if done:
                    grown[:done] = self._sample_loss_rows[:done]
                self._sample_loss_rows = grown
            self._sample_loss_rows[done:total] = self.per_sample_loss(
                self._outputs(pool)[done:total] - self.y
            )
            self._sample_losses_done = total
        return self._sample_loss_rows[:total]

    def _ensemble_cv_loss(self, pool: Pool, weights: dict[int, float]) -> float:
        """CV loss of the ensemble weighing pool model i by weights[i] (any scale)."""
        return ensemble_cv_loss(
            pool, self.objective, self.target, self.fold_ids, weights, self.weights
        )

    def rung_objectives(
        self,
        pool: Pool,
        candidates: Sequence[tuple[Suggestion, TrialResult]],
        rows: np.ndarray,
    ) -> np.ndarray:
        """Each candidate's target for the iteration being proposed, (c,),
        estimated on `rows` ((n,) bool: the folds every candidate has evaluated).

        The multi-fidelity promotion rule (core.fidelity): the ensemble
        objective for SEGOR and SEGO, the loss of the current ensemble with the
        candidate in the slot, the risk on the iteration's bootstrap replica for
        ESMBO, and the candidate's own loss for the single best (and ERS's
        random search); NaN for a failed candidate. The candidates join a copy of the
        pool, and the CV weights are those of the evaluated folds alone.
        """
        scratch = copy.deepcopy(pool)
        for suggestion, result in candidates:
            scratch.add(suggestion.config, suggestion.encoded, _filled(result, rows))
        full_weights = self.weights
        weights = np.where(rows, full_weights, 0.0)
        self.weights = weights / weights.sum()
        try:
            outputs = self._outputs(scratch)
            singles = [
                self._cv_loss(outputs[i]) if scratch.ok[i] else math.nan
                for i in range(len(pool), len(scratch))
            ]
            targets = self._targets(scratch, slice(len(pool), None), singles)
            return np.where(scratch.ok[len(pool) :], targets, math.nan)
        finally:
            self.weights = full_weights
            self._forget_sample_losses()

    # What a strategy defines.
    def _start(self) -> None:
        """Reset the ensemble before a run."""

    def _begin_iteration(self, iteration: int, pool: Pool) -> int:
        """Prepare the iteration; the slot it works on, -1 if none."""
        return -1

    def _targets(
        self, pool: Pool, candidates: slice, single_losses: Sequence[float]
    ) -> np.ndarray:
        """GP targets of the pool's models `candidates` (a slice) whose own CV
        losses are `single_losses`."""
        raise NotImplementedError

    def _update(self, pool: Pool, single_losses: list[float]) -> tuple[str, float]:
        """Update the ensemble after a trial; (action, ensemble CV loss)."""
        raise NotImplementedError

    def _members(self) -> list[int]:
        raise NotImplementedError

    def _weights(self) -> dict[int, float] | None:
        """Explicit member weights; None: the members' counts."""
        return None

    def _search_metrics(self) -> dict[str, float]:
        """Quantities of the search worth logging with the run's metrics."""
        return {}


class _Loop:
    """One run of a PoolSearch: proposals handed to a runner, trials taken as they end.

    Proposing iteration i labels the optimizer with i's targets (the strategy's
    slot or replica) and asks with the trials still running as fantasies;
    taking a finished trial as iteration t labels it again with t's targets
    unless nothing has changed since its proposal (always so when serial), then
    adds it to the pool, tells the optimizer and updates the ensemble.
    """

    def __init__(
        self,
        search: PoolSearch,
        runner: TrialRunner,
        budget: float,
        callbacks: list[Callable[[IterationRecord], None]],
        result: EnsembleSearchResult,
        single_losses: list[float],
        max_initial_failures: int | None,
        clock: TimeBudget,
    ) -> None:
        self.search = search
        self.runner = runner
        self.budget = budget
        self.callbacks = callbacks
        self.result = result
        self.pool = result.pool
        self.single_losses = single_losses
        self.max_initial_failures = max_initial_failures
        self.clock = clock
        # (iteration, slot) the optimizer's targets were last set for; None once
        # a trial has ended since (the pool, and so the targets, changed)
        self._labelled: tuple[int, int] | None = None
        # full-fidelity equivalents a multi-fidelity search has spent; NaN: none
        self._fidelity_spent = math.nan
        search._forget_sample_losses()
        search._start()

    def _may_propose(self, running: int) -> bool:
        """Whether the trial after the pool and `running` ones may start."""
        started = len(self.pool) + running
        if started >= self.budget:
            return False
        if started and self.clock.spent():
            self.result.stopped_by = "time_budget"
            return False
        return True

    def _propose(self, iteration: int, running: list[Suggestion]) -> Suggestion:
        slot = self.search._label(iteration, self.pool, self.single_losses)
        self._labelled = (iteration, slot)
        return self.search.optimizer.ask([each.encoded for each in running])

    def _take_recorded(self) -> None:
        """Trials an async search's journal holds, as if they had just ended."""
        optimizer = self.search.optimizer
        recorded = self.runner.recorded_trials()
        for config, trial_result in recorded:
            self._finish(
                Suggestion(config, optimizer.space.encode(config)), trial_result
            )
        optimizer.skip_proposed([config for config, _ in recorded])

    def run_sync(self) -> None:
        while self._may_propose(0):
            batch: list[Suggestion] = []
            while len(batch) < self.runner.n_workers and self._may_propose(len(batch)):
                suggestion = self._propose(len(self.pool) + len(batch), batch)
                self.runner.submit(len(self.pool) + len(batch), suggestion.config)
                batch.append(suggestion)
            first = len(self.pool)
            finished = dict(self.runner.next_finished() for _ in batch)
            for offset, suggestion in enumerate(batch):
                self._finish(suggestion, finished[first + offset])

    def run_async(self) -> None:
        self._take_recorded()
        running: dict[int, Suggestion] = {}
        ticket = 0
        while True:
            while len(running) < self.runner.n_workers and self._may_propose(
                len(running)
            ):
                suggestion = self._propose(
                    len(self.pool) + len(running), list(running.values())
                )
                self.runner.submit(ticket, suggestion.config)
                running[ticket] = suggestion
                ticket += 1
            if not running:
                return
            done, trial_result = self.runner.next_finished()
            self._finish(running.pop(done), trial_result)

    def run_brackets(self, fidelity: FidelitySettings) -> None:
        """Brackets of the fidelity schedule, one after another, while the
        budget of full-fidelity equivalents allows a whole one."""
        search, pool = self.search, self.pool
        schedule = fidelity.schedule()
        # Random proposals (successive halving, Hyperband, BOHB's share) have
        # their own stream, apart from the optimizer's three.
        rng = np.random.default_rng(
            np.random.SeedSequence(search.optimizer.seed).spawn(4)[3]
        )
        self._fidelity_spent = 0.0
        # Logged with the search's metrics: what the schedule spent, in
        # full-fidelity equivalents, on how many configurations and brackets.
        metrics = self.result.search_metrics
        metrics.update(
            fidelity_full_equivalents=0.0,
            fidelity_whole_brackets_equivalents=0.0,
            fidelity_configurations=0.0,
            fidelity_brackets=0.0,
        )
        # Every rung evaluation is a runner trial with its own ticket, so that a
        # journal replays a resumed search's evaluations one by one.
        tickets = itertools.count()
        # BOHB's observations below max_resource, by resource (the pool holds
        # those at max_resource): its model may be fitted on them.
        lower: dict[Resource, list[tuple[Suggestion, TrialResult]]] = {}
        for k in itertools.count():
            bracket = schedule.bracket(k)
            # Folds evaluated stay evaluated; a larger share of rows is a new fit.
            cost = full_fidelity_equivalents(
                bracket, fidelity.max_resource, reuse=fidelity.resource == "folds"
            )
            # The slack: a budget copied from a logged spend (a rerun of a
            # time-budgeted search) meets sums added in another order.
            if k and self._fidelity_spent + cost > self.budget + BUDGET_SLACK:
                return
            if k and self.clock.spent():
                self.result.stopped_by = "time_budget"
                return
            iteration = len(pool)
            slot = search._label(iteration, pool, self.single_losses)
            self._labelled = (iteration, slot)
            suggestions = self._bracket_candidates(
                bracket[0].n_configs, fidelity, rng, lower
            )
            metrics["fidelity_brackets"] += 1
            metrics["fidelity_configurations"] += len(suggestions)
            # The first bracket is never cut by the time budget: it brings the
            # search's first full-fidelity model, which the refit needs.
            with self.clock.not_cutting() if k == 0 else contextlib.nullcontext():
                ended = self._run_bracket(
                    k,
                    BracketRun(bracket, auto_promote=False),
                    suggestions,
                    fidelity,
                    tickets,
                    lower,
                )
            if not ended:
                self.result.stopped_by = "time_budget"
                return
            # What repeats this search's pool without its time budget: a budget
            # of the whole brackets' spend (rerun.time_budget_note).
            metrics["fidelity_whole_brackets_equivalents"] = self._fidelity_spent

    def _run_bracket(
        self,
        k: int,
        run: BracketRun,
        suggestions: list[Suggestion],
        fidelity: FidelitySettings,
        tickets: Iterator[int],
        lower: dict[Resource, list[tuple[Suggestion, TrialResult]]],
    ) -> bool:
        """Bracket k's rungs and promotions, each evaluation recorded, then its
        top rung's configurations into the pool; False when the time budget
        ended it first (the rest would be cut at once, one after another)."""
        search, pool = self.search, self.pool
        results: dict[int, TrialResult] = {}
        while not run.done:
            if k and self.clock.spent():
                return False
            # A rung trains as one batch: side by side on parallel workers.
            rung = run.rung
            jobs: dict[int, tuple[int, Resource]] = {}
            trained: dict[int, dict[str, Any]] = {}
            for index, resource in run.next_jobs():
                config, scope, cost = self._rung_job(
                    fidelity,
                    suggestions[index].config,
                    resource,
                    run.resources_of(index),
                )
                ticket = next(tickets)
                self.runner.submit(ticket, config, scope)
                jobs[ticket], trained[ticket] = (index, resource), config
                self._fidelity_spent += cost
            self.result.search_metrics["fidelity_full_equivalents"] = (
                self._fidelity_spent
            )
            finished = dict(self.runner.next_finished() for _ in jobs)
            for ticket, (index, resource) in jobs.items():
                earlier, part = results.get(index), finished[ticket]
                results[index] = (
                    merge_fold_results(earlier, part)
                    if fidelity.resource == "folds" and earlier is not None
                    else part
                )
                run.tell(index, resource, 0.0 if results[index].ok else None)
                if fidelity.scheduler == "bohb" and resource < fidelity.max_resource:
                    lower.setdefault(resource, []).append(
                        (suggestions[index], results[index])
                    )
            objectives: dict[int, float] = {}
            promoted: list[int] = []
            if run.awaiting_promotion:
                members = run.members(rung)
                values = search.rung_objectives(
                    pool,
                    [(suggestions[i], results[i]) for i in members],
                    self._rung_rows(fidelity, run.bracket[rung].resource),
                )
                objectives = dict(zip(members, values.tolist(), strict=True))
                promoted = run.promote_with(objectives)
            # The top rung's configurations join the pool, in this order.
            joins = {i: len(pool) + n for n, i in enumerate(run.finished())}
            self.result.rung_evaluations.extend(
                RungEvaluation(
                    k,
                    rung,
                    float(resource),
                    config=dict(trained[ticket]),
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
            self._finish(suggestions[index], results[index])
        return True

    def _stop_if_only_failures(self) -> None:
        """`max_initial_failures` counted over rung evaluations: failures below
        full fidelity never reach the pool, so a search whose every
        configuration fails would spend its whole budget on first rungs."""
        evaluations = self.result.rung_evaluations
        if (
            self.max_initial_failures is not None
            and len(evaluations) >= self.max_initial_failures
            and all(evaluation.status == "failed" for evaluation in evaluations)
        ):
            raise _InitialTrialsFailed

    @property
    def _folds(self) -> np.ndarray:
        return np.unique(self.search.fold_ids)

    def _rung_rows(self, fidelity: FidelitySettings, resource: Resource) -> np.ndarray:
        """(n,) bool: the rows a rung at `resource` has predicted (on folds,
        those of its first folds; every row on rows and iterations)."""
        if fidelity.resource == "folds":
            return np.isin(self.search.fold_ids, self._folds[:resource])
        return np.ones(len(self.search.fold_ids), dtype=bool)

    def _rung_job(
        self,
        fidelity: FidelitySettings,
        config: dict[str, Any],
        resource: Resource,
        earlier_rungs: list[Resource],
    ) -> tuple[dict[str, Any], dict[str, Any], float]:
        """What a configuration trains at a rung, (configuration, the
        evaluator's `folds` or `train_fraction`), and its cost in full-fidelity
        equivalents: on folds, the first `resource` folds less those it has; on
        rows, a new fit of every fold on that share of its training rows; on
        iterations, a new fit with `resource` trees, stages or epochs (the
        configuration itself at max_resource, so the pool holds the space's)."""
        if fidelity.resource == "rows":
            return config, {"train_fraction": float(resource)}, float(resource)
        if fidelity.resource == "iterations":
            cost = resource / fidelity.max_resource
            if resource < fidelity.max_resource:
                config = {**config, fidelity.iteration_setting: int(resource)}
            return config, {}, cost
        folds = self._folds
        done = earlier_rungs[-1] if earlier_rungs else 0
        new = [int(fold) for fold in folds[done:resource]]
        return config, {"folds": new}, len(new) / len(folds)

    def _bracket_candidates(
        self,
        n: int,
        fidelity: FidelitySettings,
        rng: np.random.Generator,
        lower: Mapping[Resource, list[tuple[Suggestion, TrialResult]]],
    ) -> list[Suggestion]:
        """A bracket's first rung: random configurations, or for BOHB the
        proposals of the method's optimizer fitted on the largest resource with
        enough observations (Falkner et al. 2018, Algorithm 2), a share of them
        still random. The optimizer proposes through a copy (`told_only`) told
        the pool at max_resource, or below it `lower[resource]` with the
        method's targets for this iteration on the rows they predicted
        (`rung_objectives`): its own design and random start-up are not
        spent on BOHB's model proposals."""
        search = self.search
        space = search.optimizer.space

        def random_suggestion() -> Suggestion:
            config = space.decode(rng.random(space.dim))
            return Suggestion(config, space.encode(config))

        if fidelity.scheduler != "bohb":
            return [random_suggestion() for _ in range(n)]
        observed: dict[Resource, int] = {
            resource: [result.ok for _, result in trials].count(True)
            for resource, trials in lower.items()
        }
        observed[fidelity.max_resource] = int(self.pool.ok.sum())
        budget = bohb_model_budget(observed, space.dim)
        if budget is None:
            return [random_suggestion() for _ in range(n)]
        optimizer = search.optimizer
        if budget == fidelity.max_resource:  # the pool, labelled for this iteration
            model = optimizer.told_only(optimizer.X, optimizer.values)
        else:
            trials = lower[budget]
            targets = search.rung_objectives(
                self.pool, trials, self._rung_rows(fidelity, budget)
            )
            model = optimizer.told_only(
                np.array([suggestion.encoded for suggestion, _ in trials]), targets
            )
        proposals = model.ask_batch(n)
        return [
            random_suggestion() if rng.random() < BOHB_RANDOM_FRACTION else proposal
            for proposal in proposals
        ]

    def _finish(self, suggestion: Suggestion, trial_result: TrialResult) -> None:
        search, pool, single_losses = self.search, self.pool, self.single_losses
        iteration = len(pool)
        labelled = self._labelled
        if labelled is not None and labelled[0] == iteration:
            slot = labelled[1]
        else:
            slot = search._label(iteration, pool, single_losses)
        self._labelled = None
        trial = pool.add(suggestion.config, suggestion.encoded, trial_result)
        new_single = (
            search._cv_loss(search._outputs(pool)[trial])
            if trial_result.ok
            else math.nan
        )
        search.optimizer.tell(
            suggestion,
            float(search._targets(pool, slice(trial, trial + 1), [new_single])[0])
            if trial_result.ok
            else None,
        )
        single_losses.append(new_single)

        action, ensemble_loss = search._update(pool, single_losses)
        record = IterationRecord(
            iteration=iteration,
            slot=slot,
            trial=trial,
            status="ok" if trial_result.ok else "failed",
            action=action,
            ensemble_loss=ensemble_loss,
            best_single_loss=float(np.nanmin(single_losses))
            if np.isfinite(single_losses).any()
            else math.nan,
            ensemble_size=len(search._members()),
            acquisition_value=suggestion.acquisition_value,
            fit_seconds=trial_result.fit_seconds,
            fidelity_spent=self._fidelity_spent,
        )
        self.result.history.append(record)
        for callback in self.callbacks:
            callback(record)
        if (
            self.max_initial_failures is not None
            and len(pool) >= self.max_initial_failures
            and not pool.ok.any()
        ):
            raise _InitialTrialsFailed


class SingleBestSearch(PoolSearch):
    """SMBO for one model (ESMBO Alg. 1, `s-m`): the GP models each model's own CV loss.

    With a RandomSearch optimizer this is random search (RS); the ensemble is
    the single best model of the pool.
    """

    AUTO_CLASSIFICATION_OBJECTIVE = "error"

    def _start(self) -> None:
        self._best: int | None = None

    def _targets(
        self, pool: Pool, candidates: slice, single_losses: Sequence[float]
    ) -> np.ndarray:
        return np.asarray(single_losses, dtype=float)

    def _update(self, pool: Pool, single_losses: list[float]) -> tuple[str, float]:
        if not np.isfinite(single_losses).any():
            return "none", math.nan
        self._best = int(np.nanargmin(single_losses))
        return "select", float(single_losses[self._best])

    def _members(self) -> list[int]:
        return [] if self._best is None else [self._best]


# ESMBO's final ensemble (`esmbo.ensemble`): the whole pool weighed by the agnostic
# Bayes posterior (a selection stage, core.methods), or the replicas' winners.
ESMBO_ENSEMBLES = ("posterior", "replica_winners")


class EsmboSearch(PoolSearch):
    """ESMBO (Lacoste et al. 2014, s.4, Alg. 2): agnostic Bayes ensemble with SMBO.

    N bootstrap resamples S'_1..S'_N of the validation samples are drawn once.
    Iteration i runs SMBO for replica v = i mod N: the GP is fit on the risks
    R_{S'_v}(h) of every model in the pool (the cached per-sample losses make
    each new model update all N histories at once). The ensemble holds each
    replica's argmin; a model is weighted by the share of replicas it wins,
    a replica with tied minima splitting its share evenly (the method registry
    can instead weigh the whole pool by the agnostic Bayes posterior after the
    search: `esmbo.ensemble`).

    Each replica resamples ceil(rho n) of the n samples. The paper's holdout
    losses are independent, so rho = 1 is right there; the k-fold losses here
    come from models trained on overlapping data, worth fewer independent
    samples, and AB s.4.1 resamples ceil(rho n) with rho tuned (s.4.2).
    rho="auto" tunes it as ERS does (`tune_rho`: the bootstrap posterior's
    ensemble loss over RHO_GRID) on the pool of the first `rho_tuned_at` trials
    (or, if fewer than 2 of them trained, once 2 have), then draws the
    replicas again with it; until then they use rho = 1. Every target is
    recomputed from the pool each iteration, so the GP never mixes the two.
    The rho used is in the result's `search_metrics` (`esmbo_rho`).
    """

    # The replicas score single models (the zero-one loss either way); the
    # ensemble, like ERS's, by its weighted vote.
    AUTO_CLASSIFICATION_OBJECTIVE = "error"

    def __init__(
        self,
        optimizer: Optimizer,
        evaluate: Callable[[dict[str, Any]], TrialResult],
        y: np.ndarray,
        fold_ids: np.ndarray,
        n_replicas: int = 10,
        loss: str = "auto",
        seed: int = 0,
        task: str = "regression",
        rho: float | str = 1.0,
        rho_tuned_at: int = 10,
        n_posterior_samples: int = 1000,
    ):
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
        super().__init__(optimizer, evaluate, y, fold_ids, loss, task)
        self.n_replicas = int(n_replicas)
        self.rho_setting = rho
        self.rho_tuned_at = int(rho_tuned_at)
        self.n_posterior_samples = int(n_posterior_samples)
        self._seed = seed
        self._draw_replicas(1.0 if rho == "auto" else float(rho))

    def _draw_replicas(self, rho: float) -> None:
        self.rho = rho
        n = len(self.target)
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
        """rho as ERS tunes it, on the pool so far (AB s.4.2), and replicas drawn with it."""
        ok = np.flatnonzero(pool.ok)
        if ok.size < 2:  # nothing to weigh yet: rho = 1 until there is
            return
        self._rho_tuned = True
        losses = self._sample_losses(pool)[ok]
        tuned = tune_rho(
            lambda L, rng, rho: bootstrap_posterior(
                L, self.n_posterior_samples, rng, rho=rho
            ),
            losses,
            lambda weights: self._ensemble_cv_loss(
                pool, {int(i): w for i, w in zip(ok, weights, strict=True) if w > 0}
            ),
            np.random.default_rng(self._seed),
        )
        self._draw_replicas(float(tuned.value))

    def _start(self) -> None:
        self._winners: list[list[int]] = []
        self._rho_tuned = False
        if self.rho_setting == "auto":
            self._draw_replicas(1.0)

    def _begin_iteration(self, iteration: int, pool: Pool) -> int:
        # The pool's size, not the iteration: a parallel search proposes
        # iterations past the trials that have ended.
        if (
            self.rho_setting == "auto"
            and not self._rho_tuned
            and len(pool) >= self.rho_tuned_at
        ):
            self._tune_rho(pool)
        self._replica = iteration % len(self.replica_weights)
        return self._replica

    def _targets(
        self, pool: Pool, candidates: slice, single_losses: Sequence[float]
    ) -> np.ndarray:
        return (
            self._sample_losses(pool)[candidates] @ self.replica_weights[self._replica]
        )

    def rung_objectives(
        self,
        pool: Pool,
        candidates: Sequence[tuple[Suggestion, TrialResult]],
        rows: np.ndarray,
    ) -> np.ndarray:
        """Each candidate's risk on the replica being proposed for, its
        bootstrap weights renormalized on `rows` (uniform there should the
        replica have drawn none of them), (c,)."""
        full_weights = self.replica_weights
        on_rows = np.where(rows, full_weights, 0.0)
        sums = on_rows.sum(axis=1, keepdims=True)
        on_rows = np.where(sums > 0, on_rows, rows)
        self.replica_weights = on_rows / on_rows.sum(axis=1, keepdims=True)
        try:
            return super().rung_objectives(pool, candidates, rows)
        finally:
            self.replica_weights = full_weights

    def _update(self, pool: Pool, single_losses: list[float]) -> tuple[str, float]:
        ok = np.flatnonzero(pool.ok)
        if ok.size == 0:
            return "none", math.nan
        risks = self._sample_losses(pool)[ok] @ self._replica_columns
        # Exact ties (e.g. the same model trained twice) share the replica's vote.
        self._winners = [
            ok[np.flatnonzero(column == column.min())].tolist() for column in risks.T
        ]
        return "select", self._ensemble_cv_loss(pool, self._weights())

    def _members(self) -> list[int]:
        return [winners[0] for winners in self._winners]

    def _search_metrics(self) -> dict[str, float]:
        return {"esmbo_rho": self.rho}

    def _weights(self) -> dict[int, float] | None:
        if not self._winners:
            return None
        weights: dict[int, float] = {}
        for winners in self._winners:
            for index in winners:
                weights[index] = weights.get(index, 0.0) + 1.0 / (
                    len(winners) * len(self._winners)
                )
        return dict(sorted(weights.items()))


class SegorSearch(PoolSearch):
    """SEGOR with the mean combiner (SEGOR s.3, Alg. 1).

    At iteration i the model at index j = i mod |E| is taken out; the GP is fit
    on f(gamma | E, j) = L(E[j] <- h) for every model h of the pool, EI picks
    the next configuration and it is trained. Then the ensemble is updated
    (s.3.2), after the BO step so sizing never changes the GP's targets:

    - fixed (F): m slots, empty at first; slot j gets the pool's argmin of
      L(E[j] <- h);
    - growing (BG): E starts empty; replace at j or add the argmin of
      L(E + h), whichever gives the lower loss;
    - dynamic (BD): as BG, or remove the model at j, whichever is lowest.

    Models may appear several times (selection with replacement).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        evaluate: Callable[[dict[str, Any]], TrialResult],
        y: np.ndarray,
        fold_ids: np.ndarray,
        ensemble_size: int = 12,
        loss: str = "auto",
        sizing: str = "fixed",
        task: str = "regression",
    ):
        if int(ensemble_size) != ensemble_size or ensemble_size < 1:
            raise ValueError(
                f"ensemble size must be a positive integer, got {ensemble_size!r}"
            )
        super().__init__(optimizer, evaluate, y, fold_ids, loss, task)
        self.ensemble_size = int(ensemble_size)
        self.sizing = size_method(sizing)

    def _start(self) -> None:
        # Fixed: m slots, None while empty. Growing/dynamic: the members, any length.
        self._slots: list[int | None] = (
            [None] * self.ensemble_size if self.sizing == "fixed" else []
        )

    def _begin_iteration(self, iteration: int, pool: Pool) -> int:
        slots = self._slots
        self._slot = iteration % len(slots) if slots else None
        self._others = [
            index
            for k, index in enumerate(slots)
            if k != self._slot and index is not None
        ]
        return -1 if self._slot is None else self._slot

    def _targets(
        self, pool: Pool, candidates: slice, single_losses: Sequence[float]
    ) -> np.ndarray:
        """f(gamma | E, j) = L(E[j] <- h) for each candidate h."""
        # Summing m rows afresh costs O(m n) and cannot drift like a running update.
        return self._losses_with_each(pool, self._others, candidates)

    def _members(self) -> list[int]:
        return [index for index in self._slots if index is not None]

    def _update(self, pool: Pool, single_losses: list[float]) -> tuple[str, float]:
        """Apply the sizing method's best action to the ensemble; (action, new loss)."""
        slots, slot, others = self._slots, self._slot, self._others
        replace_losses = self.optimizer.values  # L(E[j] <- h), as told to the GP
        if not np.isfinite(replace_losses).any():  # every model so far failed
            return "none", math.nan
        best_replacement = int(np.nanargmin(replace_losses))
        options = [("replace", float(replace_losses[best_replacement]))]
        if self.sizing != "fixed" and slots:
            grow_losses = self._losses_with_each(pool, slots, slice(None))
            best_addition = int(np.nanargmin(grow_losses))
            options.append(("grow", float(grow_losses[best_addition])))
            if self.sizing == "dynamic" and others:
                counts = {i: float(others.count(i)) for i in sorted(set(others))}
                options.append(("shrink", self._ensemble_cv_loss(pool, counts)))
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
        return action, loss


class SegoSearch(SegorSearch):
    """SEGO (Levesque et al. 2016, Alg. 1): ensemble optimization for classification.

    m fixed slots filled round-robin (slot j = i mod m); the GP models the
    squared-margin loss (eq. 9, multiclass margin of eq. 7) of the ensemble
    with slot j replaced by each model, and the slot gets the pool's argmin.
    The final ensemble votes by (weighted) majority. Any other classification
    objective can take the squared margin's place (`loss`: the vote's error, or
    the log-loss or Brier score of mean probabilities, whose final ensemble
    then averages probabilities). `labels` are class codes.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        evaluate: Callable[[dict[str, Any]], TrialResult],
        labels: np.ndarray,
        fold_ids: np.ndarray,
        ensemble_size: int = 12,
        loss: str = "squared_margin",
    ):
        super().__init__(
            optimizer,
            evaluate,
            labels,
            fold_ids,
            ensemble_size,
            loss,
            sizing="fixed",
            task="classification",
        )


def ensemble_cv_loss(
    pool: Pool,
    chosen: Objective,
    target: np.ndarray,
    fold_ids: np.ndarray,
    weights: Mapping[int, float],
    sample_weights: np.ndarray | None = None,
) -> float:
    """CV loss under `chosen` of the ensemble weighing pool model i by weights[i].

    target: the pool's target (n,), regression values or class codes; weights
    of any scale. A vote objective scores several members by their weighted
    plurality vote, everything else by the weighted mean of their outputs.
    sample_weights: fold_weights(fold_ids), when the caller has them already
    (a search scores many ensembles per iteration on the same folds); the
    vote path derives its own from fold_ids.
    """
    members = list(weights)
    shares = np.array([weights[i] for i in members], dtype=float)
    shares /= shares.sum()
    if chosen.vote and len(members) > 1:
        return weighted_vote_cv_error(pool.predictions[members], target, fold_ids)(
            shares
        )
    combined = np.tensordot(
        shares, pool.member_outputs(chosen.outputs)[members], axes=1
    )
    if sample_weights is None:
        sample_weights = fold_weights(fold_ids)
    return float(
        chosen.per_sample_loss(combined - chosen.target(target)) @ sample_weights
    )


WEIGHTINGS = ("counts", "bfgs")


def _pool_objective(
    source: EnsembleSearchResult, y: np.ndarray, loss: str, auto: str
) -> tuple[Objective, np.ndarray, np.ndarray]:
    """(objective, the pool's outputs for it (t, n) or (t, n, K), what their mean
    is compared to) of a saved pool; for classification, "auto" means `auto`.

    Checks first that the pool was evaluated on `y`, this run's training target.
    """
    if source.target is None or not np.array_equal(source.target, np.asarray(y)):
        raise ValueError(
            "the saved pool was evaluated on other data than this run's training part "
            "(another dataset, seed or data_processing setting): rerun its pipeline "
            "with the same parameters first"
        )
    chosen = objective(source.task, loss, auto=auto)
    return (
        chosen,
        source.pool.member_outputs(chosen.outputs),
        chosen.target(source.target),
    )


def posthoc_selection(
    source: EnsembleSearchResult,
    y: np.ndarray,
    fold_ids: np.ndarray,
    loss: str = "auto",
    max_size: int = 50,
    warm_start: int = 0,
    weighting: str = "counts",
) -> EnsembleSearchResult:
    """Post-hoc ensemble from another run's pool (SEGOR s.2.2, SEGO s.2.1).

    Greedy forward selection with replacement (Caruana et al. 2004), optionally
    from the `warm_start` best single models (SEGO: 3), keeping the best prefix;
    weights are the members' counts, or with `weighting="bfgs"` weights fitted
    to the CV loss (SEGOR s.3.3). One history record per selection step. For
    classification, loss "auto" or "log_loss" selects by the CV log-loss of the
    members' mean probabilities, "brier" by their Brier score; "error" by the
    CV error of the majority vote (SEGO eq. 3-4); "squared_margin" or "margin"
    by those losses of the members' mean correctness (losses.Objective). BFGS
    weights fit the vote's error by the squared margin: that error is piecewise
    constant in the weights.

    "auto" is the log-loss because it measured best on issue 13's grid (6
    datasets x 5 splits, docs/results.md): test error 0.1274 against the
    vote's 0.1313, log-loss 0.277 against 3.11, AUC 0.893 against 0.809.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r} is not one of {list(WEIGHTINGS)}")
    chosen, outputs, target = _pool_objective(source, y, loss, auto="log_loss")
    if chosen.vote:
        selection = greedy_vote_selection(
            source.pool.predictions, source.target, fold_ids, max_size, warm_start
        )
    else:
        selection = greedy_selection_with_replacement(
            outputs, target, fold_ids, chosen.per_sample_loss, max_size, warm_start
        )
    members = [int(index) for index in selection.members]
    best_single = float(np.nanmin(source.single_losses))
    history = [
        IterationRecord(
            iteration=step,
            slot=-1,
            trial=int(selection.path[step]),
            status="ok",
            # Prefixes shorter than the warm start are never kept.
            action="add" if step + 1 >= selection.smallest_size else "warm_start",
            ensemble_loss=float(selection.loss_curve[step]),
            best_single_loss=best_single,
            ensemble_size=step + 1,
            acquisition_value=math.nan,
            fit_seconds=0.0,
        )
        for step in range(len(selection.path))
    ]
    selected = EnsembleSearchResult(
        source.pool,
        members,
        source.single_losses,
        history,
        target=source.target,
        model_name=source.model_name,
        objective=chosen.name,
    )
    if weighting == "counts":
        return selected
    # One more record: the reweighted ensemble, which is never worse than the
    # selected prefix, so it is the record join_selection keeps.
    weighted, loss = bfgs_reweighted(selected, fold_ids)
    weighted.history.append(
        replace(
            history[selection.size - 1],
            iteration=len(history),
            action="weigh",
            ensemble_loss=loss,
            ensemble_size=selection.size,
        )
    )
    return weighted


def bfgs_reweighted(
    result: EnsembleSearchResult, fold_ids: np.ndarray
) -> tuple[EnsembleSearchResult, float]:
    """The ensemble with its distinct members' weights fitted to the CV loss
    (SEGOR s.3.3), and its CV loss under the result's objective.

    BFGS on the simplex (selection.bfgs_weights) over the weighted mean of the
    members' outputs, starting from their current weights, so the fitted
    ensemble is never worse on that loss. A vote's error is piecewise constant
    in the weights: it is fitted by the squared margin, and the fit is kept
    only if the vote's error does not rise (else the weights stay as they were).
    """
    chosen = objective(result.task, result.objective or "auto")
    fitted_by = objective(result.task, "squared_margin") if chosen.vote else chosen
    start = result.member_weights
    members = sorted(start)
    fitted = bfgs_weights(
        result.pool.member_outputs(fitted_by.outputs)[members],
        fitted_by.target(result.target),
        fold_ids,
        fitted_by.per_sample_loss,
        initial_weights=np.array([start[i] for i in members]),
    )
    weights = dict(zip(members, map(float, fitted), strict=True))
    loss = ensemble_cv_loss(result.pool, chosen, result.target, fold_ids, weights)
    if chosen.vote:
        start_loss = ensemble_cv_loss(
            result.pool, chosen, result.target, fold_ids, start
        )
        if start_loss < loss:
            weights, loss = start, start_loss
    return replace(result, weights=weights), loss


POSTERIORS = {
    "bootstrap": lambda L, rng, rho, n: bootstrap_posterior(L, n, rng, rho=rho),
    "bayesian_bootstrap": lambda L, rng, rho, n: bayesian_bootstrap_posterior(
        L, n, rng, rho=rho
    ),
    "student_t": lambda L, rng, rho, n: student_t_posterior(L, n, rng, rho=rho),
}
# Weightings agnostic_bayes_selection offers: the posteriors above, the Dirichlet
# posterior (rho and alpha tuned), and the ArgMin / SoftMin baselines of AB s.6.
AB_WEIGHTINGS = (*POSTERIORS, "dirichlet", "argmin", "softmin")
# SoftMin temperatures, as multiples of the spread of the models' CV losses:
# 20 values like the rho grid, from nearly ArgMin to nearly uniform.
SOFTMIN_TEMPERATURES = np.geomspace(1e-3, 10.0, 20)


def _tuned_pool_weights(
    posterior: str,
    losses: np.ndarray,
    fold_ids: np.ndarray,
    ensemble_loss: Callable[[np.ndarray], float],
    n_samples: int,
    rng: np.random.Generator,
) -> Tuned:
    """Weights (t,) of a pool's models by `posterior`, its free parameter tuned (AB s.4.2)."""
    if posterior == "argmin":
        return tune_parameter(
            lambda _: argmin_weights(losses, fold_ids), [None], ensemble_loss
        )
    if posterior == "softmin":
        risks = losses[np.isfinite(losses).all(axis=1)] @ fold_weights(fold_ids)
        spread = float(np.ptp(risks)) if risks.size else 0.0
        return tune_parameter(
            lambda temperature: softmin_weights(losses, temperature, fold_ids),
            (spread or 1.0) * SOFTMIN_TEMPERATURES,
            ensemble_loss,
        )
    if posterior == "dirichlet":
        # rho first with the alpha -> 0 limit (the Bayesian bootstrap), then the
        # prior mass alpha at that rho: 20 + 6 posteriors instead of 20 x 6.
        by_rho = tune_rho(
            lambda L, rng, rho: bayesian_bootstrap_posterior(
                L, n_samples, rng, rho=rho
            ),
            losses,
            ensemble_loss,
            rng,
        )
        return tune_alpha(losses, ensemble_loss, n_samples, rng, rho=by_rho.value)
    return tune_rho(
        lambda L, rng, rho: POSTERIORS[posterior](L, rng, rho, n_samples),
        losses,
        ensemble_loss,
        rng,
    )


def agnostic_bayes_selection(
    source: EnsembleSearchResult,
    y: np.ndarray,
    fold_ids: np.ndarray,
    loss: str = "auto",
    posterior: str = "bootstrap",
    n_samples: int = 1000,
    seed: int = 0,
) -> EnsembleSearchResult:
    """Agnostic Bayes ensemble of a pool (Lacoste et al. 2014; ERS over a random pool).

    Each model is weighted by its posterior probability of being the best,
    p(h* = h | S), estimated from the per-sample losses of the out-of-fold
    predictions. Those losses come from k models trained on overlapping data,
    so the effective sample size ratio rho (s.4.1) is tuned over 20 values in
    [0.1, 0.8] to the CV loss of the weighted ensemble (s.4.2; for classification
    with loss "auto" or "error", the CV error of its weighted vote, AB eq. 1;
    otherwise the objective's loss of its weighted mean output); the Dirichlet
    posterior also tunes its prior mass alpha, SoftMin its temperature, and
    ArgMin (all weight on the lowest CV loss) has nothing to tune.
    """
    if posterior not in AB_WEIGHTINGS:
        raise ValueError(
            f"posterior={posterior!r} is not one of {sorted(AB_WEIGHTINGS)}"
        )
    chosen, outputs, target = _pool_objective(source, y, loss, auto="error")
    # (t, n), NaN rows for failed trials
    losses = chosen.per_sample_loss(outputs - target)
    if chosen.vote:
        ensemble_loss = weighted_vote_cv_error(
            source.pool.predictions, source.target, fold_ids
        )
    else:
        ensemble_loss = mean_ensemble_cv_loss(
            outputs, target, fold_ids, chosen.per_sample_loss
        )
    tuned = _tuned_pool_weights(
        posterior,
        losses,
        fold_ids,
        ensemble_loss,
        n_samples,
        np.random.default_rng(seed),
    )
    weights = {int(i): float(w) for i, w in enumerate(tuned.weights) if w > 0}
    ensemble_loss = float(np.nanmin(tuned.losses))
    record = IterationRecord(
        iteration=0,
        slot=-1,
        trial=max(weights, key=weights.get),
        status="ok",
        action="weigh",
        ensemble_loss=ensemble_loss,
        best_single_loss=float(np.nanmin(source.single_losses)),
        ensemble_size=len(weights),
        acquisition_value=math.nan,
        fit_seconds=0.0,
    )
    return EnsembleSearchResult(
        source.pool,
        sorted(weights),
        source.single_losses,
        [record],
        target=source.target,
        weights=weights,
        model_name=source.model_name,
        objective=chosen.name,
    )
