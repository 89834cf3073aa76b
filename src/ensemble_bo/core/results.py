"""What a search returns: its per-iteration records, its pool and its ensemble."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from ensemble_bo.core.diversity import (
    ensemble_mutual_information,
    mean_pairwise_disagreement,
)
from ensemble_bo.core.losses import objective
from ensemble_bo.core.pool import Pool

# The history action of an ensemble chosen again by bagged selection
# (selection.stages.bagged_reweighted).
BAGGED_ACTION = "bag"


@dataclass(frozen=True)
class IterationRecord:
    """What one iteration did; the metrics a run logs per step."""

    iteration: int
    slot: int  # index j taken out (-1 while a growing ensemble is empty)
    trial: int
    status: str
    # replace | grow | shrink (SEGOR), select (single best), add (post-hoc step),
    # warm_start (a post-hoc step inside its warm start, never kept), weigh (the
    # final weights), none (no model trained yet)
    action: str
    ensemble_loss: float
    best_single_loss: float
    ensemble_size: int
    acquisition_value: float
    fit_seconds: float
    # A multi-fidelity search's spending when the trial joined the pool, in
    # full-fidelity equivalents (rung evaluations included); NaN without one.
    fidelity_spent: float = math.nan
    # The ensemble's prediction seconds per 1,000 rows after the iteration:
    # the sum over its distinct members of what their trials measured
    # (core.inference_budget); NaN for an empty ensemble or unmeasured trials.
    ensemble_predict_seconds: float = math.nan


@dataclass(frozen=True)
class RungEvaluation:
    """One evaluation of a multi-fidelity search (core.fidelity): a bracket's
    configuration at one rung's resource, and what the rung made of it."""

    bracket: int
    rung: int
    resource: float  # folds, share of rows or iterations
    config: dict
    status: str  # ok | failed
    # The method's target it was ranked by at promotion (NaN: failed, or the top
    # rung, whose configurations join the pool instead).
    objective: float
    promoted: bool
    trial: int  # its pool index when it joined the pool (the top rung), else -1
    fit_seconds: float  # this rung's fits alone
    error: str = ""


@dataclass
class EnsembleSearchResult:
    """The pool, the final ensemble (pool indices, one per slot) and the history."""

    pool: Pool
    members: list[int]
    single_losses: np.ndarray
    history: list[IterationRecord] = field(default_factory=list)
    # The target the pool was evaluated on, shape (n,): the standardized target
    # or the class codes, so a later post-hoc selection can check it works on
    # the same data.
    target: np.ndarray | None = None
    # Optimized weights (e.g. BFGS) replacing the members' counts, by pool index.
    weights: dict[int, float] | None = None
    # The model (a name of parameters_models.yml) whose configurations the pool
    # holds; strategies never build models, so whoever runs them names it.
    model_name: str = ""
    # Trials answered from a journal instead of trained (a resumed search).
    trials_reused: int = 0
    # Wall seconds the search took (refit excluded; a resumed search's replayed
    # trials not counted), and what ended it: its "budget" of trials or its
    # "time_budget" (core.time_budget, which counts the replayed trials).
    search_seconds: float = 0.0
    stopped_by: str = "budget"
    # Quantities of the search worth logging with the run's metrics, by name
    # (ESMBO's tuned rho: esmbo_rho).
    search_metrics: dict[str, float] = field(default_factory=dict)
    # The objective the ensemble was chosen by (losses.objective's name: mse,
    # squared_margin, log_loss, ...); "" in results saved before it was kept.
    objective: str = ""
    # A multi-fidelity search's every rung evaluation, in order; empty without.
    rung_evaluations: list[RungEvaluation] = field(default_factory=list)

    def __setstate__(self, state: dict) -> None:
        # Results pickled before the field was renamed name the model `algorithm`.
        state = dict(state)
        if "algorithm" in state:
            state["model_name"] = state.pop("algorithm")
        self.__dict__.update(state)

    @property
    def voting(self) -> str:
        """The classifier combiner matching the objective: soft for probability losses."""
        if self.task == "regression" or not self.objective:
            return "hard"
        return objective(self.task, self.objective).voting

    @property
    def member_weights(self) -> dict[int, float]:
        """Pool index -> weight: explicit weights, or k / m for a model in k of m slots."""
        if self.weights is not None:
            return dict(self.weights)
        counts = Counter(self.members)
        return {
            index: count / len(self.members) for index, count in sorted(counts.items())
        }

    @property
    def task(self) -> str:
        return "regression" if self.pool.labels is None else "classification"

    def distinct_member_predictions(self) -> tuple[list[int], np.ndarray]:
        """(pool indices, their out-of-fold predictions (k, n)) of the distinct members.

        A model filling several slots is one member here: identical predictions
        have infinite mutual information, which would swamp the measure.
        """
        members = list(self.member_weights)
        return members, self.pool.predictions[members]

    def diversity(self) -> dict[str, float]:
        """Diversity of the distinct members, on their out-of-fold predictions.

        Regression: mean pairwise mutual information (SEGOR s.4.2, eq. 8-9), lower
        is more diverse. Classification: mean pairwise disagreement (the share of
        samples two members label differently), higher is more diverse.
        """
        _, predictions = self.distinct_member_predictions()
        if self.task == "classification":
            return {"ensemble_disagreement": mean_pairwise_disagreement(predictions)}
        return {"ensemble_mutual_information": ensemble_mutual_information(predictions)}

    @property
    def best_single(self) -> int:
        """Pool index of the model with the lowest individual CV loss (`s-m`)."""
        return int(np.nanargmin(self.single_losses))


