"""The Gaussian-process model the surrogates share, in pure numpy/scipy.

Matern-5/2 ARD kernel, constant mean, homoscedastic Gaussian noise (Snoek et al. 2012
style). Inputs are expected in the unit cube [0, 1]^d and y is standardized before
fitting. This module holds the model's mathematics: the kernel, the Cholesky factor
with jitter, the negative log marginal likelihood and its gradient, the bounds of the
hyperparameters, the input checks, and the latent posterior both surrogates predict
with (:class:`StandardizedTarget`). :mod:`ensemble_bo.core.gaussian_process` fits the
hyperparameters by ML-II or MAP; :mod:`ensemble_bo.core.sampled_gaussian_process`
samples them.

Hyperparameter vector ``theta`` (length d + 3), all in standardized-y units::

    theta = [log amplitude, log length_scale_1, ..., log length_scale_d, log noise, mean]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.linalg.lapack import dpotrf, dpotri
from scipy.spatial.distance import cdist

__all__ = [
    "FAILED_NLML",
    "LOG_2PI",
    "CholeskyError",
    "GPHyperparameters",
    "StandardizedTarget",
    "check_Xy",
    "cholesky_with_jitter",
    "default_theta",
    "matern52",
    "mean_bounds_of",
    "negative_log_marginal_likelihood",
    "safe_objective",
    "standardize",
    "theta_bounds",
]

_SQRT5 = math.sqrt(5.0)
LOG_2PI = math.log(2.0 * math.pi)

# Bounds for ML-II, valid because inputs live in [0, 1]^d and y is standardized.
# Length scales: below 1e-2 two points must be closer than ~0.01 to be correlated, which
# essentially never happens with <= ~1000 points, so the GP degenerates into white noise
# that the noise term already models; above 10 a dimension moves r by < 0.1 across the
# whole cube (kernel flat in it = ARD "switched off"), larger values only worsen the
# amplitude/length-scale ridge and conditioning.
_LENGTH_SCALE_BOUNDS = (1e-2, 1e1)
# Amplitude: standardized y has unit variance; 1e2 still allows a smooth trend seen over
# only part of its range, 1e-3 means "almost all variance is noise".
_AMPLITUDE_BOUNDS = (1e-3, 1e2)
# Noise variance above 10x the data variance is never the ML-II optimum.
_NOISE_UPPER = 1e1
# The constant mean may extrapolate slightly beyond the observed standardized range.
_MEAN_MARGIN = 1.0
_JITTERS = (1e-10, 1e-8, 1e-6, 1e-4, 1e-2)
# Returned by the objective when even the jittered Cholesky fails, so L-BFGS-B backtracks.
FAILED_NLML = 1e25


class CholeskyError(np.linalg.LinAlgError):
    """Kernel matrix not positive definite even after jitter escalation."""


@dataclass(frozen=True, eq=False)
class GPHyperparameters:
    """GP hyperparameters in standardized-y units; ``length_scales`` has shape (d,)."""

    amplitude: float
    length_scales: np.ndarray
    noise: float
    mean: float

    def __post_init__(self) -> None:
        ls = np.array(self.length_scales, dtype=float).reshape(-1)
        ls.setflags(write=False)
        object.__setattr__(self, "length_scales", ls)
        for name in ("amplitude", "noise", "mean"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if ls.size == 0:
            raise ValueError("length_scales must contain at least one value")
        if not (np.all(np.isfinite(ls)) and np.all(ls > 0)):
            raise ValueError(f"length_scales must be finite and > 0, got {ls}")
        if not (math.isfinite(self.amplitude) and self.amplitude > 0):
            raise ValueError(f"amplitude must be finite and > 0, got {self.amplitude}")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"noise must be finite and >= 0, got {self.noise}")
        if not math.isfinite(self.mean):
            raise ValueError(f"mean must be finite, got {self.mean}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GPHyperparameters):
            return NotImplemented
        return (
            self.amplitude == other.amplitude
            and self.noise == other.noise
            and self.mean == other.mean
            and np.array_equal(self.length_scales, other.length_scales)
        )

    __hash__ = None  # type: ignore[assignment]  # holds an ndarray

    @property
    def theta(self) -> np.ndarray:
        """Packed vector (d + 3,): [log amp, log ls..., log noise, mean]."""
        # noise == 0 is legal for condition(); map it to a tiny value for the log
        return np.concatenate(
            [
                [math.log(self.amplitude)],
                np.log(self.length_scales),
                [math.log(max(self.noise, 1e-300)), self.mean],
            ]
        )

    @classmethod
    def from_theta(cls, theta: np.ndarray) -> GPHyperparameters:
        """Inverse of :attr:`theta`; ``theta`` has shape (d + 3,)."""
        theta = np.asarray(theta, dtype=float).reshape(-1)
        return cls(
            amplitude=math.exp(theta[0]),
            length_scales=np.exp(theta[1:-2]),
            noise=math.exp(theta[-2]),
            mean=float(theta[-1]),
        )


def matern52(
    X1: np.ndarray, X2: np.ndarray, length_scales: np.ndarray, amplitude: float
) -> np.ndarray:
    """Matern-5/2 ARD kernel matrix (n1, n2) for X1 (n1, d), X2 (n2, d), length_scales (d,)."""
    s = _sqrt5_distances(X1, X2, length_scales)
    return _matern52_of(s, np.exp(-s), amplitude)


def _sqrt5_distances(
    X1: np.ndarray, X2: np.ndarray, length_scales: np.ndarray
) -> np.ndarray:
    """s = sqrt5 r (n1, n2), r the length-scaled distances, the Matern-5/2 argument."""
    ls = np.asarray(length_scales, dtype=float)
    r = np.sqrt(
        cdist(np.asarray(X1, float) / ls, np.asarray(X2, float) / ls, "sqeuclidean")
    )
    return _SQRT5 * r


def _matern52_of(
    s: np.ndarray, exp_minus_s: np.ndarray, amplitude: float
) -> np.ndarray:
    """The kernel at s = sqrt5 r, given exp(-s), which its gradient reuses."""
    return amplitude * (1.0 + s + s * s / 3.0) * exp_minus_s


def cholesky_with_jitter(K: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of K (n, n), escalating diagonal jitter on failure."""
    if not np.all(np.isfinite(K)):
        # LAPACK may "succeed" on NaN input and hand back a NaN factor
        raise CholeskyError(
            "kernel matrix contains NaN or inf; check the hyperparameters"
        )
    L, info = dpotrf(K, lower=1, clean=1)
    if info == 0:
        return L
    # jitter relative to the diagonal scale so it means the same for any amplitude
    scale = float(np.mean(np.diag(K)))
    scale = scale if scale > 0 else 1.0
    for jitter in _JITTERS:
        Kj = K.copy()
        Kj[np.diag_indices_from(Kj)] += jitter * scale
        L, info = dpotrf(Kj, lower=1, clean=1)
        if info == 0:
            return L
    raise CholeskyError(
        f"kernel matrix ({K.shape[0]}x{K.shape[0]}) is not positive definite even with "
        f"jitter {_JITTERS[-1]:g} x mean diagonal"
    )


