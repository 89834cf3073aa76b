"""Gaussian-process surrogate with slice-sampled hyperparameters (Snoek et al. 2012).

:class:`SampledGaussianProcess` draws theta, the hyperparameters of the model of
:mod:`ensemble_bo.core.gp_model`, from their posterior (log marginal likelihood +
:func:`log_prior`) by slice sampling and keeps one GP posterior per sample, as
Spearmint does.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.optimize import minimize
from scipy.spatial.distance import cdist

from ensemble_bo.core.gp_model import (
    FAILED_NLML,
    LOG_2PI,
    CholeskyError,
    GPHyperparameters,
    StandardizedTarget,
    check_Xy,
    cholesky_with_jitter,
    default_theta,
    matern52,
    mean_bounds_of,
    safe_objective,
    standardize,
    theta_bounds,
)
from ensemble_bo.core.slice_sampling import slice_sample

__all__ = ["SampledGaussianProcess", "log_prior"]

# Priors on theta, in standardized-y units, each restricted to the ML-II bounds (-inf
# outside). Spearmint's choices, adapted to a standardized y and a log parametrisation:
# * log amplitude ~ N(0, 1) (amplitude lognormal): standardized y has unit variance, so
#   the signal variance is a priori ~1, give or take a factor e (e^2 at 2 sd).
_LOG_AMPLITUDE_PRIOR_SD = 1.0
# * noise variance: horseshoe-like p(noise) ∝ log(1 + (s / noise)^2) with Spearmint's
#   s = 0.1. It has a pole at 0 (near-noiseless objectives are plausible) and a
#   ~ noise^-2 tail (noise variance far above s is a priori unlikely). In the sampled
#   coordinate u = log noise it reads p(u) ∝ noise * log(1 + (s / noise)^2), a proper
#   density with its mode at noise = 0.505 s, falling like noise^2 log(1/noise) below
#   and 1/noise above.
_NOISE_HORSESHOE_SCALE = 0.1
# * log length scales: top-hat (log-uniform length scales) on the ML-II bounds
#   [1e-2, 10]. Spearmint puts a top-hat on the length scales themselves; uniform in the
#   log is scale-free across the three decades the bounds span, while uniform in the
#   length scale would put 90 % of the mass above 1, i.e. favour "switched off" inputs.
# * mean: top-hat on the ML-II interval [min ys - 1, max ys + 1] (Spearmint: [min y,
#   max y]); it needs the data, so it is only bounded when ``mean_bounds`` is given.
# Default slice-sampler settings of SampledGaussianProcess. The chain starts at the ML-II
# optimum, so the log posterior is typical from the first sweeps on and a short burn-in
# suffices. The slowest coordinates (amplitude and the relevant length scales, which
# trade off along a ridge) have integrated autocorrelation times of ~6-14 sweeps at
# n=100, d=6, so keeping every 4th sweep gives 10 samples worth ~3-7 independent ones
# for 50 sweeps in all (one sweep ~3 ms there, single-threaded).
_DEFAULT_BURN_IN = 10
_DEFAULT_THIN = 4
# Initial slice widths, in theta units: a factor e for the log-scales, one standard
# deviation of y for the mean.
_SLICE_WIDTH = 1.0


def log_prior(
    theta: np.ndarray,
    d: int,
    *,
    mean_bounds: tuple[float, float] | None = None,
    min_noise: float = 1e-6,
) -> float:
    """Log prior density of theta (d + 3,) up to an additive constant; ``-inf`` outside
    the ML-II bounds.

    Lognormal amplitude (log amp ~ N(0, 1)), log-uniform length scales, horseshoe-like
    noise variance (scale 0.1), top-hat mean on ``mean_bounds`` (improper flat without);
    see the comments above ``_LOG_AMPLITUDE_PRIOR_SD``. ``min_noise`` is the noise lower
    bound, as in :class:`GaussianProcess`.
    """
    if isinstance(d, bool) or int(d) != d or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    d = int(d)
    theta = np.asarray(theta, dtype=float).reshape(-1)
    if theta.size != d + 3:
        raise ValueError(f"theta must have length d + 3 = {d + 3}, got {theta.size}")
    lo, hi = theta_bounds(d, min_noise, mean_bounds)
    return _log_prior_in(theta, lo, hi)


def _log_prior_in(theta: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    if not (np.all(theta >= lo) and np.all(theta <= hi)):  # also catches NaN
        return -math.inf
    log_amp, log_noise = float(theta[0]), float(theta[-2])
    lp = -0.5 * (log_amp / _LOG_AMPLITUDE_PRIOR_SD) ** 2
    # log(log(1 + (s/noise)^2)) + log noise (Jacobian of u = log noise); logaddexp keeps
    # (s/noise)^2 from overflowing
    x = 2.0 * (math.log(_NOISE_HORSESHOE_SCALE) - log_noise)
    lp += math.log(float(np.logaddexp(0.0, x))) + log_noise
    return lp


class _LogPosterior:
    """log p(ys | theta) + log prior(theta) for fixed X (n, d), ys (n,), with caches.

    The slice sampler moves one coordinate at a time: a new mean reuses the Cholesky
    factor, a new amplitude or noise reuses the unit-amplitude kernel matrix.
    """

    def __init__(
        self, X: np.ndarray, ys: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        self.X, self.ys, self.lo, self.hi = X, ys, lo, hi
        self.n, self.d = X.shape
        self._ls_key: bytes | None = None
        self._M: np.ndarray | None = None
        self._K_key: bytes | None = None
        self._L: np.ndarray | None = None
        self._logdet_half = 0.0

    def __call__(self, theta: np.ndarray) -> float:
        lp = _log_prior_in(theta, self.lo, self.hi)
        if lp == -math.inf:
            return -math.inf
        d = self.d
        ls_key = theta[1 : d + 1].tobytes()
        if ls_key != self._ls_key:
            # unit-amplitude matern52(X, X), in place: this is the hot loop of fit()
            Xs = self.X * np.exp(-theta[1 : d + 1])
            s = cdist(Xs, Xs, "sqeuclidean")
            s *= 5.0
            np.sqrt(s, out=s)  # s = sqrt5 r
            M = s * s
            M *= 1.0 / 3.0
            M += s
            M += 1.0
            np.negative(s, out=s)
            np.exp(s, out=s)
            M *= s
            self._M = M
            self._ls_key, self._K_key = ls_key, None
        K_key = theta[: d + 2].tobytes()
        if K_key != self._K_key:
            K = math.exp(theta[0]) * self._M
            K[np.diag_indices(self.n)] += math.exp(theta[d + 1])
            try:
                L = cholesky_with_jitter(K)
            except CholeskyError:
                self._K_key = None
                return -math.inf
            self._L, self._K_key = L, K_key
            self._logdet_half = float(np.sum(np.log(np.diag(L))))
        v = solve_triangular(
            self._L, self.ys - theta[d + 2], lower=True, check_finite=False
        )
        lml = -0.5 * float(v @ v) - self._logdet_half - 0.5 * self.n * LOG_2PI
        return lml + lp if math.isfinite(lml) else -math.inf


class SampledGaussianProcess(StandardizedTarget):
    """GP whose hyperparameters are integrated out by slice sampling (Snoek et al. 2012).

    Same model as :class:`GaussianProcess`; ``fit`` draws ``n_samples`` hyperparameter
    vectors from p(theta | X, ys) ∝ p(ys | X, theta) p(theta) (see :func:`log_prior`) with
    a coordinate-wise slice sampler: ``burn_in`` sweeps are discarded, then every
    ``thin``-th sweep is kept. ``predict`` returns one latent posterior per sample.

    ``reinitialize=True`` (SEGO: the target changes with the ensemble) starts every fit's
    chain at the ML-II optimum of the new data, found by L-BFGS-B from the default start.
    ``reinitialize=False`` continues the chain from the previous fit's last sample
    (Spearmint), re-expressed in the new standardization (the same GP in original y
    units, clipped into the new bounds); it falls back to a fresh start on the first fit,
    when d changes, or when that point has zero posterior density.

    Constant y (including a single point) carries no information on the hyperparameters:
    as in :class:`GaussianProcess`, all samples are the default start and the chain is
    not advanced.
    """

    def __init__(
        self,
        n_samples: int = 10,
        burn_in: int = _DEFAULT_BURN_IN,
        thin: int = _DEFAULT_THIN,
        reinitialize: bool = True,
        seed: int | None = 0,
        min_noise: float = 1e-6,
    ):
        for name, value, minimum in (
            ("n_samples", n_samples, 1),
            ("burn_in", burn_in, 0),
            ("thin", thin, 1),
        ):
            if isinstance(value, bool) or int(value) != value or value < minimum:
                raise ValueError(
                    f"{name} must be an integer >= {minimum}, got {value!r}"
                )
        if not (math.isfinite(min_noise) and min_noise > 0):
            raise ValueError(f"min_noise must be finite and > 0, got {min_noise}")
        self.n_samples = int(n_samples)
        self.burn_in = int(burn_in)
        self.thin = int(thin)
        self.reinitialize = bool(reinitialize)
        self.seed = seed
        self.min_noise = float(min_noise)
        self._rng = np.random.default_rng(seed)
        # chain state: last theta and the (y_mean, y_std) it is expressed in
        self._state: np.ndarray | None = None
        self._state_scale = (0.0, 1.0)
        self._chain_start: np.ndarray | None = None
        self._posteriors: list[tuple[GPHyperparameters, np.ndarray, np.ndarray]] = []
        self._d = 0
        self._X: np.ndarray | None = None
        self._y_mean = 0.0
        self._y_std = 1.0

    # ------------------------------------------------------------------ fitting
    def _fresh_start(
        self, X: np.ndarray, ys: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        start = np.clip(default_theta(X.shape[1]), lo, hi)
        res = minimize(
            safe_objective,
            start,
            args=(X, ys),
            jac=True,
            method="L-BFGS-B",
            bounds=list(zip(lo.tolist(), hi.tolist())),
            options={"maxiter": 200},
        )
        if np.all(np.isfinite(res.x)) and res.fun < FAILED_NLML:
            return np.clip(res.x, lo, hi)
        return start

    def _continued_start(
        self, d: int, y_mean: float, y_std: float, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray | None:
        if self.reinitialize or self._state is None or self._state.size != d + 3:
            return None
        m0, s0 = self._state_scale
        theta = self._state.copy()
        # same GP in original units: amp and noise scale with y_std^2, mean is affine
        log_ratio2 = 2.0 * math.log(s0 / y_std)
        theta[0] += log_ratio2
        theta[d + 1] += log_ratio2
        theta[d + 2] = (m0 - y_mean) / y_std + (s0 / y_std) * theta[d + 2]
        return np.clip(theta, lo, hi)

    def fit(self, X: np.ndarray, y: np.ndarray) -> SampledGaussianProcess:
        """Sample hyperparameters given X (n, d) in [0, 1]^d and y (n,)."""
        X, y = check_Xy(X, y)
        d = X.shape[1]
        ys, y_mean, y_std, constant = standardize(y)
        lo, hi = theta_bounds(d, self.min_noise, mean_bounds_of(ys))

        if constant:
            thetas = np.tile(np.clip(default_theta(d), lo, hi), (self.n_samples, 1))
            self._chain_start = None
        else:
            target = _LogPosterior(X, ys, lo, hi)
            start = self._continued_start(d, y_mean, y_std, lo, hi)
            if start is None or not math.isfinite(target(start)):
                start = self._fresh_start(X, ys, lo, hi)
                if not math.isfinite(target(start)):
                    start = np.clip(default_theta(d), lo, hi)
            thetas = slice_sample(
                target,
                start,
                self._rng,
                self.n_samples,
                burn_in=self.burn_in,
                thin=self.thin,
                widths=_SLICE_WIDTH,
            )
            self._chain_start = start
            self._state = thetas[-1].copy()
            self._state_scale = (y_mean, y_std)

        posteriors = []
        for theta in thetas:
            hp = GPHyperparameters.from_theta(theta)
            K = matern52(X, X, hp.length_scales, hp.amplitude)
            K[np.diag_indices_from(K)] += hp.noise
            L = cholesky_with_jitter(K)
            alpha = cho_solve((L, True), ys - hp.mean, check_finite=False)
            posteriors.append((hp, L, alpha))
        self._posteriors = posteriors
        self._X, self._d = X, d
        self._y_mean, self._y_std = y_mean, y_std
        return self

    # --------------------------------------------------------------- accessors
    def _require_fitted(self) -> None:
        if not self._posteriors:
            raise RuntimeError("SampledGaussianProcess is not fitted; call fit() first")

    @property
    def samples(self) -> list[GPHyperparameters]:
        """The ``n_samples`` hyperparameter samples of the last fit (standardized units)."""
        self._require_fitted()
        return [hp for hp, _, _ in self._posteriors]

    @property
    def chain_start(self) -> np.ndarray | None:
        """theta (d + 3,) the last fit's chain started from (standardized units of that
        fit), or None when it ran no chain (constant y)."""
        self._require_fitted()
        return None if self._chain_start is None else self._chain_start.copy()

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Latent posterior means (S, m) and stds (S, m) at X (m, d), one row per sample,
        in original y units."""
        X = self._check_prediction_input(X, self._d)
        posteriors = [
            self._latent_posterior(X, self._X, L, alpha, hp)
            for hp, L, alpha in self._posteriors
        ]
        means, stds = zip(*posteriors, strict=True)
        return np.array(means), np.array(stds)

    def predict_with_gradient(
        self, X: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`predict` at X (m, d), means and stds (S, m), and their gradients
        w.r.t. X, (S, m, d) each, one row per sample, in original y units."""
        X = self._check_prediction_input(X, self._d)
        posteriors = [
            self._latent_posterior_with_gradient(X, self._X, L, alpha, hp)
            for hp, L, alpha in self._posteriors
        ]
        means, stds, d_means, d_stds = zip(*posteriors, strict=True)
        return np.array(means), np.array(stds), np.array(d_means), np.array(d_stds)
