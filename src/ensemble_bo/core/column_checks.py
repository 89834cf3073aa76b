"""Columns that would mislead a search without a word, refused with what to do.

- Features: a date column, or a text column of identifiers or free text,
  would be encoded like labels, a category per value (`check_text_features`).
- A regression target: values too large for float64 to square and average,
  or a few values far enough from the rest to set its scale alone
  (`check_target_scale`); the search standardizes the target by its standard
  deviation.

Each message names the columns, or the rows and their values.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_datetime64_any_dtype, is_numeric_dtype

from ensemble_bo.core.messages import examples, plain

# A regression target is refused when a value lies more than this many
# interquartile ranges from its median. The target is standardized by its
# standard deviation, which such a value makes at least 1e6 / sqrt(n) IQRs: all
# the other values are then squeezed into a few thousandths of a unit or less,
# and the losses and test MSE (in those units) speak of the few values alone (a
# 1e12 typo in concrete, whose targets span 2-83, gave a test MSE of 0.0015).
# Heavy-tailed measurements stay far below it (the bundled targets: at most
# 13 IQRs, cpu_performance; incomes or prices: hundreds to thousands), while
# typos and sentinels of magnitude (1e9, 1e12) are far above it.
TARGET_OUTLIER_IQRS = 1e6
# At most this many distinct values are taken as categories, whatever share of
# the rows they are (a small table).
IDENTIFIER_MIN_VALUES = 20
# A text feature column with more than IDENTIFIER_MIN_VALUES distinct values
# that are at least this share of its rows is refused as identifier-like (or
# free text): nearly every row would get a category of its own (an ordinal code
# of its own, core.encoding), which no model can learn from, nor use for a
# value it has not seen.
IDENTIFIER_DISTINCT_SHARE = 0.9
# A date (optionally with a time) as text: 2021-03-04, 2021/3/4, 04.03.2021,
# 3/4/2021, 2021-03-04T10:30:00Z.
_DATE_TEXT = re.compile(
    r"^\s*(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4})"
    r"([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?\s*$"
)
# The rows and values a message names, at most.
_SHOWN_ROWS = 5


def _is_date_column(values: pd.Series) -> bool:
    """Dates: a datetime column, or text whose every value is a date (_DATE_TEXT)."""
    if is_datetime64_any_dtype(values):
        return True
    values = values.dropna()
    if is_numeric_dtype(values) or not len(values):
        return False
    text = values.astype(str)
    if not text.str.match(_DATE_TEXT).all():
        return False
    parsed = pd.to_datetime(text, errors="coerce", format="mixed")
    return bool(parsed.notna().all())


def check_text_features(features: pd.DataFrame, name: str = "dataset") -> None:
    """Refuse date and identifier-like columns, naming them, with what to do.

    Both would be encoded like labels, a category per value, without a
    word: a date column (text such as "2021-03-04", or datetimes) is refused
    rather than turned into numbers, since which numbers (days since a start,
    year, month, day of week) depends on what the dates mean; a text column
    with more than IDENTIFIER_MIN_VALUES distinct values making up at least
    IDENTIFIER_DISTINCT_SHARE of its values (identifiers such as "cust_000123",
    or free text) is refused rather than dropped, so that the model never
    silently sees other columns than the table's.
    """
    columns = [
        column
        for column in features.columns
        if not is_numeric_dtype(features[column]) or is_bool_dtype(features[column])
    ]
    dates = [column for column in columns if _is_date_column(features[column])]
    if dates:
        first = [str(plain(features[column].dropna().iloc[0])) for column in dates]
        raise ValueError(
            f"{name}: feature column(s) {dates} hold dates (e.g. {first}); as "
            "text, every date would be a category of its own, useless for a date "
            "not seen in training. "
            "Turn each into numbers (e.g. days since the first date; year, month "
            "and day of the week as columns), or drop it"
        )
    identifiers = {}
    for column in columns:
        values = features[column].dropna()
        distinct = values.nunique()
        if (
            distinct > IDENTIFIER_MIN_VALUES
            and distinct >= IDENTIFIER_DISTINCT_SHARE * len(values)
        ):
            identifiers[column] = distinct
    if identifiers:
        described = ", ".join(
            f"{column!r}: {distinct} distinct values in "
            f"{features[column].notna().sum()} rows, e.g. "
            f"{examples(features[column].dropna().astype(str))}"
            for column, distinct in identifiers.items()
        )
        raise ValueError(
            f"{name}: feature column(s) {list(identifiers)} look like identifiers "
            f"or free text ({described}); nearly every row would be a category "
            "of its own, which no model can learn from. Drop the "
            "column(s), or turn what they mean into a few numbers or categories"
        )


def _rows_and_values(numbers: np.ndarray, rows: np.ndarray) -> str:
    shown = rows[:_SHOWN_ROWS]
    more = f" and {rows.size - shown.size} more" if rows.size > shown.size else ""
    return f"row(s) {shown.tolist()}{more} (value(s) {numbers[shown].tolist()})"


def check_target_scale(numbers: np.ndarray, column: str) -> None:
    """Refuse a regression target standardizing cannot handle, naming the rows.

    numbers: the target's finite values, shape (n,); column: how messages name
    it. Refused: values too large for float64 to square and sum over n rows
    (the standard deviation would overflow), and values more than
    TARGET_OUTLIER_IQRS interquartile ranges from the median (the scale would
    be that of a few values). Where at least half the values are equal (no
    interquartile range), the range of the middle 98% is the spread; where
    that is zero too, there is no spread to compare with and nothing is refused.
    """
    # |y - mean| <= 2 max|y|, so n squared deviations stay finite below this.
    limit = math.sqrt(np.finfo(float).max / len(numbers)) / 2
    too_large = np.flatnonzero(np.abs(numbers) > limit)
    if too_large.size:
        raise ValueError(
            f"{column} has {too_large.size} value(s) beyond {limit:.3g} in "
            f"magnitude, too large for float64 to square and average over "
            f"{len(numbers)} rows: {_rows_and_values(numbers, too_large)}; rescale "
            "the column (divide it by a power of ten, or take its logarithm) or "
            "fix those rows"
        )
    median = float(np.median(numbers))
    for low, high, part in ((25, 75, "interquartile range"), (1, 99, "middle 98%")):
        q_low, q_high = np.percentile(numbers, [low, high])
        spread = float(q_high - q_low)
        if spread > 0:
            break
    else:
        return
    far = np.flatnonzero(np.abs(numbers - median) > TARGET_OUTLIER_IQRS * spread)
    if far.size:
        raise ValueError(
            f"{column} has {far.size} value(s) more than {TARGET_OUTLIER_IQRS:g} "
            f"times its spread ({part} {spread:.4g}) from its median ({median:.4g}): "
            f"{_rows_and_values(numbers, far)}. They would set the target's scale "
            "alone, and every loss would speak of them; fix or drop those rows, or "
            "take the target's logarithm if such values are real"
        )
