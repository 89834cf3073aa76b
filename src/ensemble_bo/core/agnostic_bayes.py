"""Agnostic Bayes ensemble weights p(h* = h | S) (Lacoste et al., ICML 2014).

Every posterior here takes L, the (t, n) per-sample losses of t hypotheses on
n samples (out-of-fold losses under k-fold CV), samples joint risks r from
p(r | L), and returns (t,) weights: the fraction of samples in which h has the
lowest risk, ties split evenly (which reproduces the paper's Table 1). Rows of
L that are entirely NaN are failed hypotheses and get weight 0.

rho is the effective sample size ratio m'/m of s.4.1 (1 for a train/validation
split; tuned over RHO_GRID for k-fold losses, s.4.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import softmax
from scipy.stats import multivariate_t

from ensemble_bo.core.losses import fold_weights
from ensemble_bo.core.selection.greedy import (
    PerSampleLoss,
    check_problem,
    usable_rows,
    weights_of_usable_rows,
)

# s.6: "We use 1000 samples from p(r|L) to estimate p(h|S)".
N_POSTERIOR_SAMPLES = 1000
# s.4.2: "The best rho from a set of 20 values equally spaced from 0.1 to 0.8".
RHO_GRID = np.linspace(0.1, 0.8, 20)
# The paper gives no grid for the Dirichlet prior mass; these are fractions of the
# effective sample size m', whose upper end is its bound alpha <= m' (s.3.1).
ALPHA_FRACTIONS = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0)
# Bound on the elements of one batch of sampled weights, so memory stays O(1e6).
_BATCH_ELEMENTS = 1 << 21

RandomState = np.random.Generator | int | None


# ---------------------------------------------------------------- validation


def _check_losses(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(losses of the usable hypotheses (d, n), usable mask (t,))."""
    L = np.asarray(L, dtype=float)
    if L.ndim != 2 or L.shape[0] == 0 or L.shape[1] == 0:
        raise ValueError(f"L must have shape (t, n) with t, n >= 1, got {L.shape}")
    failed = np.all(np.isnan(L), axis=1)
    partial = np.flatnonzero(~failed & ~usable_rows(L))
    if partial.size:
        raise ValueError(
            f"L rows {partial.tolist()} hold NaN or infinite losses but are not "
            "entirely NaN (only a failed hypothesis may have a NaN row)"
        )
    if failed.all():
        raise ValueError("every row of L is NaN: no hypothesis to weight")
    return L[~failed], ~failed


def _check_count(value: Any, name: str) -> int:
    try:
        valid = not isinstance(value, bool) and int(value) == value and value >= 1
    except (TypeError, ValueError, OverflowError):
        valid = False
    if not valid:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_rho(rho: float) -> float:
    if not 0.0 < rho <= 1.0:
        raise ValueError(
            f"rho (effective sample size ratio) must be in (0, 1], got {rho!r}"
        )
    return float(rho)


