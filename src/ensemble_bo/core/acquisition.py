"""Acquisition functions for minimization and their maximization over [0, 1]^d.

Expected improvement (plain, log, and integrated over GP hyperparameter samples as in
Snoek et al. 2012) and the lower confidence bound.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize
from scipy.special import erfcx, ndtr
from scipy.stats import qmc

__all__ = [
    "expected_improvement",
    "expected_improvement_and_partials",
    "integrated_expected_improvement",
    "integrated_expected_improvement_and_partials",
    "log_expected_improvement",
    "log_expected_improvement_and_partials",
    "log_integrated_expected_improvement",
    "log_integrated_expected_improvement_and_partials",
    "lower_confidence_bound",
    "maximize_acquisition",
]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_HALF_LOG_PI_OVER_2 = 0.5 * math.log(math.pi / 2.0)
# Below this z, 1 - |z| sqrt(pi/2) erfcx(|z|/sqrt2) (~1/z^2) loses eps*z^2 relative accuracy
# to cancellation while the 4-term asymptotic series errs by ~945/z^8: they balance near 75.
_Z_ASYMPTOTIC = -75.0
# Step (in unit-cube coordinates) of the central-difference gradient in maximize_acquisition.
_FD_STEP = 1e-6


def _broadcast(mean, std, best) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean, std, best = np.broadcast_arrays(
        np.asarray(mean, dtype=float),
        np.asarray(std, dtype=float),
        np.asarray(best, dtype=float),
    )
    if np.any(std < 0):
        raise ValueError("std must be >= 0")
    return mean, std, best


def _z_scores(
    improvement: np.ndarray, std: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """z = improvement / std (1-D) on the mask where it is finite; elsewhere the caller
    uses the std == 0 limit max(improvement, 0), which is also right when std underflows."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        z = improvement / std
    pos = (std > 0) & np.isfinite(z)
    return z[pos], pos


def _log_h(z: np.ndarray) -> np.ndarray:
    """log(phi(z) + z Phi(z)) for any finite z, stable for z << 0 (Ament et al. 2023)."""
    z = np.asarray(z, dtype=float)
    out = np.empty_like(z)
    # |z| > ~1e154 overflows z*z: the limits (log h -> -inf or log z) are still right
    with np.errstate(over="ignore", divide="ignore"):
        _log_h_into(z, out)
    return out


def _log_h_into(z: np.ndarray, out: np.ndarray) -> None:
    """Fill out (same shape as z) with log h(z), one branch per z range."""
    hi = z > -1.0
    zh = z[hi]
    out[hi] = np.log(np.exp(-0.5 * zh * zh) * _INV_SQRT_2PI + zh * ndtr(zh))
    zl = z[~hi]
    out[~hi] = -0.5 * zl * zl - _HALF_LOG_2PI + _log_h_over_phi_tail(zl)


def _log_h_over_phi_tail(z: np.ndarray) -> np.ndarray:
    """log(h(z) / phi(z)) = log(1 - |z| R(z)) for z <= -1 (1-D), with the Mills ratio
    R(z) = Phi(z) / phi(z) = sqrt(pi/2) erfcx(-z/sqrt2)."""
    out = np.empty_like(z)
    mid = z > _Z_ASYMPTOTIC
    zm = z[mid]
    # log1mexp of x = log(|z| R(z)), a value in (-inf, 0)
    x = np.log(erfcx(-zm / math.sqrt(2.0)) * -zm) + _HALF_LOG_PI_OVER_2
    out[mid] = np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
    zl = z[~mid]
    # 1 - |z| sqrt(pi/2) erfcx(|z|/sqrt2) = w (1 - 3w + 15w^2 - 105w^3 + ...), w = 1/z^2
    w = 1.0 / (zl * zl)
    out[~mid] = np.log(w) + np.log1p(w * (-3.0 + w * (15.0 - 105.0 * w)))
    return out