def negative_log_marginal_likelihood(
    theta: np.ndarray, X: np.ndarray, ys: np.ndarray, eval_gradient: bool
) -> float | tuple[float, np.ndarray]:
    """Negative log marginal likelihood of standardized ys (n,) at theta (d + 3,) [+ gradient]."""
    n, d = X.shape
    amp = math.exp(theta[0])
    ls = np.exp(theta[1 : d + 1])
    noise = math.exp(theta[d + 1])
    mean = theta[d + 2]

    Xs = X / ls
    s = _SQRT5 * np.sqrt(cdist(Xs, Xs, "sqeuclidean"))
    E = np.exp(-s)
    P = (1.0 + s) * E  # shared by K and the length-scale gradient
    M = s * s
    M *= E / 3.0
    M += P  # (1 + s + s^2/3) exp(-s)
    K = amp * M
    K[np.diag_indices(n)] += noise
    L = cholesky_with_jitter(K)

    resid = ys - mean
    alpha = cho_solve((L, True), resid, check_finite=False)
    nlml = (
        0.5 * float(resid @ alpha)
        + float(np.sum(np.log(np.diag(L))))
        + 0.5 * n * LOG_2PI
    )
    if not eval_gradient:
        return nlml

    # d nlml / d theta_i = 0.5 tr((K^-1 - alpha alpha^T) dK/dtheta_i); one K^-1 per call
    Kinv, info = dpotri(L, lower=1)
    if info != 0:
        raise CholeskyError("inverting the Cholesky factor failed")
    # dpotri fills only the lower triangle (the upper one is zero because L is clean)
    W = Kinv + Kinv.T
    W[np.diag_indices(n)] *= 0.5
    W -= np.outer(alpha, alpha)

    grad = np.empty(d + 3)
    grad[0] = 0.5 * amp * np.vdot(W, M)
    # dk/dlog l_j = amp * 5/3 * (1 + sqrt5 r) exp(-sqrt5 r) * (x_j - x'_j)^2 / l_j^2, and
    # sum_ik G_ik (x_ij - x_kj)^2 = 2 sum_i x_ij^2 (G 1)_i - 2 x_j^T G x_j for symmetric G:
    # two BLAS products instead of d (n, n) temporaries; centring X limits cancellation
    P *= W
    Xc = X - X.mean(axis=0)
    GX = P @ Xc
    quad = 2.0 * (P.sum(axis=1) @ (Xc * Xc)) - 2.0 * np.einsum("ij,ij->j", Xc, GX)
    grad[1 : d + 1] = (0.5 * amp * 5.0 / 3.0) * quad / ls**2
    grad[d + 1] = 0.5 * noise * float(np.trace(W))
    grad[d + 2] = -float(np.sum(alpha))
    return nlml, grad


