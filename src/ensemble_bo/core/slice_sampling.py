"""Univariate slice sampling (Neal 2003) applied coordinate-wise to a log-density on R^k.

Neal, R. M. (2003), "Slice sampling", Ann. Statist. 31(3): stepping-out with a limit of
``m = max_steps_out`` steps (Fig. 3) and the shrinkage procedure (Fig. 5). With stepping
out (unlike doubling) no extra acceptance test is needed, so every update leaves the
target invariant for any ``widths`` and ``m``; ``widths`` only affect efficiency.

Coordinate-wise rather than along random directions because

* the targets here (GP hyperparameters ``[log amp, log ls..., log noise, mean]``) mix
  log-scales with a location parameter, so one width per coordinate is meaningful while
  one width for a random direction is not;
* their support is an axis-aligned box: stepping out along an axis stops at the first
  ``-inf`` wall, a random direction hits a corner's walls at skewed angles;
* a move along one coordinate lets a caching log-density reuse work (a new GP mean needs
  no new Cholesky factor, a new amplitude or noise no new distance matrix);
* it is what Spearmint (Snoek et al. 2012) does for the length scales.

The price is slower mixing along strongly correlated directions, which a few extra
sweeps (``thin``) buy back for the low-dimensional GP posteriors this is used for.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["slice_sample"]

# Safety net for the shrinkage loop: the interval halves on average per rejection, so 200
# rejections shrink it by ~2^-200; only a log-density that is not a function of x (or
# is discontinuous exactly at the current point) gets here. The chain then stays put.
_MAX_SHRINKS = 200


def _validated_count(value: int, name: str, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def slice_sample(
    log_density: Callable[[np.ndarray], float],
    x0: np.ndarray,
    rng: np.random.Generator,
    n_samples: int,
    burn_in: int = 0,
    thin: int = 1,
    widths: float | np.ndarray = 1.0,
    max_steps_out: int = 32,
) -> np.ndarray:
    """Draw ``n_samples`` states (n_samples, k) of a Markov chain targeting exp(log_density).

    ``log_density`` maps x (k,) to a float (unnormalised; ``-inf`` outside the support,
    NaN is treated as ``-inf``); it receives a fresh copy each call. ``x0`` (k,) is the
    start and must have a finite log-density. One sweep updates every coordinate once, in
    order, by a univariate slice-sampling step with initial interval width ``widths[i]``
    (scalar or (k,)) and at most ``max_steps_out`` steps of stepping out. The first
    ``burn_in`` sweeps are discarded, then the state after every ``thin``-th sweep is
    kept. Deterministic for a given ``rng`` state.
    """
    n_samples = _validated_count(n_samples, "n_samples", 1)
    burn_in = _validated_count(burn_in, "burn_in", 0)
    thin = _validated_count(thin, "thin", 1)
    max_steps_out = _validated_count(max_steps_out, "max_steps_out", 0)

    x = np.array(x0, dtype=float).reshape(-1)
    k = x.size
    if k == 0:
        raise ValueError("x0 must contain at least one coordinate")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"x0 must be finite, got {x}")
    try:
        w = np.broadcast_to(np.asarray(widths, dtype=float), (k,)).copy()
    except ValueError:
        raise ValueError(
            f"widths must be a scalar or have shape ({k},), got shape "
            f"{np.shape(widths)}"
        ) from None
    if not (np.all(np.isfinite(w)) and np.all(w > 0)):
        raise ValueError(f"widths must be finite and > 0, got {w}")

    def logp(z: np.ndarray) -> float:
        value = float(log_density(z.copy()))
        if math.isnan(value):
            return -math.inf
        if value == math.inf:
            raise ValueError(f"log_density returned +inf at {z}")
        return value

    fx = logp(x)
    if not math.isfinite(fx):
        raise ValueError(
            f"log_density(x0) must be finite to start the chain, got {fx} at x0={x}"
        )

    out = np.empty((n_samples, k))
    kept = 0
    for sweep in range(burn_in + n_samples * thin):
        for i in range(k):
            fx = _update_coordinate(logp, x, fx, i, w[i], max_steps_out, rng)
        if sweep >= burn_in and (sweep - burn_in + 1) % thin == 0:
            out[kept] = x
            kept += 1
    return out


def _update_coordinate(
    logp: Callable[[np.ndarray], float],
    x: np.ndarray,
    fx: float,
    i: int,
    w: float,
    m: int,
    rng: np.random.Generator,
) -> float:
    """One slice-sampling update of x[i] in place; returns the new log-density."""
    x0 = x[i]
    # slice level log y = log f(x0) + log U = log f(x0) - Exp(1)
    level = fx - rng.standard_exponential()
    z = x.copy()

    def f_at(t: float) -> float:
        z[i] = t
        return logp(z)

    # stepping out (Neal 2003, Fig. 3): randomly placed interval, at most m steps in all
    left = x0 - w * rng.uniform()
    right = left + w
    j = math.floor(m * rng.uniform())
    steps_right = (m - 1) - j
    while j > 0 and level < f_at(left):
        left -= w
        j -= 1
    while steps_right > 0 and level < f_at(right):
        right += w
        steps_right -= 1

    # shrinkage (Neal 2003, Fig. 5)
    for _ in range(_MAX_SHRINKS):
        t = left + rng.uniform() * (right - left)
        ft = f_at(t)
        if level < ft:
            x[i] = t
            return ft
        if t < x0:
            left = t
        else:
            right = t
        if not left < right:
            break
    return fx