def _log_h_and_ratios(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log h(z), Phi(z) / h(z) and phi(z) / h(z) for finite z (1-D), stable for z << 0.

    h' = Phi, so d log h / dz = Phi / h; and h - z Phi = phi. In the tail h, phi and
    Phi all underflow while the ratios grow like |z| and z^2: take phi / h from
    log(h / phi), then Phi / h = R(z) phi / h with the Mills ratio R = Phi / phi.
    """
    log_h = np.empty_like(z)
    cdf_ratio = np.empty_like(z)
    pdf_ratio = np.empty_like(z)
    hi = z > -1.0
    zh = z[hi]
    with np.errstate(over="ignore"):  # z*z overflow for z > ~1e154: phi -> 0
        pdf = np.exp(-0.5 * zh * zh) * _INV_SQRT_2PI
    cdf = ndtr(zh)
    h = pdf + zh * cdf  # >= h(-1) > 0.08 here: no cancellation
    log_h[hi] = np.log(h)
    cdf_ratio[hi] = cdf / h
    pdf_ratio[hi] = pdf / h
    zl = z[~hi]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        # z < ~-1e154: z*z overflows and the ratios are inf or NaN; callers keep
        # only finite gradients
        log_h_over_phi = _log_h_over_phi_tail(zl)
        log_h[~hi] = -0.5 * zl * zl - _HALF_LOG_2PI + log_h_over_phi
        pdf_ratio[~hi] = np.exp(-log_h_over_phi)
        cdf_ratio[~hi] = (
            math.sqrt(math.pi / 2.0) * erfcx(-zl / math.sqrt(2.0)) * pdf_ratio[~hi]
        )
    return log_h, cdf_ratio, pdf_ratio


def expected_improvement(mean, std, best) -> np.ndarray:
    """EI for minimization, broadcast over mean, std (>= 0) and best.

    ``std * (z Phi(z) + phi(z))`` with ``z = (best - mean) / std``; ``max(best - mean, 0)``
    where ``std == 0``.
    """
    mean, std, best = _broadcast(mean, std, best)
    improvement = best - mean
    out = np.array(np.maximum(improvement, 0.0))
    z, pos = _z_scores(improvement, std)
    h = np.empty_like(z)
    # phi + z Phi cancels catastrophically for z << 0: use the stable log form there
    direct = z > -1.0
    zd = z[direct]
    with np.errstate(over="ignore"):  # z*z overflow for z > ~1e154: phi -> 0, h -> z
        h[direct] = np.exp(-0.5 * zd * zd) * _INV_SQRT_2PI + zd * ndtr(zd)
    h[~direct] = np.exp(_log_h(z[~direct]))
    out[pos] = std[pos] * h
    return out


def log_expected_improvement(mean, std, best) -> np.ndarray:
    """log EI for minimization (broadcast), finite for z = (best - mean) / std down to -1e150.

    ``std == 0`` gives ``log(max(best - mean, 0))`` (``-inf`` without improvement).
    """
    mean, std, best = _broadcast(mean, std, best)
    improvement = best - mean
    z, pos = _z_scores(improvement, std)
    with np.errstate(divide="ignore"):
        out = np.array(np.log(np.maximum(improvement, 0.0)))
    out[pos] = np.log(std[pos]) + _log_h(z)
    return out


def expected_improvement_and_partials(
    mean, std, best
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """EI (as :func:`expected_improvement`) and its partial derivatives, all broadcast.

    Returns (EI, dEI/dmean, dEI/dstd) = (EI, -Phi(z), phi(z)); where ``std == 0``
    (-1 or 0, 0): the derivatives of ``max(best - mean, 0)``, with the limit phi -> 0.
    """
    mean, std, best = _broadcast(mean, std, best)
    improvement = best - mean
    d_mean = -(improvement > 0.0).astype(float)
    d_std = np.zeros_like(d_mean)
    z, pos = _z_scores(improvement, std)
    d_mean[pos] = -ndtr(z)
    with np.errstate(over="ignore"):  # z*z overflow for |z| > ~1e154: phi -> 0
        d_std[pos] = np.exp(-0.5 * z * z) * _INV_SQRT_2PI
    return expected_improvement(mean, std, best), d_mean, d_std


def log_expected_improvement_and_partials(
    mean, std, best
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log EI (as :func:`log_expected_improvement`) and its partials, all broadcast.

    With ``log EI = log std + log h(z)`` and ``h' = Phi``: d/dmean = -(Phi/h)(z) / std,
    d/dstd = (phi/h)(z) / std, both finite far into the tail (they grow like |z|/std
    and z^2/std). Where ``std == 0``: (-1/(best - mean), 0) with improvement, else (0, 0).
    """
    mean, std, best = _broadcast(mean, std, best)
    improvement = best - mean
    with np.errstate(divide="ignore"):
        log_ei = np.array(np.log(np.maximum(improvement, 0.0)))
        d_mean = np.where(improvement > 0.0, -1.0 / improvement, 0.0)
    d_std = np.zeros_like(d_mean)
    z, pos = _z_scores(improvement, std)
    log_h, cdf_ratio, pdf_ratio = _log_h_and_ratios(z)
    sd = std[pos]
    log_ei[pos] = np.log(sd) + log_h
    d_mean[pos] = -cdf_ratio / sd
    d_std[pos] = pdf_ratio / sd
    return log_ei, d_mean, d_std


def _check_samples(means, stds) -> tuple[np.ndarray, np.ndarray]:
    means = np.asarray(means, dtype=float)
    stds = np.asarray(stds, dtype=float)
    if means.ndim != 2 or means.shape[0] == 0:
        raise ValueError(
            f"means must be a 2-D array of shape (S, m) with S >= 1, got shape "
            f"{means.shape}"
        )
    if stds.shape != means.shape:
        raise ValueError(
            f"stds must have the shape of means {means.shape}, got {stds.shape}"
        )
    return means, stds


def integrated_expected_improvement(means, stds, best) -> np.ndarray:
    """EI averaged over S hyperparameter samples: means, stds (S, m) -> (m,).

    The Monte Carlo estimate of the integrated acquisition function of Snoek et al.
    (2012), sec. 3.2: ``mean_s EI(means[s], stds[s], best)``; ``best`` is a scalar or
    broadcasts against (S, m).
    """
    means, stds = _check_samples(means, stds)
    return np.mean(expected_improvement(means, stds, best), axis=0)


def log_integrated_expected_improvement(means, stds, best) -> np.ndarray:
    """log of :func:`integrated_expected_improvement`, (m,), stable where EI underflows.

    ``logsumexp_s log EI_s - log S``; ``-inf`` only where every sample has zero EI.
    """
    means, stds = _check_samples(means, stds)
    return _log_mean_exp(log_expected_improvement(means, stds, best))


def _log_mean_exp(log_values: np.ndarray) -> np.ndarray:
    """log of the mean over axis 0 of exp(log_values) (S, m) -> (m,), without overflow."""
    top = log_values.max(axis=0)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):  # all -inf in a column: the answer is -inf
        return shift + np.log(np.mean(np.exp(log_values - shift), axis=0))


