"""Tables and figures of a finished search (no Kedro, no MLflow)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # runs headless: in CI, under Kedro, on a scheduler

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from ensemble_bo.core.analysis import (
    ensemble_mutual_information,
    mean_pairwise_disagreement,
    mutual_information_matrix,
    pairwise_disagreement,
)
from ensemble_bo.core.strategies import EnsembleSearchResult


def trial_history(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per trial: parameters, status, CV losses, EI, its weight in the final ensemble."""
    frame = result.pool.to_frame()
    iterations = pd.DataFrame(
        [
            (
                record.trial,
                record.iteration,
                record.slot,
                record.action,
                record.acquisition_value,
                record.ensemble_loss,
            )
            for record in result.history
        ],
        # named here, not by the rows, so a search stopped before its first
        # iteration ended still gives the table its columns
        columns=[
            "trial",
            "iteration",
            "slot",
            "action",
            "acquisition_value",
            "cv_loss_ensemble_after",
        ],
    )
    # A search trains one trial per iteration; a post-hoc selection may add a
    # trial at several steps, and the table keeps the first.
    iterations = iterations.drop_duplicates("trial", keep="first")
    frame = frame.merge(iterations, on="trial", how="left")
    frame["cv_loss_single"] = result.single_losses
    weights = result.member_weights
    frame["final_weight"] = [weights.get(trial, 0.0) for trial in frame["trial"]]
    return frame


def ensemble_composition(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per distinct member: pool index, weight, individual CV loss, parameters."""
    rows = [
        {
            "trial": index,
            "weight": weight,
            "cv_loss_single": float(result.single_losses[index]),
            **result.pool.configs[index],
        }
        for index, weight in result.member_weights.items()
    ]
    return pd.DataFrame(rows)


def convergence_plot(result: EnsembleSearchResult, title: str) -> plt.Figure:
    """Ensemble vs best single-model CV loss per iteration."""
    figure, axes = plt.subplots(figsize=(7, 4.5), layout="constrained")
    iterations = [record.iteration + 1 for record in result.history]
    axes.plot(iterations, [r.ensemble_loss for r in result.history], label="ensemble")
    axes.plot(
        iterations,
        [r.best_single_loss for r in result.history],
        label="best single model",
    )
    axes.set_xlabel("iteration")
    axes.set_ylabel("CV loss")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    return figure


def _distinct_member_predictions(
    result: EnsembleSearchResult,
) -> tuple[list[int], np.ndarray]:
    # A model filling several slots is one member here: identical predictions
    # have infinite mutual information, which would swamp the measure.
    members = list(result.member_weights)
    return members, result.pool.predictions[members]


def ensemble_diversity(result: EnsembleSearchResult) -> dict[str, float]:
    """Diversity of the distinct members, on their out-of-fold predictions.

    Regression: mean pairwise mutual information (SEGOR s.4.2, eq. 8-9), lower
    is more diverse. Classification: mean pairwise disagreement (the share of
    samples two members label differently), higher is more diverse.
    """
    _, predictions = _distinct_member_predictions(result)
    if result.task == "classification":
        return {"ensemble_disagreement": mean_pairwise_disagreement(predictions)}
    return {"ensemble_mutual_information": ensemble_mutual_information(predictions)}


def diversity_heatmap(result: EnsembleSearchResult, title: str) -> plt.Figure:
    """Pairwise mutual information -1/2 log(1 - rho^2) (regression) or disagreement
    (classification) between the distinct members."""
    members, predictions = _distinct_member_predictions(result)
    figure, axes = plt.subplots(figsize=(6, 5), layout="constrained")
    if result.task == "classification":
        matrix = pairwise_disagreement(predictions)
        np.fill_diagonal(matrix, np.nan)
        image = axes.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0)
        label = "disagreement (share of samples)"
    else:
        matrix = mutual_information_matrix(predictions)
        np.fill_diagonal(matrix, np.nan)  # a member's MI with itself is not information
        # Log colours: members with identical predictions sit at the cap (~13 nats)
        # and would otherwise flatten every other pair into one colour.
        pairs = matrix[np.isfinite(matrix)]
        floor = max(float(pairs.min()), 1e-3) if pairs.size else 1e-3
        ceiling = max(float(pairs.max()), 10 * floor) if pairs.size else 10 * floor
        image = axes.imshow(
            np.maximum(matrix, floor),
            cmap="viridis",
            norm=LogNorm(vmin=floor, vmax=ceiling),
        )
        label = "mutual information (nats)"
    labels = [f"trial {index}" for index in members]
    axes.set_xticks(range(len(members)), labels, rotation=90)
    axes.set_yticks(range(len(members)), labels)
    axes.set_title(title)
    figure.colorbar(image, ax=axes, label=label)
    return figure