def safe_objective(
    theta: np.ndarray, X: np.ndarray, ys: np.ndarray
) -> tuple[float, np.ndarray]:
    """The negative log marginal likelihood and its gradient as an L-BFGS-B objective:
    FAILED_NLML and a zero gradient where it fails or is not finite."""
    try:
        value, grad = negative_log_marginal_likelihood(theta, X, ys, eval_gradient=True)
    except np.linalg.LinAlgError:
        return FAILED_NLML, np.zeros_like(theta)
    if not (np.isfinite(value) and np.all(np.isfinite(grad))):
        return FAILED_NLML, np.zeros_like(theta)
    return value, grad


def mean_bounds_of(ys: np.ndarray) -> tuple[float, float]:
    """ML-II bounds of the constant mean for standardized ys (n,)."""
    return float(ys.min()) - _MEAN_MARGIN, float(ys.max()) + _MEAN_MARGIN


def theta_bounds(
    d: int, min_noise: float, mean_bounds: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), each (d + 3,), of theta for ML-II and the prior's support.

    ``mean_bounds=None`` leaves the mean unbounded.
    """
    noise_hi = max(_NOISE_UPPER, 10.0 * min_noise)
    mean_lo, mean_hi = (-math.inf, math.inf) if mean_bounds is None else mean_bounds
    lo = np.array(
        [math.log(_AMPLITUDE_BOUNDS[0])]
        + [math.log(_LENGTH_SCALE_BOUNDS[0])] * d
        + [math.log(min_noise), float(mean_lo)]
    )
    hi = np.array(
        [math.log(_AMPLITUDE_BOUNDS[1])]
        + [math.log(_LENGTH_SCALE_BOUNDS[1])] * d
        + [math.log(noise_hi), float(mean_hi)]
    )
    return lo, hi


def default_theta(d: int) -> np.ndarray:
    """theta (d + 3,) a fit starts from: unit amplitude, noise 1e-2, mean 0."""
    # typical distance between uniform points in [0,1]^d is sqrt(d/6): start with r ~ 1
    ls = math.sqrt(d / 6.0)
    return np.concatenate([[0.0], np.full(d, math.log(ls)), [math.log(1e-2), 0.0]])


def _check_X(X: object, name: str = "X") -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n, d), got shape {X.shape}"
        )
    if X.shape[0] == 0:
        raise ValueError(f"{name} must contain at least one row, got shape {X.shape}")
    if X.shape[1] == 0:
        raise ValueError(
            f"{name} must have at least one column (d >= 1), got shape {X.shape}"
        )
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or inf values")
    return np.ascontiguousarray(X)


def check_Xy(X: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """X (n, d) and y (n,) as float arrays; a bad shape or value is refused."""
    X = _check_X(X)
    y = np.asarray(y, dtype=float)
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of shape (n,), got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y length mismatch: X has {X.shape[0]} rows but y has {y.shape[0]} values"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or inf values")
    return X, y


def standardize(y: np.ndarray) -> tuple[np.ndarray, float, float, bool]:
    """Return (ys, y_mean, y_std, is_constant) with ys = (y - y_mean) / y_std."""
    y_mean = float(np.mean(y))
    y_std = float(np.std(y))
    # np.std of a constant array can come out as ~1e-17 * |y| from rounding in the mean
    constant = not (np.isfinite(y_std) and y_std > 1e-12 * float(np.max(np.abs(y))))
    if constant:
        y_std = 1.0
        return np.zeros_like(y), y_mean, y_std, True
    return (y - y_mean) / y_std, y_mean, y_std, False


def _standardized_posterior(
    Ks: np.ndarray, L: np.ndarray, alpha: np.ndarray, hp: GPHyperparameters
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and variance (m,) of the standardized latent function from the cross
    covariance Ks (m, n), and V = L^-1 Ks^T (n, m), which a gradient reuses."""
    mean = hp.mean + Ks @ alpha
    V = solve_triangular(L, Ks.T, lower=True, check_finite=False)
    var = np.maximum(hp.amplitude - np.einsum("ij,ij->j", V, V), 0.0)
    return mean, var, V


