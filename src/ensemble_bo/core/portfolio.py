"""Portfolios: short, ordered lists of configurations of a space that do well
across datasets, which a search evaluates first (its optimizer's initial design
starts with them, core.optimizer.ModelBasedOptimizer).

A portfolio is chosen by greedy portfolio construction (auto-sklearn 2.0,
Feurer et al. 2022; TabRepo, Salinas and Erickson 2024): given the CV losses of
candidate configurations on several datasets, it repeatedly adds the candidate
that most lowers the mean over datasets of the best normalized loss among the
chosen ones. Cost enters as a cap: candidates whose evaluation took longer than
`max_seconds` on some dataset are never chosen, so that the first trials of a
short budget stay short. benchmarks/build_portfolio.py builds the shipped
portfolios (conf/base/parameters_portfolios.yml) with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ensemble_bo.core.optimizer import initial_suggestion
from ensemble_bo.core.space import SearchSpace


def normalized_losses(losses: np.ndarray) -> np.ndarray:
    """(candidates, datasets) CV losses -> each dataset's losses rescaled so that
    its best candidate is 0 and its median candidate 1, clipped to [0, 1].

    A NaN loss (a failed or timed-out evaluation) counts as 1, no better than
    the median. Rescaling makes datasets of different difficulty count alike;
    clipping at the median keeps a few terrible candidates from deciding the
    scale (TabRepo's normalized error). A dataset whose median is its best
    gives 0 to every candidate at least as good and 1 to the others.
    """
    losses = np.asarray(losses, dtype=float)
    if losses.ndim != 2 or losses.shape[0] < 1:
        raise ValueError(
            f"losses must be a (candidates, datasets) matrix, got shape {losses.shape}"
        )
    best = np.nanmin(losses, axis=0)
    median = np.nanmedian(losses, axis=0)
    spread = median - best
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(
            spread > 0,
            (losses - best) / np.where(spread > 0, spread, 1.0),
            (losses > best).astype(float),
        )
    return np.clip(np.nan_to_num(scaled, nan=1.0), 0.0, 1.0)


def greedy_portfolio(
    normalized: np.ndarray,
    size: int,
    seconds: np.ndarray | None = None,
    max_seconds: float | None = None,
) -> list[int]:
    """Indices of the chosen candidates, in the order chosen.

    normalized: (candidates, datasets) normalized losses (`normalized_losses`);
    seconds: the same shape, each evaluation's time; a candidate over
    `max_seconds` on any dataset (or with no time) is left out. Each step adds
    the candidate that most lowers the mean over datasets of the best loss among
    the chosen; ties go to the cheaper candidate (total seconds), then to the
    lower index. Stops early when no allowed candidate is left.
    """
    normalized = np.asarray(normalized, dtype=float)
    if int(size) != size or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    allowed = np.ones(len(normalized), dtype=bool)
    total = np.zeros(len(normalized))
    if seconds is not None:
        seconds = np.asarray(seconds, dtype=float)
        if seconds.shape != normalized.shape:
            raise ValueError(
                f"seconds has shape {seconds.shape}, losses {normalized.shape}"
            )
        total = np.nansum(seconds, axis=1)
        if max_seconds is not None:
            allowed = np.all(np.nan_to_num(seconds, nan=np.inf) <= max_seconds, axis=1)
    chosen: list[int] = []
    best_so_far = np.ones(normalized.shape[1])
    for _ in range(int(size)):
        candidates = np.flatnonzero(allowed)
        if len(candidates) == 0:
            break
        scores = np.minimum(best_so_far, normalized[candidates]).mean(axis=1)
        # lexsort: the last key is the primary one.
        pick = int(candidates[np.lexsort((candidates, total[candidates], scores))[0]])
        chosen.append(pick)
        allowed[pick] = False
        best_so_far = np.minimum(best_so_far, normalized[pick])
    return chosen


def best_of_first(normalized: np.ndarray, chosen: Sequence[int]) -> np.ndarray:
    """(len(chosen), datasets): row k is each dataset's best normalized loss
    among the first k + 1 chosen candidates."""
    rows = np.asarray(normalized, dtype=float)[list(chosen)]
    return np.minimum.accumulate(rows, axis=0)


def check_portfolios(
    portfolios: Any, spaces: Mapping[str, SearchSpace], key: str = "portfolios"
) -> dict[str, list[dict[str, Any]]]:
    """`portfolios` (the parameter `key`): each entry a model of `models` and
    a list of its space's configurations; returns them as plain lists of dicts."""
    if not isinstance(portfolios, Mapping):
        raise ValueError(
            f"{key} must map a model of `models` to a list of its "
            f"configurations, got {portfolios!r}"
        )
    checked = {}
    for model, configs in portfolios.items():
        if model not in spaces:
            raise ValueError(
                f"{key}.{model}: {model!r} is not a model of `models`; "
                f"available: {sorted(spaces)}"
            )
        if not isinstance(configs, Sequence) or isinstance(configs, str):
            raise ValueError(
                f"{key}.{model} must be a list of configurations, got {configs!r}"
            )
        for index, config in enumerate(configs):
            if not isinstance(config, Mapping):
                raise ValueError(
                    f"{key}.{model}[{index}] must be a configuration (a "
                    f"mapping of its parameters), got {config!r}"
                )
            try:
                initial_suggestion(spaces[model], config, index)
            except ValueError as error:
                raise ValueError(
                    f"{key}.{model}: {error}; rebuild the portfolio with "
                    "benchmarks/build_portfolio.py after changing the space"
                ) from None
        checked[str(model)] = [dict(config) for config in configs]
    return checked
