"""How feature columns become the numbers the models take.

Text, category and boolean columns are categorical. One with at most
`MAX_ONE_HOT_LEVELS` distinct values on the training part is one-hot encoded;
one with more is ordinal-coded: a single column of codes 0..L-1 in sorted
order of its values, so a column of many levels stays one column instead of
one per level. Histogram gradient boosting takes those code columns as
categories (its `categorical_features`, see zoo.make_model); the other
learners take the codes as numbers. Numeric columns pass through.

A value not seen in training is, at prediction, an all-zero one-hot row or a
missing (NaN) code, never an error; a missing value is a level of its own
under one-hot, and a missing code (which the models impute or split on, as
any missing value) under ordinal coding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype
from sklearn.compose import ColumnTransformer
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

# Columns with more distinct values than this are ordinal-coded, not one-hot
# encoded. At 10, three columns of 16 to 42 values are ordinal-coded in the
# Ames housing data and in adult, which lowered the test loss of both at equal
# budget (benchmarks/categorical_encoding.py, benchmarks/README.md), while a
# handful of values stays one-hot, which the learners without native
# categories take better than an arbitrary order of codes; every bundled
# dataset but adult is encoded exactly as by one-hot encoding alone.
MAX_ONE_HOT_LEVELS = 10
# Histogram gradient boosting takes at most max_bins (255 by default) categories
# per column; the rarest values beyond that many share one code.
MAX_ORDINAL_LEVELS = 255


def categorical_columns(features: pd.DataFrame) -> list[str]:
    """Columns that need encoding: every non-numeric (text, category, bool) column."""
    return [
        column
        for column in features.columns
        if not is_numeric_dtype(features[column]) or features[column].dtype == bool
    ]


def check_max_one_hot_levels(max_one_hot_levels: object) -> int:
    """`max_one_hot_levels` if it is an integer >= 1, else ValueError saying so."""
    if (
        isinstance(max_one_hot_levels, bool)
        or not isinstance(max_one_hot_levels, Integral)
        or max_one_hot_levels < 1
    ):
        raise ValueError(
            f"max_one_hot_levels must be an integer >= 1, got {max_one_hot_levels!r} "
            "(the most distinct values a categorical column may have to be one-hot "
            f"encoded, e.g. {MAX_ONE_HOT_LEVELS})"
        )
    return int(max_one_hot_levels)


@dataclass(frozen=True)
class FeatureEncoding:
    """Which categorical columns are one-hot encoded and which ordinal-coded.

    The encoded matrix holds the ordinal codes first (one column each, in
    `ordinal` order), then the one-hot columns, then the numeric columns, so
    the code columns are the first `len(ordinal)` whatever levels the one-hot
    columns have (`categorical_features`).
    """

    one_hot: tuple[str, ...] = ()
    ordinal: tuple[str, ...] = ()

    @classmethod
    def choose(
        cls,
        features: pd.DataFrame,
        categorical: Sequence[str],
        max_one_hot_levels: int = MAX_ONE_HOT_LEVELS,
    ) -> FeatureEncoding:
        """The encoding of `categorical` columns by their distinct values in `features`.

        Missing values are not counted as a value.
        """
        limit = check_max_one_hot_levels(max_one_hot_levels)
        levels = {column: features[column].nunique() for column in categorical}
        return cls(
            one_hot=tuple(column for column in categorical if levels[column] <= limit),
            ordinal=tuple(column for column in categorical if levels[column] > limit),
        )

    @property
    def categorical_features(self) -> tuple[int, ...]:
        """Indices of the encoded matrix's columns that hold category codes."""
        return tuple(range(len(self.ordinal)))

    def encoder(self) -> ColumnTransformer:
        """The unfitted encoder of raw feature frames (see the class docstring)."""
        return ColumnTransformer(
            [
                (
                    "ordinal",
                    OrdinalEncoder(
                        handle_unknown="use_encoded_value",
                        unknown_value=np.nan,
                        max_categories=MAX_ORDINAL_LEVELS,
                    ),
                    list(self.ordinal),
                ),
                (
                    "one_hot",
                    OneHotEncoder(handle_unknown="ignore", sparse_output=False),
                    list(self.one_hot),
                ),
            ],
            remainder="passthrough",
            verbose_feature_names_out=False,
        )