class StandardizedTarget:
    """y is standardized before fitting; predictions come back in y's units."""

    _y_mean = 0.0
    _y_std = 1.0

    def _require_fitted(self) -> None:
        raise NotImplementedError

    @property
    def y_mean(self) -> float:
        """Mean subtracted from y before fitting."""
        self._require_fitted()
        return self._y_mean

    @property
    def y_std(self) -> float:
        """Scale y was divided by before fitting (1.0 for constant y)."""
        self._require_fitted()
        return self._y_std

    def _check_prediction_input(self, X: np.ndarray, d: int) -> np.ndarray:
        self._require_fitted()
        X = _check_X(X)
        if X.shape[1] != d:
            raise ValueError(
                f"X has d={X.shape[1]} columns but the GP was fitted with d={d}"
            )
        return X

    def _latent_posterior(
        self,
        X: np.ndarray,
        X_train: np.ndarray,
        L: np.ndarray,
        alpha: np.ndarray,
        hp: GPHyperparameters,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Latent mean and std (m,) at X (m, d) in y's units, from a cached Cholesky."""
        Ks = matern52(X, X_train, hp.length_scales, hp.amplitude)  # (m, n)
        mean, var, _ = _standardized_posterior(Ks, L, alpha, hp)
        return self._y_mean + self._y_std * mean, self._y_std * np.sqrt(var)

    def _latent_posterior_with_gradient(
        self,
        X: np.ndarray,
        X_train: np.ndarray,
        L: np.ndarray,
        alpha: np.ndarray,
        hp: GPHyperparameters,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_latent_posterior` (m,), (m,) and its gradients w.r.t. X, (m, d) each.

        With s = sqrt5 r, dk(x, x_i)/dx = -(5/3) amp (1 + s) exp(-s) (x - x_i) / ls^2:
        no 1/r left, so it is smooth at x = x_i, where it is 0. mean = k^T alpha and
        var = amp - k^T K^-1 k give dmean = dk^T alpha and dvar = -2 dk^T K^-1 k.
        """
        ls, amp = hp.length_scales, hp.amplitude
        s = _sqrt5_distances(X, X_train, ls)  # (m, n)
        E = np.exp(-s)
        Ks = _matern52_of(s, E, amp)
        mean, var, V = _standardized_posterior(Ks, L, alpha, hp)
        std = np.sqrt(var)
        Kinv_k = solve_triangular(L, V, lower=True, trans="T", check_finite=False)
        G = (
            (-5.0 / 3.0 * amp) * (1.0 + s) * E
        )  # (m, n): dk/dx_j = G (x_j - x_ij) / ls_j^2
        m = X.shape[0]
        # sum_i W_i (x - x_i) = x sum_i W_i - W @ X_train, for the mean's and var's weights
        W = np.vstack([G * alpha, G * Kinv_k.T])  # (2m, n)
        dW = (W.sum(axis=1)[:, None] * np.vstack([X, X]) - W @ X_train) / (ls * ls)
        d_mean, d_var = dW[:m], -2.0 * dW[m:]
        # std = sqrt(var): where var is 0 (at a noiseless training point) it has a
        # minimum, so the gradient is 0 there too
        with np.errstate(divide="ignore", invalid="ignore"):
            d_std = np.where(std[:, None] > 0, d_var / (2.0 * std[:, None]), 0.0)
        y_std = self._y_std
        return (
            self._y_mean + y_std * mean,
            y_std * std,
            y_std * d_mean,
            y_std * d_std,
        )