def integrated_expected_improvement_and_partials(
    means, stds, best
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`integrated_expected_improvement` (m,) and its partials w.r.t. means and
    stds, each (S, m): sample s enters the average with weight 1/S."""
    means, stds = _check_samples(means, stds)
    ei, d_means, d_stds = expected_improvement_and_partials(means, stds, best)
    scale = 1.0 / means.shape[0]
    return ei.mean(axis=0), d_means * scale, d_stds * scale


def log_integrated_expected_improvement_and_partials(
    means, stds, best
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`log_integrated_expected_improvement` (m,) and its partials w.r.t. means
    and stds, each (S, m).

    d log(mean_s EI_s) = sum_s w_s d log EI_s with w_s = EI_s / sum_t EI_t, the softmax
    of the log EIs over the samples (all 0 where every EI is 0).
    """
    means, stds = _check_samples(means, stds)
    log_ei, d_means, d_stds = log_expected_improvement_and_partials(means, stds, best)
    value = _log_mean_exp(log_ei)
    log_total = value + math.log(means.shape[0])
    with np.errstate(invalid="ignore"):  # -inf - -inf where no sample improves
        weights = np.exp(log_ei - log_total)
    weights = np.where(np.isfinite(log_total), weights, 0.0)
    return value, weights * d_means, weights * d_stds


def lower_confidence_bound(mean, std, beta) -> np.ndarray:
    """Lower confidence bound ``mean - beta * std`` (broadcast), for minimization.

    The minimization counterpart of UCB ``mu + beta sigma``: small values are promising,
    so maximize ``-lower_confidence_bound``. ``beta`` (finite, >= 0) trades exploration
    (large) against exploitation (0: the posterior mean).
    """
    beta = float(beta)
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be finite and >= 0, got {beta}")
    mean = np.asarray(mean, dtype=float)
    std = np.asarray(std, dtype=float)
    if np.any(std < 0):
        raise ValueError("std must be >= 0")
    return mean - beta * std


def _sobol(dim: int, n: int, rng: np.random.Generator) -> np.ndarray:
    # whole powers of two keep the Sobol net balanced (and avoid scipy's warning)
    m = max(0, math.ceil(math.log2(n)))
    engine = qmc.Sobol(dim, scramble=True, rng=rng)
    return engine.random_base2(m)[:n]


class _SearchStopped(Exception):
    """Raised inside a local search's thread to end it when the batch is abandoned."""


def _lbfgsb_in_lockstep(
    objective: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    starts: np.ndarray,
) -> np.ndarray:
    """Minimize over [0, 1]^dim from each of ``starts`` (k, dim); returns the ends (k, dim).

    One scipy L-BFGS-B run per start, each in a thread of its own whose objective calls
    wait for this thread; once every unfinished run waits, this thread evaluates all
    their points in one call of ``objective``: X (j, dim) -> (values (j,), gradients
    (j, dim)). So each run takes exactly the steps it would take alone (its own line
    searches and stopping rule; Optuna runs scipy's L-BFGS-B the same way, in
    greenlets), the objective is called once per round instead of once per point, and
    the rounds, hence the results, do not depend on thread scheduling.
    """
    k = len(starts)
    runs = [_WaitingRun(start) for start in starts]
    # A run posts (i, point), or (i, None) when it ends, then waits on its own gate:
    # two wake-ups per run and round.
    posted: queue.SimpleQueue[tuple[int, np.ndarray | None]] = queue.SimpleQueue()
    threads = [
        threading.Thread(target=run.minimize, args=(i, posted), daemon=True)
        for i, run in enumerate(runs)
    ]
    for thread in threads:
        thread.start()
    n_running = k
    try:
        while n_running:
            asked: dict[int, np.ndarray] = {}
            for _ in range(n_running):
                i, point = posted.get()
                if point is None:
                    n_running -= 1
                else:
                    asked[i] = point
            if asked:
                # rows in run order, whatever order the runs posted in
                waiting = sorted(asked)
                values, gradients = objective(np.array([asked[i] for i in waiting]))
                for row, i in enumerate(waiting):
                    runs[i].answer((float(values[row]), gradients[row].copy()))
    finally:
        # after a failed objective call every run still going waits: end them
        for run in runs:
            run.answer(None)
        for thread in threads:
            thread.join()
    failures = [run.failure for run in runs if run.failure is not None]
    if failures:
        raise failures[0]
    return np.array([run.end for run in runs])


class _WaitingRun:
    """One L-BFGS-B run of :func:`_lbfgsb_in_lockstep`, whose objective calls post the
    point and wait for :meth:`answer`."""

    def __init__(self, start: np.ndarray) -> None:
        self.end = start.copy()
        self.failure: BaseException | None = None
        self._gate = threading.Lock()
        self._gate.acquire()
        self._answer: tuple[float, np.ndarray] | None = None

    def answer(self, answer: tuple[float, np.ndarray] | None) -> None:
        """Hand the value and gradient at the posted point to the run (None: stop)."""
        self._answer = answer
        if self._gate.locked():
            self._gate.release()

    def minimize(
        self, i: int, posted: queue.SimpleQueue[tuple[int, np.ndarray | None]]
    ) -> None:
        def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
            posted.put((i, x.copy()))
            self._gate.acquire()
            if self._answer is None:
                raise _SearchStopped
            return self._answer

        try:
            self.end = minimize(
                fun,
                self.end,
                jac=True,
                method="L-BFGS-B",
                bounds=[(0.0, 1.0)] * len(self.end),
            ).x
        except _SearchStopped:
            pass
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            self.failure = error
        finally:
            posted.put((i, None))


def _central_differences(
    evaluate: Callable[[np.ndarray], np.ndarray], X: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Values (k,) and central-difference gradients (k, dim) at X (k, dim) in [0, 1]^dim,
    from one call of ``evaluate`` on the points and their 2 * dim neighbours."""
    k, dim = X.shape
    shifts = _FD_STEP * np.eye(dim)
    up = np.minimum(X[:, None, :] + shifts, 1.0)  # (k, dim, dim): row j moves x_j
    down = np.maximum(X[:, None, :] - shifts, 0.0)
    values = evaluate(np.vstack([X, up.reshape(-1, dim), down.reshape(-1, dim)]))
    f_up = values[k : k + k * dim].reshape(k, dim)
    f_down = values[k + k * dim :].reshape(k, dim)
    step = np.diagonal(up, axis1=1, axis2=2) - np.diagonal(down, axis1=1, axis2=2)
    with np.errstate(invalid="ignore"):  # inf - inf next to a -inf region
        return values[:k], (f_up - f_down) / step


def maximize_acquisition(
    acquisition: Callable[[np.ndarray], np.ndarray],
    dim: int,
    rng: np.random.Generator,
    n_candidates: int = 1024,
    n_local_starts: int = 5,
    extra_starts: np.ndarray | None = None,
    value_and_gradient: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    | None = None,
) -> tuple[np.ndarray, float]:
    """Maximize a vectorized acquisition ``X (m, dim) -> (m,)`` over [0, 1]^dim.

    Scores ``n_candidates`` scrambled-Sobol points and refines ``n_local_starts`` of
    them with L-BFGS-B: the best one, the others drawn with probability proportional
    to exp(value - best value) (for log EI: to EI), so that the refinements spread
    over several modes instead of crowding the best one. ``extra_starts`` (k, dim),
    e.g. the best point observed so far, are refined too. The local searches advance
    together, one acquisition call per round for all of them: of
    ``value_and_gradient`` ``X (k, dim) -> (values (k,), gradients (k, dim))`` when
    given (the same function as ``acquisition``, with its gradient), else of
    ``acquisition`` at the points and their central-difference neighbours.
    Returns (x (dim,), value); deterministic for a given ``rng`` state.
    """
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
    if n_local_starts < 0:
        raise ValueError(f"n_local_starts must be >= 0, got {n_local_starts}")
    dim = int(dim)

    def evaluate(X: np.ndarray) -> np.ndarray:
        values = np.asarray(acquisition(X), dtype=float)
        if values.shape != (X.shape[0],):
            raise ValueError(
                f"acquisition must return shape ({X.shape[0]},) for X of shape {X.shape}, "
                f"got {values.shape}"
            )
        # NaN would poison argmax/argsort; it is never a good point
        return np.where(np.isnan(values), -np.inf, values)

    def evaluate_with_gradient(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if value_and_gradient is None:
            return _central_differences(evaluate, X)
        values, gradients = value_and_gradient(X)
        values = np.asarray(values, dtype=float)
        gradients = np.asarray(gradients, dtype=float)
        if values.shape != (X.shape[0],) or gradients.shape != X.shape:
            raise ValueError(
                f"value_and_gradient must return shapes ({X.shape[0]},) and {X.shape} "
                f"for X of shape {X.shape}, got {values.shape} and {gradients.shape}"
            )
        return values, gradients

    def objective(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # minimized: the negated acquisition; a non-finite value is a wall to back off
        values, gradients = evaluate_with_gradient(np.clip(X, 0.0, 1.0))
        bad = ~np.isfinite(values)
        gradients = np.where(bad[:, None] | ~np.isfinite(gradients), 0.0, gradients)
        return np.where(bad, 1e300, -values), -gradients

    candidates = _sobol(dim, int(n_candidates), rng)
    scores = evaluate(candidates)
    best_i = int(np.argmax(scores))
    best_x, best_val = candidates[best_i].copy(), float(scores[best_i])

    starts = (
        [candidates[best_i]] if n_local_starts > 0 and np.isfinite(best_val) else []
    )
    weights = np.where(np.isfinite(scores), np.exp(scores - best_val), 0.0)
    weights[best_i] = 0.0
    n_drawn = min(int(n_local_starts) - 1, int(np.count_nonzero(weights)))
    if n_drawn > 0 and np.isfinite(best_val):
        drawn = rng.choice(
            len(candidates), size=n_drawn, replace=False, p=weights / weights.sum()
        )
        starts.extend(candidates[drawn])
    if extra_starts is not None:
        starts.extend(
            np.clip(np.asarray(extra_starts, dtype=float).reshape(-1, dim), 0.0, 1.0)
        )
    if not starts:
        return best_x, best_val

    ends = np.clip(_lbfgsb_in_lockstep(objective, np.array(starts)), 0.0, 1.0)
    values = evaluate(ends)
    end_i = int(np.argmax(values))
    if values[end_i] > best_val:
        best_x, best_val = ends[end_i], float(values[end_i])
    return best_x, best_val
