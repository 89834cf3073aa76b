"""A progress bar per search: what a quiet run shows while it searches (the
summary at its end is ensemble_bo.summary's)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

from ensemble_bo.core.results import IterationRecord


@contextmanager
def progress_bar(
    budget: float,
    description: str,
    time_budget: float | None = None,
    multi_fidelity: bool = False,
) -> Iterator[Callable[[IterationRecord], None]]:
    """Yield a search callback that moves a bar to the record's iteration
    (`multi_fidelity`: to the full-fidelity equivalents spent, which its
    budget counts).

    With a `time_budget` (seconds) the bar counts its seconds instead, and
    the trials so far go next to the losses: whichever budget ends first
    ends the search, and a budget of trials set high to let the time decide
    would leave a bar of trials near empty.
    """
    total, unit = (budget, "iter") if time_budget is None else (time_budget, "s")
    if time_budget is None and multi_fidelity:
        unit = "equiv"  # full-fidelity equivalents
    start = time.monotonic()
    with tqdm(total=total, desc=description, unit=unit, dynamic_ncols=True) as bar:

        def on_iteration(record: IterationRecord) -> None:
            trials = {} if time_budget is None else {"trials": record.iteration + 1}
            bar.set_postfix(
                ensemble=f"{record.ensemble_loss:.4f}",
                single=f"{record.best_single_loss:.4f}",
                size=record.ensemble_size,
                **trials,
                refresh=False,
            )
            # A selection stage repeats the last iteration: the bar does not move.
            if time_budget is not None:
                done = round(min(time.monotonic() - start, time_budget), 1)
            elif multi_fidelity:
                done = round(min(record.fidelity_spent, budget), 2)
            else:
                done = record.iteration + 1
            bar.update(max(0, done - bar.n))

        yield on_iteration
