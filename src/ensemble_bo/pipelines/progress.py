"""Per-iteration feedback of a search: a progress bar and metric log records.

The records go to the `ensemble_bo.iterations` logger with the metrics in
`record.metrics` and the iteration in `record.step`; the tracking hook turns
them into stepped MLflow metrics while the loop runs. Nodes stay free of
MLflow and run the same without it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

from ensemble_bo.core.strategies import IterationRecord

ITERATION_LOGGER = logging.getLogger("ensemble_bo.iterations")


def iteration_metrics(record: IterationRecord) -> dict[str, float]:
    """The metrics logged at each step; NaN (no value yet) is left out."""
    metrics = {
        "cv_loss_ensemble": record.ensemble_loss,
        "cv_loss_best_single": record.best_single_loss,
        "ensemble_size": float(record.ensemble_size),
        "acquisition_value": record.acquisition_value,
        "fit_seconds": record.fit_seconds,
        "trial_failed": float(record.status != "ok"),
    }
    return {name: value for name, value in metrics.items() if math.isfinite(value)}


@contextmanager
def search_feedback(
    budget: int, description: str
) -> Iterator[Callable[[IterationRecord], None]]:
    """Yield a callback that advances a progress bar and logs the iteration's metrics."""
    with tqdm(total=budget, desc=description, unit="iter", dynamic_ncols=True) as bar:

        def on_iteration(record: IterationRecord) -> None:
            metrics = iteration_metrics(record)
            bar.set_postfix(
                ensemble=f"{record.ensemble_loss:.4f}",
                single=f"{record.best_single_loss:.4f}",
                size=record.ensemble_size,
                refresh=False,
            )
            bar.update(1)
            ITERATION_LOGGER.debug(
                "iteration %d",
                record.iteration,
                extra={"metrics": metrics, "step": record.iteration},
            )

        yield on_iteration
