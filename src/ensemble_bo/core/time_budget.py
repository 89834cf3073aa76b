"""A search's wall-time budget (`time_budget`, seconds), beside its budget of trials,
and the one policy of what it cuts.

The search checks it between trials and stops once it is spent. Each trial's
request carries it as its deadline (core.trials.TrialRequest), and whatever
runs the trial caps the trial's time limit at what is left (`trial_limit`), so
a trial that would run past the end is cut like any trial past its time limit
(a failed trial), and a trial cut at the budget's end spends the budget
(`cut_trial`): the search proposes no more. The search's first trial, and
every trial of a multi-fidelity search's first bracket, whose top rung
brings the first model, carry no deadline (`deadline_for`): a search always
has a model to refit. A search therefore ends within one proposal's time of
its budget, or one trial's (bracket's) when that first one ends later. With
`max_trial_share`, every other trial is also cut at that share of the
budget.

The clock starts when the search starts, so the budget covers the start-up of
the process that evaluations run in (a few seconds: it imports scikit-learn),
the proposals and the trials, and it keeps back what the final model's fit
will take: after each trial the search sets the budget's `reserve` to its
ensemble's estimated final-fit seconds (`final_fit_factor` times the trial
seconds of its distinct members, core.refit.final_fit_factor), and the time
left is what remains after it; a trial may take the share of that which
leaves room for its own final fit, should it join the ensemble. The search
therefore stops, and cuts its trials, early enough for the final fit to end
near the budget's end. A resumed search counts the trials it replays from its
journal at the seconds they took when they were trained, so a stopped and
resumed search gets the budget once, not twice. The search's own
`search_seconds` are wall seconds of this search alone, replayed trials not
counted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from numbers import Real
from typing import NamedTuple

from ensemble_bo.core.trials import TrialResult


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


# max_trial_share's default: the share of the budget one trial may take, by
# whether the search trains on a sample of large data.
AUTO_SHARE = "auto"
# auto-sklearn's cap. On 100,000 rows and a 60 s budget the search without a
# cap trained 11 configurations, two random forests taking 42 s of it; capped
# at 0.1 it trained 22, to a lower test MSE (0.00520 against 0.00527), and at
# 0.2, 21 (benchmarks/results/scaling_rows.md).
LARGE_DATA_TRIAL_SHARE = 0.1
# On small data a cap of 0.1 lost regression cells at 10 s and 0.25 changed
# nothing there; without a cap, one SVM with a large C could hold a search of
# a few thousand rows from its 44th trial to the end of a 120 s budget
# (docs/results.md, "A cap on one trial's share").
SMALL_DATA_TRIAL_SHARE = 0.25


def check_trial_share(share: object) -> float | str | None:
    """`max_trial_share` as a float in (0, 1], "auto", or None (no cap)."""
    return AUTO_SHARE if share == AUTO_SHARE else _share(share)


def _share(share: object) -> float | None:
    if share is None:
        return None
    if not is_seconds(share) or share > 1:
        raise ValueError(
            "max_trial_share must be a number in (0, 1] (the most of the time "
            f"budget one trial may take, e.g. 0.1), {AUTO_SHARE} or null, "
            f"got {share!r}"
        )
    return float(share)


def effective_trial_share(share: float | str | None, sampled: bool) -> float | None:
    """The share of the budget one trial may take: `share` (checked by
    check_trial_share), where "auto" is LARGE_DATA_TRIAL_SHARE for a search
    on a `sampled` (large) dataset and SMALL_DATA_TRIAL_SHARE otherwise."""
    if share == AUTO_SHARE:
        return LARGE_DATA_TRIAL_SHARE if sampled else SMALL_DATA_TRIAL_SHARE
    return share


class TimeBudget:
    """The wall time a search may spend; `seconds=None` is no limit.

    `start()` starts the clock; `charge(s)` adds time spent elsewhere (a
    replayed trial's recorded seconds); `remaining()` is None without a limit.
    `trial_share` caps one trial at that share of `seconds` (`trial_cap`;
    auto-sklearn caps a run at a tenth), so that a few slow configurations
    cannot take a short budget. `final_fit_factor`: the final model's fit
    seconds per trial second of its distinct members (0: none kept back);
    `reserve_final_fit` keeps that much back from the time left. `clock`
    reads the time in seconds (a test's fake clock).
    """

    def __init__(
        self,
        seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        trial_share: float | None = None,
        final_fit_factor: float = 0.0,
    ) -> None:
        self.seconds = check_time_budget(seconds)
        self.trial_share = _share(trial_share)
        if not (math.isfinite(final_fit_factor) and final_fit_factor >= 0):
            raise ValueError(
                f"final_fit_factor must be finite and >= 0, got {final_fit_factor!r}"
            )
        self.final_fit_factor = float(final_fit_factor)
        self.clock = clock
        self._started: float | None = None
        self._charged = 0.0
        self._ended = False
        self.reserve = 0.0

    def start(self) -> None:
        self._started = self.clock()
        self._charged = 0.0
        self._ended = False

    @property
    def started(self) -> bool:
        return self._started is not None

    @property
    def trial_cap(self) -> float | None:
        """Seconds one trial may take (`trial_share` of the budget); None: no cap."""
        if self.seconds is None or self.trial_share is None:
            return None
        return self.trial_share * self.seconds

    def charge(self, seconds: float) -> None:
        self._charged += max(0.0, float(seconds))

    @property
    def charged(self) -> float:
        """Seconds charged since `start()`: time spent elsewhere, not on this clock."""
        return self._charged

    @property
    def elapsed(self) -> float:
        """Seconds spent since `start()`, charged time included (0 before it)."""
        if self._started is None:
            return self._charged
        return self.clock() - self._started + self._charged

    def reserve_final_fit(self, member_trial_seconds: float) -> None:
        """Keep back the final fit of an ensemble whose distinct members'
        trials took `member_trial_seconds` in all (NaN counts as 0)."""
        seconds = float(member_trial_seconds)
        self.reserve = self.final_fit_factor * seconds if seconds > 0 else 0.0

    def remaining(self) -> float | None:
        """Seconds left once the final fit is kept back (may be <= 0 once
        spent), or None without a limit."""
        if self.seconds is None:
            return None
        return self.seconds - self.elapsed - self.reserve

    def end(self) -> None:
        """Spend what is left of a limit now (`cut_trial`); no limit: nothing."""
        self._ended = self.seconds is not None

    def spent(self) -> bool:
        """Whether a limit is set and no time of it is left, or it was ended."""
        remaining = self.remaining()
        return self._ended or (remaining is not None and remaining <= 0)


def deadline_for(clock: TimeBudget, first: bool) -> TimeBudget | None:
    """The deadline of a trial's request: the search's budget, or None for a
    `first` trial (the search's first, or one of its first multi-fidelity
    bracket), which the budget never cuts."""
    return None if first or clock.seconds is None else clock


class TrialLimit(NamedTuple):
    """When a trial is cut, and why."""

    seconds: float | None  # None: never
    cut_by: str  # what a cut trial's error says
    budget_end: bool = False  # the limit is what the time budget has left


def trial_limit(time_limit: float | None, deadline: TimeBudget | None) -> TrialLimit:
    """One trial's limit: the smallest of `time_limit` (seconds per
    configuration), the `deadline`'s cap on one trial (its share of the
    budget) and what the deadline has left, taken when the trial starts, over
    1 + its final_fit_factor: a trial that joins the ensemble lengthens the
    final fit by that factor of its seconds.
    """
    limits = []
    if time_limit is not None:
        limits.append(
            TrialLimit(time_limit, f"exceeded the time limit of {time_limit:g} s")
        )
    if deadline is not None and deadline.trial_cap is not None:
        limits.append(
            TrialLimit(
                deadline.trial_cap,
                f"exceeded its share of the time budget ({deadline.trial_share:g} "
                f"x {deadline.seconds:g} s = {deadline.trial_cap:g} s)",
            )
        )
    remaining = None if deadline is None else deadline.remaining()
    if remaining is not None:
        kept = ""
        if deadline.final_fit_factor:
            # A trial that joins the ensemble adds its own final fit, factor
            # times its seconds: it may take the share of the time left that
            # leaves room for that.
            remaining /= 1 + deadline.final_fit_factor
            kept = (
                f" less the time kept for the final fit ({deadline.reserve:.1f} s, "
                "and this trial's own if it joins the ensemble)"
            )
        # A trial asked for with no time left is cut at once rather than run.
        limits.append(
            TrialLimit(
                max(remaining, 1e-3),
                f"was cut at the end of the time budget of {deadline.seconds:g} s"
                f"{kept}",
                budget_end=True,
            )
        )
    if not limits:
        return TrialLimit(None, "")
    return min(limits, key=lambda limit: limit.seconds)  # the first of equal limits


def cut_trial(
    limit: TrialLimit, deadline: TimeBudget | None, seconds: float
) -> TrialResult:
    """The failed trial of one cut at `limit` after `seconds`.

    A trial cut at the budget's end spends the budget (`TimeBudget.end`):
    what it leaves was kept for its own final fit, which a failed trial never
    needs, and the next trial would be cut too, after a new worker's start-up
    (the cut ends the process it ran in: 1.5-2.5 s each, outside any limit),
    so that a search ran seconds past its budget, a cut trial at a time.
    """
    if limit.budget_end and deadline is not None:
        deadline.end()
    return TrialResult(None, seconds, f"TimeoutError: fit {limit.cut_by}")


def cut_before_start(
    time_limit: float | None, deadline: TimeBudget | None
) -> TrialResult | None:
    """The failed trial of one whose deadline has passed, cut before it starts,
    or None: started, it would be cut at once, and the cut ends the process it
    ran in (a new worker takes 1.5-2.5 s; a multi-fidelity rung asks for
    several such trials after the budget ends)."""
    if deadline is None or not deadline.spent():
        return None
    return cut_trial(trial_limit(time_limit, deadline), deadline, 0.0)
