"""How error messages show the values they name."""

from __future__ import annotations

import numpy as np


def plain(value):
    """A numpy scalar as the Python value, so messages read 'nan', not 'np.float64(nan)'."""
    return value.item() if isinstance(value, np.generic) else value
