"""Tables and figures of a finished search (no Kedro, no MLflow)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # runs headless: in CI, under Kedro, on a scheduler

import matplotlib.pyplot as plt
import pandas as pd

from ensemble_bo.core.strategies import EnsembleSearchResult


def trial_history(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per trial: parameters, status, CV losses, EI, its weight in the final ensemble."""
    frame = result.pool.to_frame()
    iterations = pd.DataFrame(
        [
            {
                "trial": record.trial,
                "iteration": record.iteration,
                "slot": record.slot,
                "action": record.action,
                "acquisition_value": record.acquisition_value,
                "cv_loss_ensemble_after": record.ensemble_loss,
            }
            for record in result.history
        ]
    )
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
