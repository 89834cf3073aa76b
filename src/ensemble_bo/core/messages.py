"""How error messages show the values they name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def plain(value):
    """A numpy scalar as the Python value, so messages read 'nan', not 'np.float64(nan)'."""
    return value.item() if isinstance(value, np.generic) else value


def examples(values: pd.Series, count: int = 3) -> list[Any]:
    """The first `count` distinct values, as messages show them."""
    return [plain(value) for value in values.drop_duplicates().head(count)]
