"""The final ensemble as one scikit-learn estimator on raw features."""

from __future__ import annotations

from collections.abc import Sequence

from sklearn.base import BaseEstimator
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import VotingRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from ensemble_bo.core.preparation import make_feature_encoder


def build_regression_ensemble(
    members: Sequence[BaseEstimator], weights: Sequence[float], categorical: list[str]
) -> TransformedTargetRegressor:
    """Unfitted model: one-hot encoding, then the weighted mean of `members`.

    The target is standardized on fit (population std, as in data processing)
    and predictions come back in the target's own units. scikit-learn's
    VotingRegressor is exactly the weighted-mean combiner of SEGOR s.3.
    """
    if len(members) == 0 or len(members) != len(weights):
        raise ValueError(
            f"need one weight per member, got {len(members)} members and {len(weights)} weights"
        )
    ensemble = VotingRegressor(
        [(f"member_{i}", member) for i, member in enumerate(members)],
        weights=list(weights),
    )
    return TransformedTargetRegressor(
        regressor=Pipeline(
            [("encode", make_feature_encoder(categorical)), ("ensemble", ensemble)]
        ),
        transformer=StandardScaler(),
    )
