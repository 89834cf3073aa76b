"""Seeds for every random choice, derived from the run's one seed."""

from __future__ import annotations

import zlib

import numpy as np


def derive_seed(seed: int, purpose: str) -> int:
    """A 32-bit seed for `purpose`, stable across processes and Python versions.

    Distinct purposes (test split, folds, optimizer, models) get independent
    streams, so changing how one is used does not shift the others.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    sequence = np.random.SeedSequence([int(seed), zlib.crc32(purpose.encode())])
    return int(sequence.generate_state(1)[0])
