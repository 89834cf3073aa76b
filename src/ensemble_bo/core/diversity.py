"""Diversity of an ensemble's members (SEGOR s.4.2).

Pairwise mutual information of the members' predictions, -1/2 log(1 - rho^2)
(eq. 8-9), and pairwise disagreement of classifiers.

Pure numpy / pandas: no Kedro, no MLflow, no plotting.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ensemble_bo.core.messages import plain

#: |rho| is clipped to this before -1/2 log(1 - rho^2), so identical or exactly
#: anti-correlated members get a large finite mutual information, never inf.
MAX_ABS_CORRELATION = 1.0 - 1e-12
#: The mutual information of two identical members after the clip (about 13.47 nats).
MAX_PAIRWISE_MUTUAL_INFORMATION = float(-0.5 * np.log1p(-(MAX_ABS_CORRELATION**2)))


def _member_matrix(predictions) -> np.ndarray:
    predictions = np.asarray(predictions, dtype=float)
    if predictions.ndim != 2:
        raise ValueError(
            f"predictions must be 2-D (members, samples), got shape {predictions.shape}"
        )
    m, n = predictions.shape
    if m < 1:
        raise ValueError("predictions has no members (0 rows)")
    if n < 2:
        raise ValueError(
            f"need at least 2 samples per member for a correlation, got {n}"
        )
    bad = np.argwhere(~np.isfinite(predictions))
    if bad.size:
        member, sample = bad[0]
        raise ValueError(
            f"predictions has a non-finite value {plain(predictions[member, sample])!r} "
            f"for member {member}, sample {sample}"
        )
    return predictions


def correlation_matrix(predictions) -> np.ndarray:
    """Pearson correlations (m, m) of the members' predictions (m, n), eq. 9.

    Eq. 9 as printed puts the square root over the product of the summed
    squares' terms; we use the standard Pearson normalisation
    sqrt(sum (y^m - mu^m)^2) * sqrt(sum (y^n - mu^n)^2), which is what "the
    correlation between two predictors" means.

    rho is undefined for a member whose predictions are constant. We set
    rho = 0 between a constant and a non-constant member (a constant carries no
    information: their mutual information is exactly 0) and rho = 1 between two
    constant members (each is an affine function of the other, the limit of
    perfectly correlated predictors: no diversity). The diagonal is 1.
    """
    predictions = _member_matrix(predictions)
    centered = predictions - predictions.mean(axis=1, keepdims=True)
    constant = np.all(predictions == predictions[:, :1], axis=1)
    norms = np.sqrt(np.einsum("ij,ij->i", centered, centered))
    safe_norms = np.where(constant, 1.0, norms)
    unit = centered / safe_norms[:, None]
    rho = unit @ unit.T
    rho[constant, :] = 0.0
    rho[:, constant] = 0.0
    rho[np.ix_(constant, constant)] = 1.0
    np.fill_diagonal(rho, 1.0)
    return np.clip(rho, -1.0, 1.0)


def mutual_information_matrix(predictions) -> np.ndarray:
    """Pairwise mutual information -1/2 log(1 - rho^2) of the members (SEGOR eq. 8).

    predictions: (m, n), one row of predictions per member. rho is the Pearson
    correlation of `correlation_matrix` (see there for constant members), with
    |rho| clipped to MAX_ABS_CORRELATION = 1 - 1e-12 so that identical or exactly
    anti-correlated members get MAX_PAIRWISE_MUTUAL_INFORMATION (about 13.47)
    instead of inf. The diagonal (a member with itself) holds that same cap.
    Returns a symmetric (m, m) array of finite values >= 0.
    """
    rho = np.clip(
        correlation_matrix(predictions), -MAX_ABS_CORRELATION, MAX_ABS_CORRELATION
    )
    return -0.5 * np.log1p(-np.square(rho))


def ensemble_mutual_information(predictions) -> float:
    """Diversity of an ensemble: sum of pairwise MI divided by m^2 (SEGOR s.4.2).

    The sum counts each unordered pair {i, j}, i != j, once: "the sum of all
    pairwise MI" names each pair of members once, and MI is symmetric, so an
    ordered sum over i != j would only double every term. Self-pairs are not
    summed (a member's MI with itself is not a diversity term). Lower values mean
    more diverse predictions. A single member gives 0.0 (no pairs). Members
    repeated in the ensemble (selection with replacement) count as identical
    pairs at the capped MI; pass distinct members if that is not wanted.
    """
    information = mutual_information_matrix(predictions)
    m = information.shape[0]
    upper = np.triu_indices(m, k=1)
    return float(information[upper].sum() / m**2)


def _label_matrix(labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 2:
        raise ValueError(
            f"labels must be 2-D (members, samples), got shape {labels.shape}"
        )
    if labels.shape[0] < 1 or labels.shape[1] < 1:
        raise ValueError(f"labels must be non-empty, got shape {labels.shape}")
    missing = np.argwhere(pd.isna(labels))
    if missing.size:
        member, sample = missing[0]
        raise ValueError(
            f"labels has a missing value {plain(labels[member, sample])!r} for member "
            f"{member}, sample {sample}"
        )
    return labels


def pairwise_disagreement(labels) -> np.ndarray:
    """(m, m) fraction of samples on which classifiers i and j predict different labels.

    labels: (m, n) predicted labels of m members (any dtype). Diagonal 0.
    """
    labels = _label_matrix(labels)
    m = labels.shape[0]
    disagreement = np.zeros((m, m))
    for i in range(m):
        disagreement[i] = np.mean(labels != labels[i], axis=1)
    return disagreement


def mean_pairwise_disagreement(labels) -> float:
    """Mean disagreement over the unordered pairs i < j of members (0.0 for one member)."""
    disagreement = pairwise_disagreement(labels)
    m = disagreement.shape[0]
    if m < 2:
        return 0.0
    return float(disagreement[np.triu_indices(m, k=1)].mean())
