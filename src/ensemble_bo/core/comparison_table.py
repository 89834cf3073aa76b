"""Tables comparing methods across datasets, and markdown tables.

``comparison_table`` lays out the pairwise comparison of methods as ESMBO Tables 1-2
do: rows and columns sorted by expected rank, each cell the win frequency or the
Poisson-binomial probability of the row method over the column method, marked where
the Poisson-binomial or the sign test finds it significant. ``markdown_table`` writes
any table as GitHub markdown.

Pure pandas: no Kedro, no MLflow, no plotting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from ensemble_bo.core.comparison import (
    RANK_COLUMN,
    TiesMethod,
    expected_ranks,
    pairwise_sign_test,
    pb_significance_mark,
    poisson_binomial_matrix,
    sign_test_mark,
    win_frequency,
)

TABLE_LEGEND = (
    "'*' / '**': Poisson-binomial "
    "Pr(row > column) > 0.8 / > 0.9; '+' / '++': one-tailed sign-test p < 0.1 / "
    "< 0.05 that row beats column. Rows sorted by expected rank (lower is better)."
)


@dataclass(frozen=True)
class ComparisonTable:
    """Pairwise comparison of methods in the layout of ESMBO Tables 1-2.

    cells: (K, K) win frequency or PB probability, rows and columns sorted by
    expected rank; expected_rank: E[rank] in that order; pb_probability and
    sign_pvalue: the tests behind the marks, same order.
    """

    cells: pd.DataFrame
    expected_rank: pd.Series
    pb_probability: pd.DataFrame
    sign_pvalue: pd.DataFrame
    cell_kind: str

    def to_frame(self) -> pd.DataFrame:
        """Numeric table: the cells plus an E[rank] column (for CSV or MLflow)."""
        frame = self.cells.copy()
        frame[RANK_COLUMN] = self.expected_rank
        return frame

    def to_formatted_frame(self, decimals: int = 2) -> pd.DataFrame:
        """String table: 'value marks' per cell, '-' on the diagonal, then E[rank]."""
        methods = list(self.cells.index)
        formatted = pd.DataFrame("", index=self.cells.index, columns=self.cells.columns)
        for row in methods:
            for column in methods:
                if row == column:
                    formatted.loc[row, column] = "-"
                    continue
                marks = pb_significance_mark(
                    self.pb_probability.loc[row, column]
                ) + sign_test_mark(self.sign_pvalue.loc[row, column])
                value = f"{self.cells.loc[row, column]:.{decimals}f}"
                formatted.loc[row, column] = f"{value} {marks}".rstrip()
        formatted[RANK_COLUMN] = [f"{r:.{decimals}f}" for r in self.expected_rank]
        return formatted

    def to_markdown(self, decimals: int = 2) -> str:
        """Markdown table of `to_formatted_frame` with the legend below it."""
        frame = self.to_formatted_frame(decimals)
        kind = (
            "win frequency" if self.cell_kind == "win_frequency" else "PB probability"
        )
        legend = f"Cells: {kind} of row method over column method. {TABLE_LEGEND}"
        return markdown_table(frame, index_name="method") + "\n\n" + legend


def comparison_table(
    losses: pd.DataFrame,
    cell: Literal["win_frequency", "pb_probability"] = "win_frequency",
    pairwise_probabilities: Mapping[tuple[str, str], Sequence[float]] | None = None,
    ties: TiesMethod = "average",
) -> ComparisonTable:
    """Pairwise comparison table: rows sorted by E[rank], marks from PB and sign tests.

    losses: rows = datasets, columns = methods (lower is better).
    cell: what each cell holds, the win frequency of row over column (ESMBO
    Tables 1-2) or the PB probability Pr(row > column) (AB tables).
    pairwise_probabilities: per-dataset p_i for the PB test (see
    `poisson_binomial_matrix`); without them the PB test uses the per-dataset
    outcomes of `losses`.
    """
    if cell not in ("win_frequency", "pb_probability"):
        raise ValueError(
            f"cell must be 'win_frequency' or 'pb_probability', got {cell!r}"
        )
    ranks = expected_ranks(losses, ties)
    order = list(ranks.sort_values(kind="stable").index)
    pb = poisson_binomial_matrix(losses, pairwise_probabilities).loc[order, order]
    cells = win_frequency(losses).loc[order, order] if cell == "win_frequency" else pb
    return ComparisonTable(
        cells=cells,
        expected_rank=ranks.loc[order],
        pb_probability=pb,
        sign_pvalue=pairwise_sign_test(losses).loc[order, order],
        cell_kind=cell,
    )


def markdown_table(frame: pd.DataFrame, index_name: str | None = None) -> str:
    """A GitHub-style markdown table of `frame`, index as the first column.

    Written by hand: pandas' DataFrame.to_markdown needs `tabulate`, which is
    only a dev dependency of this project.
    """

    def escape(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    first = index_name if index_name is not None else (frame.index.name or "")
    header = [escape(first), *(escape(c) for c in frame.columns)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(frame.columns)) + "|",
    ]
    for label, row in frame.iterrows():
        lines.append(
            "| " + " | ".join([escape(label), *(escape(v) for v in row)]) + " |"
        )
    return "\n".join(lines)