def _expand(usable: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weights of the usable hypotheses placed in a (t,) vector with 0 for failed ones."""
    full = np.zeros(usable.shape[0])
    full[usable] = weights
    return full


def _rescale(L: np.ndarray, loss_range: tuple[float, float] | None) -> np.ndarray:
    """L mapped affinely so that loss_range (default: the observed range) becomes [0, 1].

    The priors of s.3.1 and s.3.3 are stated for losses in [0, 1] (zero-one). A
    positive affine map common to all hypotheses does not change which one has
    the lowest empirical risk, and it makes those "neutral" priors scale-free.
    """
    low, high = (L.min(), L.max()) if loss_range is None else map(float, loss_range)
    if not high >= low:
        raise ValueError(
            f"loss_range must be (low, high) with low <= high, got {loss_range!r}"
        )
    return (L - low) / (high - low) if high > low else np.zeros_like(L)


# ------------------------------------------------------------------ helpers


def _win_shares(risks: np.ndarray, copies: np.ndarray | None = None) -> np.ndarray:
    """Per column of risks (b, d): summed over rows, its share of that row's argmin set.

    Ties split evenly among hypotheses; column j stands for copies[j] identical
    hypotheses (default 1), so it takes copies[j] shares (and returns their sum).
    """
    wins = risks == risks.min(axis=1, keepdims=True)
    if copies is not None:
        wins = wins * copies
    return (wins / wins.sum(axis=1, keepdims=True)).sum(axis=0)


def _batch_sizes(n_samples: int, width: int):
    batch = max(1, _BATCH_ELEMENTS // max(width, 1))
    for start in range(0, n_samples, batch):
        yield min(batch, n_samples - start)


def _posterior_of_distinct_rows(
    L: np.ndarray,
    n_samples: int,
    draw_sample_weights: Callable[[int], np.ndarray],
) -> np.ndarray:
    """p(h* = h) when each posterior sample of r is w @ l for random sample weights w.

    Identical rows of L get identical risks in every sample, hence always tie;
    computing each distinct row once, counted with its copies, is exact and keeps
    floating-point rounding from breaking those ties.
    """
    distinct, inverse, copies = np.unique(
        L, axis=0, return_inverse=True, return_counts=True
    )
    shares = np.zeros(distinct.shape[0])
    for batch in _batch_sizes(n_samples, max(L.shape[1], distinct.shape[0])):
        shares += _win_shares(draw_sample_weights(batch) @ distinct.T, copies)
    return (shares / copies)[inverse.ravel()] / n_samples


# ---------------------------------------------------------------- baselines


def _empirical_risks(L: np.ndarray, fold_ids: np.ndarray | None) -> np.ndarray:
    if fold_ids is None:
        return L.mean(axis=1)
    fold_ids = np.asarray(fold_ids)
    if fold_ids.shape != (L.shape[1],):
        raise ValueError(
            f"fold_ids has shape {fold_ids.shape}, expected ({L.shape[1]},)"
        )
    return L @ fold_weights(fold_ids)


def argmin_weights(L: np.ndarray, fold_ids: np.ndarray | None = None) -> np.ndarray:
    """ArgMin (AMin, s.6): weight 1 on the lowest empirical risk, (t,).

    Risk is the mean loss, or the k-fold CV loss when fold_ids (n,) is given.
    The paper breaks ties at random; we split them evenly, the expectation of
    that choice, to stay deterministic.
    """
    L, usable = _check_losses(L)
    risks = _empirical_risks(L, fold_ids)
    return _expand(usable, _win_shares(risks[None, :]))


def softmin_weights(
    L: np.ndarray, temperature: float, fold_ids: np.ndarray | None = None
) -> np.ndarray:
    """SoftMin (SMin, s.6): Gibbs weights exp(-r_h / temperature) normalized, (t,).

    temperature = 1 / beta of the paper; tune it like rho (s.4.2) with
    `tune_parameter`. Risk as in `argmin_weights`.
    """
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(
            f"temperature must be positive and finite, got {temperature!r}"
        )
    L, usable = _check_losses(L)
    return _expand(usable, softmax(-_empirical_risks(L, fold_ids) / temperature))


# --------------------------------------------------------------- posteriors


def bootstrap_posterior(
    L: np.ndarray, n_bootstrap: int, rng: RandomState, *, rho: float = 1.0
) -> np.ndarray:
    """E_b* (s.3.2): share of bootstrap resamples in which h has the lowest mean loss, (t,).

    Each resample draws m' = ceil(rho n) of the n samples with replacement (s.4.1).
    """
    L, usable = _check_losses(L)
    n_bootstrap = _check_count(n_bootstrap, "n_bootstrap")
    rho, rng = _check_rho(rho), np.random.default_rng(rng)
    n = L.shape[1]
    resample_size = math.ceil(rho * n)

    def resample_counts(batch: int) -> np.ndarray:
        # Multinomial counts are exact integers, so exact ties (Table 1) stay ties.
        return (
            rng.multinomial(resample_size, np.full(n, 1.0 / n), size=batch)
            / resample_size
        )

    return _expand(usable, _posterior_of_distinct_rows(L, n_bootstrap, resample_counts))


def bayesian_bootstrap_posterior(
    L: np.ndarray, n_samples: int, rng: RandomState, *, rho: float = 1.0
) -> np.ndarray:
    """E_B* (s.3.2, Rubin 1981): r = w @ l with w ~ Dirichlet(rho, ..., rho) over samples, (t,).

    The Dirichlet posterior of s.3.1 in the limit alpha -> 0; each sample counts
    for rho instead of 1 (s.4.1).
    """
    L, usable = _check_losses(L)
    n_samples = _check_count(n_samples, "n_samples")
    rho, rng = _check_rho(rho), np.random.default_rng(rng)
    concentration = np.full(L.shape[1], rho)

    def dirichlet_weights(batch: int) -> np.ndarray:
        return rng.dirichlet(concentration, size=batch)

    return _expand(usable, _posterior_of_distinct_rows(L, n_samples, dirichlet_weights))


def _corner_mixture(
    total_mass: float, dim: int, rng: np.random.Generator
) -> np.ndarray:
    """G X_alpha of s.3.1: a draw from Dir(alpha 1_N) over the N = 2^dim corners of
    [0, 1]^dim, mapped to risks (dim,).

    Hand-written because N is astronomically large: the stick-breaking process
    with ceil(10 alpha) atoms (the paper's truncation; the last atom takes the
    leftover mass), each atom a uniformly random corner, i.e. dim fair bits.
    """
    atoms = max(1, math.ceil(10.0 * total_mass))
    sticks = rng.beta(1.0, total_mass, size=atoms)
    sticks[-1] = 1.0
    masses = sticks * np.concatenate(([1.0], np.cumprod(1.0 - sticks[:-1])))
    random_bytes = rng.integers(0, 256, size=math.ceil(atoms * dim / 8), dtype=np.uint8)
    corners = np.unpackbits(random_bytes, count=atoms * dim).reshape(atoms, dim)
    # einsum sums over the uint8 bits directly; `@` would take a slow non-BLAS
    # mixed-type path (about 10x slower here).
    return np.einsum("k,kd->d", masses, corners)


def dirichlet_posterior(
    L: np.ndarray,
    alpha: float,
    n_samples: int,
    rng: RandomState,
    *,
    rho: float = 1.0,
    loss_range: tuple[float, float] | None = None,
) -> np.ndarray:
    """E_D* (s.3.1): Dirichlet prior of total mass alpha over the loss states, (t,).

    alpha is alpha~ N of the paper (the prior's total concentration; the per-state
    alpha~ = alpha / 2^t would underflow), 0 <= alpha <= m' = rho n as s.3.1
    assumes. The states are the 2^t corners of the loss range (exactly the
    zero-one loss vectors of the paper; see `_rescale` for other losses). A sample
    is theta G X_alpha + (1 - theta) r_data, theta ~ Beta(alpha, m'), with r_data
    the Bayesian bootstrap (each sample counting rho), by the stick-breaking
    identity of s.3.1. alpha = 0 is the Bayesian bootstrap. Cost O(n_samples t (n + 10 alpha)).
    """
    L, usable = _check_losses(L)
    n_samples = _check_count(n_samples, "n_samples")
    rho = _check_rho(rho)
    effective_size = rho * L.shape[1]
    if not 0.0 <= alpha <= effective_size:
        raise ValueError(
            f"alpha must be in [0, m' = rho * n = {effective_size:g}] (s.3.1), got {alpha!r}"
        )
    if alpha == 0:
        return _expand(usable, bayesian_bootstrap_posterior(L, n_samples, rng, rho=rho))
    rng = np.random.default_rng(rng)
    scaled = _rescale(L, loss_range)
    concentration = np.full(L.shape[1], rho)
    shares = np.zeros(L.shape[0])
    for batch in _batch_sizes(n_samples, max(L.shape)):
        data_risks = rng.dirichlet(concentration, size=batch) @ scaled.T
        theta = rng.beta(alpha, effective_size, size=(batch, 1))
        prior_risks = np.stack(
            [_corner_mixture(alpha, L.shape[0], rng) for _ in range(batch)]
        )
        shares += _win_shares(theta * prior_risks + (1.0 - theta) * data_risks)
    return _expand(usable, shares / n_samples)


@dataclass(frozen=True)
class StudentTPosterior:
    """p(r | L) of s.3.3, eq. 5: multivariate t with `df` degrees of freedom."""

    loc: np.ndarray  # (d,) r_m'
    shape: np.ndarray  # (d, d) T_m' / (kappa_m' df)
    df: float


def student_t_posterior_parameters(
    L: np.ndarray,
    *,
    rho: float = 1.0,
    loss_range: tuple[float, float] | None = None,
    r0: float = 0.5,
    t0: float = 0.25,
    kappa0: float = 1.0,
    nu0: float | None = None,
) -> StudentTPosterior:
    """Normal-Wishart update (eq. 4) with m' = rho n (s.4.1), marginalized to eq. 5.

    L: (d, n) losses of usable hypotheses, rescaled by `_rescale`. Priors of s.3.3:
    r0 = 0.5 * 1, T0 = 0.25 * I, kappa0 = 1, nu0 = d (the default when None).
    """
    L = _rescale(np.asarray(L, dtype=float), loss_range)
    d, n = L.shape
    nu0 = float(d) if nu0 is None else float(nu0)
    if not (kappa0 > 0 and t0 > 0 and nu0 > d - 1):
        raise ValueError(
            f"need kappa0 > 0, t0 > 0 and nu0 > d - 1 = {d - 1}; got kappa0={kappa0!r}, "
            f"t0={t0!r}, nu0={nu0!r}"
        )
    effective_size = _check_rho(rho) * n
    mean_loss = L.mean(axis=1)
    scatter = np.atleast_2d(np.cov(L, bias=True))
    kappa = kappa0 + effective_size
    offset = np.full(d, float(r0)) - mean_loss
    scale_matrix = (
        t0 * np.eye(d)
        + effective_size * scatter
        + effective_size * kappa0 / kappa * np.outer(offset, offset)
    )
    df = nu0 + effective_size - d + 1
    loc = (kappa0 * r0 + effective_size * mean_loss) / kappa
    return StudentTPosterior(loc, scale_matrix / (kappa * df), df)


def student_t_posterior(
    L: np.ndarray,
    n_samples: int,
    rng: RandomState,
    *,
    rho: float = 1.0,
    loss_range: tuple[float, float] | None = None,
    r0: float = 0.5,
    t0: float = 0.25,
    kappa0: float = 1.0,
    nu0: float | None = None,
) -> np.ndarray:
    """E_t* (s.3.3): share of multivariate-t risk samples (eq. 5) won by h, (t,).

    Priors default to s.3.3's; see `student_t_posterior_parameters`. Unlike the
    resampling posteriors, identical hypotheses do not tie here: the prior
    T0 = 0.25 I lets their risks differ. O(t^2 (n + n_samples) + t^3).
    """
    L, usable = _check_losses(L)
    n_samples = _check_count(n_samples, "n_samples")
    posterior = student_t_posterior_parameters(
        L, rho=rho, loss_range=loss_range, r0=r0, t0=t0, kappa0=kappa0, nu0=nu0
    )
    risks = multivariate_t(posterior.loc, posterior.shape, df=posterior.df).rvs(
        size=n_samples, random_state=np.random.default_rng(rng)
    )
    return _expand(usable, _win_shares(risks.reshape(n_samples, -1)) / n_samples)


# ------------------------------------------------------------------- tuning


def mean_ensemble_cv_loss(
    predictions: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    per_sample_loss: PerSampleLoss,
) -> Callable[[np.ndarray], float]:
    """weights (t,) -> CV loss of the weighted average sum_h w_h h(x_i) (s.2.2, s.4.2).

    predictions (t, n) are out-of-fold (h_{j_i}(x_i) of s.4.2), or (t, n, K)
    class probabilities with y (n, K); failed (NaN)
    rows must get weight 0. For label predictions, write the vote loss instead.
    """
    predictions, y, fold_ids = check_problem(predictions, y, fold_ids)
    usable = usable_rows(predictions)
    sample_weights = fold_weights(fold_ids)

    def cv_loss(weights: np.ndarray) -> float:
        ensemble = np.tensordot(
            weights_of_usable_rows(weights, usable), predictions[usable], axes=1
        )
        return float(per_sample_loss(ensemble - y) @ sample_weights)

    return cv_loss


@dataclass(frozen=True)
class Tuned:
    """The candidate whose weights gave the lowest ensemble loss (first on ties)."""

    value: Any
    weights: np.ndarray  # (t,) weights at `value`
    candidates: tuple
    losses: np.ndarray  # (len(candidates),) ensemble loss of each candidate


def tune_parameter(
    weights_for: Callable[[Any], np.ndarray],
    candidates: Sequence[Any],
    ensemble_loss: Callable[[np.ndarray], float],
) -> Tuned:
    """s.4.2: pick the candidate whose ensemble predicts S best (e.g. softmin temperature)."""
    candidates = tuple(candidates)
    if not candidates:
        raise ValueError("candidates must not be empty")
    all_weights = [weights_for(value) for value in candidates]
    losses = np.array([ensemble_loss(weights) for weights in all_weights])
    best = int(np.argmin(np.where(np.isnan(losses), np.inf, losses)))
    return Tuned(candidates[best], all_weights[best], candidates, losses)


def tune_rho(
    posterior: Callable[..., np.ndarray],
    L: np.ndarray,
    ensemble_loss: Callable[[np.ndarray], float],
    rng: RandomState,
    rhos: Sequence[float] = tuple(RHO_GRID),
    **posterior_kwargs: Any,
) -> Tuned:
    """s.4.1-4.2: the effective sample size ratio among `rhos` whose posterior
    ensemble has the lowest `ensemble_loss` (see `mean_ensemble_cv_loss`).

    posterior: one of the posteriors here, called as
    posterior(L, rng=..., rho=..., **posterior_kwargs) (e.g. n_bootstrap=1000).
    Every candidate gets the same random stream (common random numbers), so the
    comparison reflects rho rather than Monte Carlo noise.
    """
    seed = int(np.random.default_rng(rng).integers(2**63))
    return tune_parameter(
        lambda rho: posterior(
            L, rng=np.random.default_rng(seed), rho=rho, **posterior_kwargs
        ),
        rhos,
        ensemble_loss,
    )


def tune_alpha(
    L: np.ndarray,
    ensemble_loss: Callable[[np.ndarray], float],
    n_samples: int,
    rng: RandomState,
    alphas: Sequence[float] | None = None,
    *,
    rho: float = 1.0,
    loss_range: tuple[float, float] | None = None,
) -> Tuned:
    """s.4.2 for the Dirichlet prior mass: the best alpha of `dirichlet_posterior`.

    alphas default to ALPHA_FRACTIONS times m' = rho n (the paper gives no grid).
    Common random numbers as in `tune_rho`; tune rho and alpha jointly with
    `tune_parameter` over (rho, alpha) pairs if both are free.
    """
    n = np.asarray(L).shape[-1]
    if alphas is None:
        alphas = tuple(fraction * _check_rho(rho) * n for fraction in ALPHA_FRACTIONS)
    seed = int(np.random.default_rng(rng).integers(2**63))
    return tune_parameter(
        lambda alpha: dirichlet_posterior(
            L,
            alpha,
            n_samples,
            np.random.default_rng(seed),
            rho=rho,
            loss_range=loss_range,
        ),
        alphas,
        ensemble_loss,
    )
