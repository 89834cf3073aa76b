"""A search's wall-time budget (`time_budget`, seconds), beside its budget of trials.

The search checks it between trials and stops once it is spent; the evaluator
caps each trial's time limit at what is left, so a trial that would run past
the end is cut like any trial past its time limit (a failed trial). A search
therefore ends within one proposal's time of its budget, or one trial's when
its first trial (never cut, so that there is a model to refit) ends later. A
multi-fidelity search's first model comes at the end of its first bracket, so
no trial of that bracket is cut (`not_cutting`).

The clock starts when the search starts, so the budget covers the start-up of
the process that evaluations run in (a few seconds: it imports scikit-learn),
the proposals and the trials; it ends before the refit, which is not counted. A resumed search counts the trials it replays
from its journal at the seconds they took when they were trained, so a stopped
and resumed search gets the budget once, not twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from numbers import Real


def is_seconds(value: object) -> bool:
    """Whether `value` is a positive finite number of seconds (a bool is not)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, Real)
        and math.isfinite(value)
        and value > 0
    )


def check_time_budget(seconds: object) -> float | None:
    """`seconds` as a positive finite float, or None (no wall-time budget)."""
    if seconds is None:
        return None
    if not is_seconds(seconds):
        raise ValueError(
            "time_budget must be a positive finite number of seconds or null, "
            f"got {seconds!r}"
        )
    return float(seconds)


class TimeBudget:
    """The wall time a search may spend; `seconds=None` is no limit.

    `start()` starts the clock; `charge(s)` adds time spent elsewhere (a
    replayed trial's recorded seconds); `remaining()` is None without a limit.
    `clock` reads the time in seconds (a test's fake clock).
    """

    def __init__(
        self,
        seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = check_time_budget(seconds)
        self.clock = clock
        self._started: float | None = None
        self._charged = 0.0
        self.cuts_held = False

    @contextmanager
    def not_cutting(self) -> Iterator[None]:
        """Trials started inside are not cut at the end of the budget (its clock
        runs on): a multi-fidelity search's first bracket, which its first
        full-fidelity model needs."""
        held, self.cuts_held = self.cuts_held, True
        try:
            yield
        finally:
            self.cuts_held = held

    def start(self) -> None:
        self._started = self.clock()
        self._charged = 0.0

    @property
    def started(self) -> bool:
        return self._started is not None

    def charge(self, seconds: float) -> None:
        self._charged += max(0.0, float(seconds))

    @property
    def elapsed(self) -> float:
        """Seconds spent since `start()`, charged time included (0 before it)."""
        if self._started is None:
            return self._charged
        return self.clock() - self._started + self._charged

    def remaining(self) -> float | None:
        """Seconds left (may be <= 0 once spent), or None without a limit."""
        return None if self.seconds is None else self.seconds - self.elapsed

    def spent(self) -> bool:
        """Whether a limit is set and no time of it is left."""
        remaining = self.remaining()
        return remaining is not None and remaining <= 0
