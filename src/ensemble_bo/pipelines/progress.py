"""A progress bar per search: what a quiet run shows while it searches (the
summary at its end is ensemble_bo.summary's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

from ensemble_bo.core.results import IterationRecord


@contextmanager
def progress_bar(
    budget: int, description: str
) -> Iterator[Callable[[IterationRecord], None]]:
    """Yield a search callback that moves a bar to the record's iteration."""
    with tqdm(total=budget, desc=description, unit="iter", dynamic_ncols=True) as bar:

        def on_iteration(record: IterationRecord) -> None:
            bar.set_postfix(
                ensemble=f"{record.ensemble_loss:.4f}",
                single=f"{record.best_single_loss:.4f}",
                size=record.ensemble_size,
                refresh=False,
            )
            # A selection stage repeats the last iteration: the bar does not move.
            bar.update(record.iteration + 1 - bar.n)

        yield on_iteration
