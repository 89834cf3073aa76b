"""Tests for ensemble_bo.core.slice_sampling (Neal 2003 slice sampler, coordinate-wise).

Tolerances: the chains are deterministic for their seed, but the bounds are chosen as
~4 Monte Carlo standard errors, using the integrated autocorrelation times measured for
these targets (~1.5 sweeps for x and ~2.3 for x^2 on the 1-D Gaussian, ~2.5 on the 2-D
one), so they hold for any seed, not just the one used.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ensemble_bo.core.slice_sampling import slice_sample


def _gaussian_1d(x: np.ndarray) -> float:
    return -0.5 * ((x[0] - 3.0) / 2.0) ** 2


def _unit_interval(x: np.ndarray) -> float:
    return 0.0 if 0.0 <= x[0] <= 1.0 else -math.inf


def test_gaussian_1d_mean_and_sd() -> None:
    """N(3, 2^2) from x0 = 0: ESS ~ 5000 / 1.5, so SE(mean) ~ 0.035, SE(sd) ~ 0.03."""
    s = slice_sample(_gaussian_1d, np.array([0.0]), np.random.default_rng(0), 5000)
    assert s.shape == (5000, 1)
    x = s[:, 0]
    assert abs(np.mean(x) - 3.0) < 0.15
    assert abs(np.std(x) - 2.0) < 0.12
    # and the whole distribution: KS on every 5th sample (nearly independent)
    assert stats.kstest(x[::5], stats.norm(3.0, 2.0).cdf).pvalue > 1e-3


def test_correlated_gaussian_2d_covariance() -> None:
    """Correlation 0.6 and unequal scales: covariance within 10 % (>= 4 SE) per entry."""
    C = np.array([[1.0, 1.2], [1.2, 4.0]])
    P = np.linalg.inv(C)
    s = slice_sample(
        lambda x: -0.5 * float(x @ P @ x),
        np.array([2.0, -3.0]),
        np.random.default_rng(1),
        10_000,
        burn_in=10,
    )
    assert s.shape == (10_000, 2)
    np.testing.assert_allclose(np.mean(s, axis=0), [0.0, 0.0], atol=0.1)
    np.testing.assert_allclose(np.cov(s.T), C, rtol=0.1)


def test_bounded_target_stays_in_bounds_and_is_uniform() -> None:
    s = slice_sample(_unit_interval, [0.5], np.random.default_rng(2), 5000)[:, 0]
    assert np.all((s >= 0.0) & (s <= 1.0))
    # U(0, 1): mean 1/2 (SE 0.004), variance 1/12 (SE ~0.0015)
    assert abs(np.mean(s) - 0.5) < 0.02
    assert abs(np.var(s) - 1.0 / 12.0) < 0.007
    assert stats.kstest(s, "uniform").pvalue > 1e-3


def test_one_sided_support_exponential_with_small_width() -> None:
    """Exp(1) on [0, inf) with width 0.2: stepping out must walk far into the tail."""
    s = slice_sample(
        lambda x: -x[0] if x[0] >= 0.0 else -math.inf,
        [1.0],
        np.random.default_rng(3),
        5000,
        widths=0.2,
    )[:, 0]
    assert np.all(s >= 0.0)
    assert abs(np.mean(s) - 1.0) < 0.15  # IAT ~ 5.5: SE ~ 0.035
    assert stats.kstest(s[::10], "expon").pvalue > 1e-3


def test_no_stepping_out_and_huge_width_still_correct() -> None:
    """m = 0 with w = 50: all the work is done by shrinkage, which is exact on its own."""
    s = slice_sample(
        lambda x: -0.5 * x[0] ** 2,
        [0.0],
        np.random.default_rng(4),
        4000,
        widths=50.0,
        max_steps_out=0,
    )[:, 0]
    assert abs(np.mean(s)) < 0.08
    assert abs(np.std(s) - 1.0) < 0.06
    assert stats.kstest(s[::2], "norm").pvalue > 1e-3


def test_per_coordinate_widths() -> None:
    """Coordinates on scales 1e-3 and 1e3, with matching widths."""
    s = slice_sample(
        lambda x: -0.5 * ((x[0] / 1e-3) ** 2 + (x[1] / 1e3) ** 2),
        [0.0, 0.0],
        np.random.default_rng(5),
        3000,
        widths=np.array([1e-3, 1e3]),
    )
    np.testing.assert_allclose(np.std(s, axis=0), [1e-3, 1e3], rtol=0.1)


def test_deterministic_for_seed() -> None:
    a = slice_sample(_gaussian_1d, [0.0], np.random.default_rng(7), 50, burn_in=5)
    b = slice_sample(_gaussian_1d, [0.0], np.random.default_rng(7), 50, burn_in=5)
    c = slice_sample(_gaussian_1d, [0.0], np.random.default_rng(8), 50, burn_in=5)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # and every slice move actually moves (continuous target)
    assert np.all(np.diff(a[:, 0]) != 0.0)


def test_burn_in_and_thin_select_sweeps_of_one_chain() -> None:
    """burn_in=3, thin=2 keeps the states after sweeps 5, 7, 9, 11 (1-based)."""
    kept = slice_sample(
        _gaussian_1d, [0.0], np.random.default_rng(9), 4, burn_in=3, thin=2
    )
    full = slice_sample(_gaussian_1d, [0.0], np.random.default_rng(9), 11)
    np.testing.assert_array_equal(kept, full[[4, 6, 8, 10]])


def test_log_density_gets_a_copy_and_x0_is_not_modified() -> None:
    seen: list[np.ndarray] = []

    def logp(x: np.ndarray) -> float:
        seen.append(x)
        value = -0.5 * float(x @ x)
        x[:] = 99.0  # a misbehaving callee must not corrupt the chain
        return value

    x0 = np.array([0.1, -0.2])
    s = slice_sample(logp, x0, np.random.default_rng(0), 200)
    np.testing.assert_array_equal(x0, [0.1, -0.2])
    assert np.all(np.abs(s) < 10.0)
    assert len({id(x) for x in seen}) == len(seen)


@pytest.mark.parametrize("bad", [-math.inf, math.nan])
def test_non_finite_start_raises(bad: float) -> None:
    with pytest.raises(ValueError, match="log_density\\(x0\\) must be finite"):
        slice_sample(lambda x: bad, [0.0], np.random.default_rng(0), 10)
    # outside the support of a bounded target
    with pytest.raises(ValueError, match="must be finite"):
        slice_sample(_unit_interval, [1.5], np.random.default_rng(0), 10)


def test_positive_infinite_density_raises() -> None:
    with pytest.raises(ValueError, match=r"\+inf"):
        slice_sample(lambda x: math.inf, [0.0], np.random.default_rng(0), 10)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_samples": 0}, "n_samples"),
        ({"n_samples": 2.5}, "n_samples"),
        ({"burn_in": -1}, "burn_in"),
        ({"thin": 0}, "thin"),
        ({"max_steps_out": -1}, "max_steps_out"),
        ({"widths": 0.0}, "widths"),
        ({"widths": np.array([1.0, 1.0, 1.0])}, "widths"),
        ({"x0": np.array([np.nan])}, "x0"),
        ({"x0": np.array([])}, "x0"),
    ],
)
def test_invalid_arguments_raise(kwargs: dict, match: str) -> None:
    args = {"x0": np.array([0.0]), "n_samples": 5} | kwargs
    with pytest.raises(ValueError, match=match):
        slice_sample(_gaussian_1d, rng=np.random.default_rng(0), **args)
