"""Selection stages: an ensemble chosen from a finished search's pool.

Post-hoc greedy selection with replacement (SEGOR s.2.2, SEGO s.2.1), weights
fitted by BFGS (SEGOR s.3.3) and the agnostic Bayes weighting of a pool
(Lacoste et al. 2014); each takes an EnsembleSearchResult and returns one. The
array algorithms they run are selection.greedy's and core.agnostic_bayes'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial

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
from ensemble_bo.core.inference_budget import (
    NOTHING_AFFORDABLE,
    InferenceBudget,
    ensemble_predict_seconds,
)
from ensemble_bo.core.losses import Objective, fold_weights, objective
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import (
    BAGGED_ACTION,
    EnsembleSearchResult,
    IterationRecord,
)
from ensemble_bo.core.selection.greedy import (
    bagged_selection,
    bfgs_weights,
    greedy_selection_with_replacement,
    greedy_vote_selection,
    weighted_vote_cv_error,
)
from ensemble_bo.core.settings import Block, check_loss, count, one_of, setting, text


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


# counts: the selection's own weights; bfgs: fitted to the CV loss (SEGOR
# s.3.3); bagged: chosen again from the whole pool by greedy selection bagged
# over bootstrap resamples of the rows (bagged_reweighted).
WEIGHTINGS = ("counts", "bfgs", "bagged")
# Bagged weighting: bags, and greedy steps per bag (each keeps its best prefix).
BAGS = 20
BAG_STEPS = 25


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


@dataclass(frozen=True)
class PosthocSettings(Block):
    """`posthoc`: greedy selection with replacement over a pool."""

    display_name: str = setting(text("the method's name in titles"))
    loss: str = setting(check_loss)
    max_size: int = setting(count(1, "the number of greedy selection steps"))
    warm_start: int = setting(count(0, "the best single models to start from; 0: none"))
    weighting: str = setting(one_of(WEIGHTINGS))


def posthoc_selection(
    source: EnsembleSearchResult,
    y: np.ndarray,
    fold_ids: np.ndarray,
    loss: str = "auto",
    max_size: int = 50,
    warm_start: int = 0,
    weighting: str = "counts",
    budget: InferenceBudget | None = None,
    seed: int = 0,
) -> EnsembleSearchResult:
    """Post-hoc ensemble from another run's pool (SEGOR s.2.2, SEGO s.2.1).

    Greedy forward selection with replacement (Caruana et al. 2004), optionally
    from the `warm_start` best single models (SEGO: 3), keeping the best prefix;
    weights are the members' counts, or with `weighting="bfgs"` weights fitted
    to the CV loss (SEGOR s.3.3), or with "bagged" those of the selection
    bagged over bootstrap resamples of the rows (bagged_reweighted, `seed`).
    One history record per selection step (and one for the reweighted
    ensemble). For classification, loss "auto" or "log_loss" selects by the
    CV log-loss of the members' mean probabilities, "brier" by their Brier
    score; "error" by the CV error of the majority vote (SEGO eq. 3-4);
    "squared_margin" or "margin" by those losses of the members' mean
    correctness (losses.Objective). BFGS weights fit the vote's error by the
    squared margin: that error is piecewise constant in the weights.

    "auto" is the log-loss because it measured best on the bundled
    classification grid (6 datasets x 5 splits, docs/results.md,
    "Classification objectives"): test error 0.1274 against the vote's 0.1313,
    log-loss 0.277 against 3.11, AUC 0.893 against 0.809.
    With an inference `budget` (core.inference_budget) each step takes the
    best member the ensemble can afford; the result's search_metrics count
    the steps whose best candidate it turned away.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting={weighting!r} is not one of {list(WEIGHTINGS)}")
    chosen, outputs, target = _pool_objective(source, y, loss, auto="log_loss")
    allowed = None
    if budget is not None and budget.active:
        allowed = partial(budget.fits, source.pool)
    if chosen.vote:
        selection = greedy_vote_selection(
            source.pool.predictions,
            source.target,
            fold_ids,
            max_size,
            warm_start,
            allowed,
        )
    else:
        selection = greedy_selection_with_replacement(
            outputs,
            target,
            fold_ids,
            chosen.per_sample_loss,
            max_size,
            warm_start,
            allowed,
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
            ensemble_predict_seconds=ensemble_predict_seconds(
                source.pool, selection.path[: step + 1]
            ),
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
        search_metrics=(
            {"inference_budget_skipped": float(selection.skipped)}
            if allowed is not None
            else {}
        ),
    )
    if weighting == "counts":
        return selected
    # One more record: the reweighted ensemble, the one join_selection keeps
    # (BFGS's is never worse than the selected prefix; a bagged one is kept
    # as the ensemble shipped, though its CV loss is usually a little higher).
    if weighting == "bfgs":
        weighted, loss = bfgs_reweighted(selected, fold_ids)
        action, size = "weigh", selection.size
    else:
        weighted, loss = bagged_reweighted(selected, fold_ids, seed, budget)
        action, size = BAGGED_ACTION, len(weighted.member_weights)
    weighted.history.append(
        replace(
            history[selection.size - 1],
            iteration=len(history),
            action=action,
            ensemble_loss=loss,
            ensemble_size=size,
            ensemble_predict_seconds=ensemble_predict_seconds(
                source.pool, list(weighted.member_weights)
            ),
        )
    )
    return weighted


