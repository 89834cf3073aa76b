"""Figures for comparing methods across datasets (no Kedro, no MLflow)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

_ROW_HEIGHT = 0.3  # vertical gap between two method labels on one side
_CLIQUE_GAP = 0.12  # vertical gap between two clique bars


def nonsignificant_groups(
    expected_ranks: pd.Series, critical_difference: float
) -> list[list[str]]:
    """Maximal runs of methods (sorted by rank) whose ranks differ by less than the CD.

    Each group has at least two methods and is not contained in another group;
    these are the bars of a critical difference diagram (Demsar 2006, Fig. 1).
    """
    ranks = expected_ranks.sort_values(kind="stable")
    values = ranks.to_numpy()
    names = list(ranks.index)
    groups: list[list[str]] = []
    last_end = -1
    for start in range(len(values)):
        end = start
        while end + 1 < len(values) and values[end + 1] - values[start] < (
            critical_difference
        ):
            end += 1
        if end > start and end > last_end:  # longer than one, not inside the last
            groups.append(names[start : end + 1])
            last_end = end
    return groups


def _validate(expected_ranks: pd.Series, critical_difference: float) -> pd.Series:
    if not isinstance(expected_ranks, pd.Series):
        raise ValueError(
            f"expected_ranks must be a pandas Series, got {type(expected_ranks).__name__}"
        )
    if len(expected_ranks) < 2:
        raise ValueError(
            f"need at least 2 methods, got {len(expected_ranks)}: "
            f"{list(expected_ranks.index)}"
        )
    if expected_ranks.index.has_duplicates:
        duplicated = list(expected_ranks.index[expected_ranks.index.duplicated()])
        raise ValueError(f"duplicate method names in expected_ranks: {duplicated}")
    values = pd.to_numeric(expected_ranks, errors="coerce").astype(float)
    bad = values[~np.isfinite(values.to_numpy())]
    if len(bad):
        raise ValueError(
            f"expected rank of {bad.index[0]!r} is not a finite number: "
            f"{expected_ranks[bad.index[0]]!r}"
        )
    if not (math.isfinite(critical_difference) and critical_difference > 0):
        raise ValueError(
            f"critical_difference must be a finite number > 0, got {critical_difference!r}"
        )
    return values


def critical_difference_diagram(
    expected_ranks: pd.Series, critical_difference: float, title: str = ""
) -> Figure:
    """Demsar (2006) critical difference diagram of methods' average ranks.

    A rank axis (1 = best, on the left); the better half of the methods is named
    on the left, the rest on the right, each joined to its rank by a line. Thick
    bars under the axis join groups of methods whose ranks differ by less than
    `critical_difference` (not significantly different); the CD itself is drawn
    as a bar above the axis. Returns a Figure on the Agg canvas (no pyplot state).
    """
    ranks = _validate(expected_ranks, critical_difference).sort_values(kind="stable")
    names, values = list(ranks.index), ranks.to_numpy()
    k = len(names)
    low = min(1.0, math.floor(values.min()))
    high = max(float(k), math.ceil(values.max()))
    groups = nonsignificant_groups(ranks, critical_difference)

    n_left = math.ceil(k / 2)
    label_top = -(0.35 + _CLIQUE_GAP * len(groups) + 0.15)
    n_rows = max(n_left, k - n_left)
    bottom = label_top - _ROW_HEIGHT * (n_rows - 1) - 0.3
    span = high - low
    margin = 0.25 * span + 0.5  # room for the names beside the axis

    figure = Figure(figsize=(8.0, 1.6 + 0.45 * n_rows + 0.15 * len(groups)))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_xlim(low - margin, high + margin)
    axes.set_ylim(bottom, 1.0)
    axes.axis("off")
    if title:
        axes.set_title(title)

    # rank axis with integer ticks
    axes.plot([low, high], [0, 0], color="black", linewidth=1)
    for tick in range(int(low), int(high) + 1):
        axes.plot([tick, tick], [0, 0.08], color="black", linewidth=1)
        axes.text(tick, 0.12, str(tick), ha="center", va="bottom", fontsize=9)

    # the critical difference, above the axis at the best end
    cd_y = 0.6
    axes.plot([low, low + critical_difference], [cd_y, cd_y], color="black")
    for x in (low, low + critical_difference):
        axes.plot([x, x], [cd_y - 0.05, cd_y + 0.05], color="black")
    axes.text(
        low + critical_difference / 2,
        cd_y + 0.08,
        f"CD = {critical_difference:.2f}",
        ha="center",
        va="bottom",
        fontsize=9,
    )

    # groups of methods that are not significantly different
    for index, group in enumerate(groups):
        y = -0.25 - _CLIQUE_GAP * index
        start, end = ranks[group[0]], ranks[group[-1]]
        axes.plot([start - 0.03, end + 0.03], [y, y], color="black", linewidth=3)

    # method names: best half on the left (best nearest the axis), rest on the right
    for row, (name, value) in enumerate(zip(names[:n_left], values[:n_left])):
        y = label_top - _ROW_HEIGHT * row
        axes.plot([value, value, low - 0.1], [0, y, y], color="gray", linewidth=1)
        axes.text(low - 0.15, y, name, ha="right", va="center", fontsize=9)
    right = list(zip(names[n_left:], values[n_left:]))[::-1]  # worst nearest the axis
    for row, (name, value) in enumerate(right):
        y = label_top - _ROW_HEIGHT * row
        axes.plot([value, value, high + 0.1], [0, y, y], color="gray", linewidth=1)
        axes.text(high + 0.15, y, name, ha="left", va="center", fontsize=9)

    figure.tight_layout()
    return figure
