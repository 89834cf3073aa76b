"""What the ensemble is made of and what it relies on: the pool's leaderboard,
each member's contribution, and permutation feature importance.

- The leaderboard ranks every trained configuration by its own CV loss, with
  its family, fit seconds, prediction seconds per 1,000 rows and size (as its
  trial measured them, core.evaluation.FoldCosts) and its weight in the final
  ensemble.
- A member's contribution is how much the ensemble's CV loss rises without
  it: the loss of the ensemble with that member's weight removed (the others
  renormalized) minus the ensemble's, both by the search's objective on the
  pool's out-of-fold outputs.
- Feature importance is scikit-learn's `permutation_importance` of the final
  model on data it did not train on (the run's test split): how much the
  score drops when a column's values are shuffled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.inspection import permutation_importance

from ensemble_bo.core.losses import objective
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.row_capped import capped_rows
from ensemble_bo.core.selection.stages import ensemble_cv_loss as stage_cv_loss

# Shuffles per feature: the importance is their mean, with its spread.
PERMUTATION_REPEATS = 5
# Rows the shuffles are scored on at most: on 33,000 test rows of 100,000 (two
# forests), all rows took 27 s; the ranking of 8 features needs far fewer.
PERMUTATION_ROWS = 10_000
# Row predictions all the shuffles may take together (features x repeats of
# the sample, and its unshuffled score): an ensemble holding an SVR predicts
# 1,000 rows in 0.4 s, and 10,000 rows x 20 features x 5 shuffles took minutes.
PERMUTATION_PREDICTIONS = 200_000
# ... but never fewer rows than this, however many the features.
PERMUTATION_MIN_ROWS = 1_000
# How the score drops are measured: the test metrics a run reports.
_SCORING = {"regression": "neg_mean_squared_error", "classification": "accuracy"}


def family(config: dict[str, Any], model_name: str) -> str:
    """The learning algorithm of a configuration: its multi-family space's
    choice (`regressor`, `classifier`), else the model it tunes."""
    return str(config.get("regressor", config.get("classifier", model_name)))


def ensemble_cv_loss(result: EnsembleSearchResult, weights: dict[int, float]) -> float:
    """CV loss of the pool's members combined with `weights` (pool index ->
    weight, renormalized) by the search's objective, as the search scores an
    ensemble (selection.stages.ensemble_cv_loss), but as a plain mean over
    the rows: a finished result does not keep its folds, and with equal folds
    the two agree. NaN for an empty ensemble, or a result saved without its
    target."""
    weights = {index: w for index, w in weights.items() if w > 0}
    if not weights or result.target is None:
        return float("nan")
    target = np.asarray(result.target)
    return stage_cv_loss(
        result.pool,
        objective(result.task, result.objective or "auto"),
        target,
        np.zeros(len(target), dtype=int),  # one fold: every row weighs 1/n
        weights,
    )


def member_contributions(result: EnsembleSearchResult) -> dict[int, float]:
    """Pool index -> the rise of the ensemble's CV loss without that member
    (positive: the member helps). A one-member ensemble's member: NaN."""
    weights = result.member_weights
    whole = ensemble_cv_loss(result, weights)
    return {
        index: ensemble_cv_loss(
            result, {other: w for other, w in weights.items() if other != index}
        )
        - whole
        for index in weights
    }


def leaderboard(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per trial, best CV loss first (failed trials last): trial,
    family, status, cv_loss (its own), fit_seconds, predict_seconds_per_1000,
    model_mib (one fold model pickled), weight (in the final ensemble) and
    contribution (member_contributions; NaN for a trial not in it)."""
    pool = result.pool
    weights = result.member_weights
    contributions = member_contributions(result)
    frame = pd.DataFrame(
        {
            "trial": np.arange(len(pool)),
            "family": [family(c, result.model_name) for c in pool.configs],
            "status": np.where(pool.ok, "ok", "failed"),
            "cv_loss": np.asarray(result.single_losses, dtype=float),
            "fit_seconds": pool.fit_seconds,
            "predict_seconds_per_1000": pool.predict_seconds_per_1000,
            "model_mib": np.asarray(pool.model_bytes, dtype=float) / 2**20,
            "weight": [weights.get(t, 0.0) for t in range(len(pool))],
            # rounded: a difference of two losses carries their summation's
            # rounding, which BLAS threads vary from run to run
            "contribution": np.round(
                [contributions.get(t, np.nan) for t in range(len(pool))], 10
            ),
        }
    )
    return frame.sort_values(
        ["cv_loss", "trial"], na_position="last", kind="stable"
    ).reset_index(drop=True)


def feature_importance(
    model: Any,
    features: pd.DataFrame,
    target: pd.Series,
    task: str,
    random_state: int,
    n_repeats: int = PERMUTATION_REPEATS,
) -> pd.DataFrame:
    """Permutation importance of `model` on (features, target), one row per
    column, most important first: importance (the mean drop of the score:
    MSE in the target's squared units for regression, accuracy for
    classification), its standard deviation over `n_repeats` shuffles. Scored
    on a seeded sample of the rows where they are many: at most
    PERMUTATION_ROWS, and at most PERMUTATION_PREDICTIONS predicted rows in
    all (never fewer than PERMUTATION_MIN_ROWS rows)."""
    shuffles = len(features.columns) * n_repeats + 1
    rows = min(
        PERMUTATION_ROWS,
        max(PERMUTATION_MIN_ROWS, PERMUTATION_PREDICTIONS // shuffles),
    )
    if len(features) > rows:
        sample = capped_rows(target.to_numpy(), rows, random_state, stratify=False)
        features, target = features.iloc[sample], target.iloc[sample]
    found = permutation_importance(
        model,
        features,
        target,
        scoring=_SCORING[task],
        n_repeats=n_repeats,
        random_state=random_state,
    )
    frame = pd.DataFrame(
        {
            "feature": list(features.columns),
            "importance": found.importances_mean,
            "importance_std": found.importances_std,
        }
    )
    return frame.sort_values("importance", ascending=False, kind="stable").reset_index(
        drop=True
    )