def bagged_weights(
    pool: Pool,
    chosen: Objective,
    target: np.ndarray,
    fold_ids: np.ndarray,
    seed: int,
    budget: InferenceBudget | None = None,
) -> dict[int, float]:
    """Pool index -> weight of the pool's ensemble chosen by greedy selection
    bagged over bootstrap resamples of the rows (BAGS bags of BAG_STEPS
    steps, selection.greedy.bagged_selection) under the objective `chosen`;
    target: the pool's (n,), values or class codes.

    Within an inference `budget`, each bag takes only models that fit it, and
    the union of the bags keeps its heaviest members that fit together
    (InferenceBudget.affordable), weights renormalized.
    """
    if chosen.vote:  # the vote is selected on class codes
        outputs, compared, per_sample_loss = pool.predictions, target, None
    else:
        outputs = pool.member_outputs(chosen.outputs)
        compared, per_sample_loss = chosen.target(target), chosen.per_sample_loss
    active = budget is not None and budget.active
    weights = bagged_selection(
        outputs,
        compared,
        fold_ids,
        per_sample_loss,
        BAGS,
        BAG_STEPS,
        seed,
        partial(budget.fits, pool) if active else None,
    )
    kept = {int(i): float(weights[i]) for i in np.flatnonzero(weights > 0)}
    if active:
        affordable = budget.affordable(pool, kept)
        total = sum(kept[i] for i in affordable)
        kept = {i: kept[i] / total for i in affordable}
    return kept


def bagged_reweighted(
    result: EnsembleSearchResult,
    fold_ids: np.ndarray,
    seed: int,
    budget: InferenceBudget | None = None,
) -> tuple[EnsembleSearchResult, float]:
    """The result with its ensemble chosen again from the whole pool by
    bagged selection (bagged_weights), and that ensemble's CV loss under the
    result's objective. The bags trade a little of the CV loss for a lower
    variance: on the bundled and held-out regression suites (docs/results.md,
    "Bagged selection") their ensembles tested lower than the search's own.
    """
    chosen = objective(result.task, result.objective or "auto")
    weights = bagged_weights(result.pool, chosen, result.target, fold_ids, seed, budget)
    loss = ensemble_cv_loss(result.pool, chosen, result.target, fold_ids, weights)
    return replace(result, members=sorted(weights), weights=weights), loss


class BaggedMembers:
    """The distinct members a bagged selection of the pool would ship, for
    the time a search keeps back for its final fit (core.time_budget).

    A bagged selection takes about 0.3 s on 100 models of 1,000 rows, too
    long to make after every trial: it is made again once the pool has grown
    by a quarter, and in between its last members are joined with the
    search's own.
    """

    def __init__(
        self, chosen: Objective, target: np.ndarray, fold_ids: np.ndarray, seed: int
    ) -> None:
        self._problem = (chosen, np.asarray(target), np.asarray(fold_ids), seed)
        self._members: list[int] = []
        self._next_size = 1

    def __call__(self, pool: Pool, members: list[int]) -> list[int]:
        if len(pool) >= self._next_size and pool.ok.any():
            self._members = list(bagged_weights(pool, *self._problem))
            self._next_size = max(len(pool) + 1, math.ceil(1.25 * len(pool)))
        return sorted(set(self._members) | set(members))


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
    budget: InferenceBudget | None = None,
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

    With an inference `budget` (core.inference_budget) the hypotheses are
    the models that fit on their own; if the posterior's support does not fit
    together, its heaviest models that do are kept and weighed again among
    themselves, tuned as before. The result's search_metrics count the
    models left out that are better than every member.
    """
    if posterior not in AB_WEIGHTINGS:
        raise ValueError(
            f"posterior={posterior!r} is not one of {sorted(AB_WEIGHTINGS)}"
        )
    chosen, outputs, target = _pool_objective(source, y, loss, auto="error")
    # (t, n), NaN rows for failed trials
    losses = chosen.per_sample_loss(outputs - target)
    if chosen.vote:
        weighted_loss = weighted_vote_cv_error(
            source.pool.predictions, source.target, fold_ids
        )
    else:
        weighted_loss = mean_ensemble_cv_loss(
            outputs, target, fold_ids, chosen.per_sample_loss
        )
    rng = np.random.default_rng(seed)

    def weigh(among: np.ndarray) -> tuple[Tuned, dict[int, float]]:
        # Rows of NaN are failed hypotheses to the posterior: weight 0.
        restricted = np.where(among[:, None], losses, np.nan)
        tuned = _tuned_pool_weights(
            posterior, restricted, fold_ids, weighted_loss, n_samples, rng
        )
        return tuned, {int(i): float(w) for i, w in enumerate(tuned.weights) if w > 0}

    metrics = {}
    if budget is None or not budget.active:
        tuned, weights = weigh(np.ones(len(losses), dtype=bool))
    else:
        alone = budget.fits(source.pool, [])
        if not (source.pool.ok & alone).any():
            raise ValueError(NOTHING_AFFORDABLE)
        tuned, weights = weigh(alone)
        kept = budget.affordable(source.pool, weights)
        if len(kept) < len(weights):
            tuned, weights = weigh(np.isin(np.arange(len(losses)), kept))
        budget.count_refused(source.single_losses, list(weights))
        metrics = {"inference_budget_skipped": float(budget.skipped)}
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
        ensemble_predict_seconds=ensemble_predict_seconds(source.pool, list(weights)),
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
        search_metrics=metrics,
    )
