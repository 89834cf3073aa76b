"""Events of a run, published by the pipelines and heard by trackers (the tracking hook).

A search's node publishes each iteration as it ends (`IterationEnded`) and
where its trials are journaled (`SearchResumable`), the benchmark each finished
cell (`CellEnded`). Trackers subscribe for the span of
a run. Publishing with no subscriber does nothing, so nodes run the same with
or without MLflow.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ensemble_bo.core.results import IterationRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IterationEnded:
    """One iteration of the run's search; `metrics` are what a run logs at its step."""

    record: IterationRecord

    @property
    def step(self) -> int:
        return self.record.iteration

    @property
    def metrics(self) -> dict[str, float]:
        """The metrics logged at each step; NaN (no value yet) is left out."""
        record = self.record
        metrics = {
            "cv_loss_ensemble": record.ensemble_loss,
            "cv_loss_best_single": record.best_single_loss,
            "ensemble_size": float(record.ensemble_size),
            "acquisition_value": record.acquisition_value,
            "fit_seconds": record.fit_seconds,
            "trial_failed": float(record.status != "ok"),
            # x axis for a multi-fidelity run's curves: what it had spent
            "fidelity_spent": record.fidelity_spent,
            "ensemble_predict_seconds_per_1000": record.ensemble_predict_seconds,
        }
        return {name: value for name, value in metrics.items() if math.isfinite(value)}


@dataclass(frozen=True)
class CellEnded:
    """A benchmark cell's record (finished, failed, or reused from the store)."""

    record: Mapping[str, Any]
    reused: bool


@dataclass(frozen=True)
class SearchResumable:
    """A search records its trials in `journal` (a folder), which already holds
    `recorded` trials of an earlier, stopped run of the same search."""

    journal: str
    recorded: int


Event = IterationEnded | CellEnded | SearchResumable
Listener = Callable[[Event], None]
_listeners: list[Listener] = []


def subscribe(listener: Listener) -> None:
    _listeners.append(listener)


def unsubscribe(listener: Listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def publish(event: Event) -> None:
    """Hand `event` to every subscriber; a failing one is logged, not raised:
    a tracking hiccup must not stop a search."""
    for listener in list(_listeners):
        try:
            listener(event)
        except Exception:  # noqa: BLE001
            logger.exception("listener %r failed on %s", listener, type(event).__name__)


def publish_iteration(record: IterationRecord) -> None:
    """A search callback: publish the iteration."""
    publish(IterationEnded(record))