def interrupted_by_user(error: BaseException) -> bool:
    """Whether `error` is Ctrl-C, or was raised from it (a stopped search)."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


class SearchInterrupted(RuntimeError):
    """A search stopped early (an error, Ctrl-C); `result` holds what it had trained."""

    def __init__(self, result: EnsembleSearchResult, budget: int, cause: BaseException):
        reason = type(cause).__name__ + (f": {cause}" if str(cause) else "")
        super().__init__(
            f"search stopped after {len(result.history)} of {budget} iterations "
            f"({reason}); its {len(result.pool)} trained models are kept in the "
            "exception's result"
        )
        self.result = result


class AllTrialsFailed(SearchInterrupted):
    """Every trial of a search failed: at the start (`max_initial_failures` in a
    row, the search stopped early) or to the end of its budget.

    `result` holds the failed trials (their configurations and error texts, for
    the trial history); `errors` lists their distinct error texts in the order
    they first occurred, errors that differ only in their numbers (the value
    of a hyperparameter) counted as one. A run that raises it never reaches
    the refit.
    """

    # Distinct error texts shown in the message, and characters kept of each.
    SHOWN_ERRORS = 5
    SHOWN_CHARACTERS = 300

    def __init__(
        self,
        result: EnsembleSearchResult,
        budget: int,
        max_initial_failures: int | None = None,
    ):
        self.result = result
        self.budget = budget
        groups: dict[str, list[str]] = {}
        # A multi-fidelity search's failures below full fidelity never reach
        # the pool (the top rung's evaluations are its trials).
        below = [e.error for e in result.rung_evaluations if e.trial < 0]
        for error in [*result.pool.errors, *below]:
            if error:
                groups.setdefault(_NUMBER.sub("#", str(error)), []).append(str(error))
        self.errors = [texts[0] for texts in groups.values()]
        trials = len(result.pool)
        where = f" of model {result.model_name!r}" if result.model_name else ""
        if result.stopped_by == "time_budget":
            what = (
                f"the time budget ended the search after {trials} trials{where}, "
                "all failed; there is no model to refit"
            )
        elif result.rung_evaluations:  # its budget counts full-fidelity equivalents
            what = (
                f"no configuration{where} trained at full fidelity ({trials} reached "
                f"it, of {len(result.rung_evaluations)} multi-fidelity evaluations); "
                "there is no model to refit"
            )
        elif trials < budget:
            what = (
                f"the first {trials} trials{where} all failed, so the search stopped "
                f"before its budget of {budget} (max_initial_failures="
                f"{max_initial_failures})"
            )
        else:
            what = f"all {trials} trials{where} failed; there is no model to refit"
        shown = "; ".join(
            f"({number}) {_shortened(texts[0], self.SHOWN_CHARACTERS)}"
            + (f" [{len(texts)} trials]" if len(texts) > 1 else "")
            for number, texts in enumerate(
                list(groups.values())[: self.SHOWN_ERRORS], 1
            )
        )
        more = len(groups) - self.SHOWN_ERRORS
        RuntimeError.__init__(
            self,
            f"{what}. Distinct errors: {shown}"
            + (f" (and {more} more)" if more > 0 else "")
            + ". Fix the data or the model's search space; the failed trials are "
            "kept in the exception's result (the trial history)",
        )


# A number in an error text (a hyperparameter's value): masked to group errors.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _shortened(text: str, characters: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= characters else text[: characters - 3] + "..."


def join_selection(
    search: EnsembleSearchResult, selection: EnsembleSearchResult
) -> EnsembleSearchResult:
    """`selection` (an ensemble chosen from `search`'s pool) with the search's curve.

    The history is the search's, its last iteration carrying the selected
    ensemble (its lowest-loss step outside a warm start: post-hoc selection
    keeps its best prefix of at least the warm start's size), so
    `cv_loss_ensemble` at iteration t means the same in every method: the CV
    loss of the ensemble the method holds after t + 1 trained models. A
    selection reweighted by bagging ends with the record of the ensemble it
    ships, which is the one kept.
    """
    keepable = [r for r in selection.history if r.action != "warm_start"]
    if not search.history or not keepable:
        return selection
    chosen = min(
        keepable,
        key=lambda record: (np.isnan(record.ensemble_loss), record.ensemble_loss),
    )
    if keepable[-1].action == BAGGED_ACTION:  # shipped, though its CV loss is higher
        chosen = keepable[-1]
    last = replace(
        search.history[-1],
        action=chosen.action,
        ensemble_loss=chosen.ensemble_loss,
        ensemble_size=chosen.ensemble_size,
        ensemble_predict_seconds=chosen.ensemble_predict_seconds,
    )
    return replace(
        selection,
        history=[*search.history[:-1], last],
        trials_reused=search.trials_reused,
        search_seconds=search.search_seconds,
        stopped_by=search.stopped_by,
        search_metrics={**search.search_metrics, **selection.search_metrics},
    )
