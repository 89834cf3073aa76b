"""Re-validation: a finished search's best configurations cross-validated again on fresh folds.

A search chooses its ensemble by one k-fold split. On a few hundred rows that
split is noisy, and choosing among hundreds of configurations by it fits its
noise: on the bundled regression datasets the ensemble's CV loss fell 18%
from 10 to 600 s while its test loss did not move (docs/results.md, "Longer
budgets"). Re-validation evaluates the best configurations (by their single
CV loss, with the ensemble's members) again on `repeats` more k-fold splits
of the same rows, drawn with other seeds, and chooses the final ensemble by
greedy selection with replacement (selection.stages.posthoc_selection) on
the mean of the splits' CV losses: repeated k-fold cross-validation, paid
only for the configurations that can matter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from ensemble_bo.core.evaluation import side_by_side
from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.losses import PROBABILITIES
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.preparation import ModelInput, assign_folds
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.selection.stages import posthoc_selection
from ensemble_bo.core.settings import RevalidationSettings
from ensemble_bo.core.trials import TrialResult

# The greedy selection on the repeated splits takes post-hoc selection's
# defaults (conf/base/parameters_posthoc.yml): 50 steps from the 3 best.
MAX_SIZE = 50
WARM_START = 3

# evaluate(fold assignments (R, n), configurations) -> one TrialResult a
# configuration, its out-of-fold outputs on the R assignments side by side
# (repeated k-fold: evaluation.evaluate_configuration)
SplitEvaluator = Callable[[np.ndarray, Sequence[dict]], list[TrialResult]]


class NothingRevalidated(ValueError):
    """No configuration trained on every split (a time budget ended first)."""


def revalidation_candidates(result: EnsembleSearchResult, n_best: int) -> list[int]:
    """Pool indices, best single CV loss first: the `n_best` best models that
    trained, then the ensemble's members not among them."""
    losses = np.asarray(result.single_losses, dtype=float)
    trained = np.flatnonzero(np.isfinite(losses) & result.pool.ok)
    best = [int(i) for i in trained[np.argsort(losses[trained], kind="stable")]]
    chosen = best[:n_best]
    members = [i for i in result.member_weights if i not in chosen]
    return chosen + sorted(members, key=lambda i: losses[i])


def fresh_fold_ids(data: ModelInput, repeats: int, seed: int) -> list[np.ndarray]:
    """`repeats` k-fold assignments (n,) of the search's rows, with as many
    folds as its own, each drawn with its own seed derived from `seed`
    (stratified for classes, as the search's)."""
    n_folds = len(np.unique(data.fold_ids))
    target = pd.Series(data.target)
    return [
        assign_folds(
            target, data.task, n_folds, derive_seed(seed, f"revalidation split {r}")
        )
        for r in range(1, repeats + 1)
    ]


def repeated_split_selection(
    result: EnsembleSearchResult,
    data: ModelInput,
    candidates: Sequence[int],
    fresh_folds: Sequence[np.ndarray],
    fresh_trials: Sequence[TrialResult],
    max_size: int = MAX_SIZE,
    warm_start: int = WARM_START,
    budget: InferenceBudget | None = None,
) -> EnsembleSearchResult:
    """The ensemble greedy selection with replacement chooses among
    `candidates` (pool indices) by their mean CV loss over the search's split
    and the `fresh_folds` (fold assignments, each (n,)), on which
    `fresh_trials` (in `candidates`' order) evaluated them: each trial's
    outputs are its candidate's on every fresh split, side by side
    ((len(fresh_folds) * n,)). Members and weights are indices of the
    search's pool; a candidate whose trial failed is left out. Its history's
    losses are the mean over the splits.

    The splits are laid side by side as one table of (1 + len(fresh_folds)) * n
    rows, folds renumbered apart, so that the selection's loss is the mean of
    the splits' losses; averaging each model's predictions over the splits
    instead would score bagged models, which a refit ensemble is not.
    """
    fold_sets = [data.fold_ids, *fresh_folds]
    n_folds = int(max(np.max(ids) for ids in fold_sets)) + 1
    stacked_folds = np.concatenate(
        [ids + split * n_folds for split, ids in enumerate(fold_sets)]
    )
    labels = result.pool.labels
    pool = Pool(
        len(stacked_folds),
        initial_capacity=max(1, len(candidates)),
        labels=None if labels is None else np.tile(labels, len(fold_sets)),
    )
    kept = []
    for index, fresh in zip(candidates, fresh_trials, strict=True):
        if not result.pool.ok[index] or not fresh.ok:
            continue
        kept.append(index)
        pool.add(
            result.pool.configs[index],
            result.pool.encoded[index],
            _side_by_side(result.pool, index, fresh),
        )
    if not kept:
        raise NothingRevalidated("no re-validated configuration trained on every split")
    target = np.tile(result.target, len(fold_sets))
    stacked = EnsembleSearchResult(
        pool,
        [],
        np.asarray(result.single_losses, dtype=float)[kept],
        target=target,
        model_name=result.model_name,
        objective=result.objective,
    )
    selected = posthoc_selection(
        stacked,
        target,
        stacked_folds,
        loss=result.objective or "auto",
        max_size=max_size,
        warm_start=min(warm_start, len(kept)),
        budget=budget,
    )
    return replace(
        selected,
        pool=result.pool,
        members=[kept[i] for i in selected.members],
        single_losses=result.single_losses,
        target=result.target,
        history=[
            replace(record, trial=kept[record.trial]) for record in selected.history
        ],
        search_metrics={
            **selected.search_metrics,
            "revalidation_splits": float(len(fresh_folds)),
            "revalidated_configurations": float(len(kept)),
        },
    )


def _side_by_side(pool: Pool, index: int, fresh: TrialResult) -> TrialResult:
    """Pool model `index`'s out-of-fold outputs followed by those of its
    `fresh` evaluation, as one trial on the stacked rows."""
    searched = TrialResult(
        pool.predictions[index],
        0.0,
        oof_probabilities=None
        if pool.labels is None
        else pool.member_outputs(PROBABILITIES)[index],
        predict_seconds_per_1000=pool.predict_seconds_per_1000[index],
        model_bytes=pool.model_bytes[index],
    )
    return side_by_side([searched, fresh])


def revalidate(
    result: EnsembleSearchResult,
    data: ModelInput,
    settings: RevalidationSettings,
    seed: int,
    evaluate: SplitEvaluator,
    budget: InferenceBudget | None = None,
) -> EnsembleSearchResult:
    """The search's final ensemble chosen again on `settings.repeats` fresh
    splits (repeated_split_selection) of its best `settings.candidates`
    configurations, evaluated by `evaluate` (best candidate first), within
    the inference `budget`."""
    candidates = revalidation_candidates(result, settings.candidates)
    folds = fresh_fold_ids(data, settings.repeats, seed)
    trials = evaluate(np.stack(folds), [result.pool.configs[i] for i in candidates])
    return repeated_split_selection(
        result, data, candidates, folds, trials, budget=budget
    )
