"""Tests for ensemble_bo.core.acquisition (EI for minimization, log EI, maximizer)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from ensemble_bo.core.acquisition import (
    _lbfgsb_in_lockstep,
    _log_h,
    _log_h_and_ratios,
    expected_improvement,
    expected_improvement_and_partials,
    integrated_expected_improvement,
    integrated_expected_improvement_and_partials,
    log_expected_improvement,
    log_expected_improvement_and_partials,
    log_integrated_expected_improvement,
    log_integrated_expected_improvement_and_partials,
    lower_confidence_bound,
    maximize_acquisition,
)


def _reference_log_h(z: float, terms: int = 300) -> float:
    """log(phi(z) + z Phi(z)) for z <= -5, independent of scipy.

    For x = -z > 0: h(z) = phi(x) (1 - x R(x)) with the Mills ratio R(x) = Phi(-x) / phi(x)
    given by the continued fraction R(x) = 1/(x + 1/(x + 2/(x + 3/(x + ...)))), evaluated
    exactly in rational arithmetic so the cancellation in 1 - x R(x) costs nothing.
    """
    x = Fraction(-z)
    t = x
    for k in range(terms, 0, -1):
        t = x + k / t
    q = 1 - x / t
    return (
        -0.5 * float(x * x)
        - 0.5 * math.log(2.0 * math.pi)
        + math.log(q.numerator)
        - math.log(q.denominator)
    )


# ---------------------------------------------------------------------------- EI
def test_ei_hand_computed_values() -> None:
    # mean = best, std = 1: z = 0 and EI = phi(0) = 1/sqrt(2 pi)
    assert expected_improvement(0.0, 1.0, 0.0) == pytest.approx(
        0.3989422804014327, rel=1e-14
    )
    # mean=1, std=2, best=0: z = -0.5, Phi(-0.5) = 0.3085375387, phi(-0.5) = 0.3520653268
    # EI = 2 * (-0.5 * 0.3085375387 + 0.3520653268) = 2 * 0.1977965574 = 0.3955931148
    assert expected_improvement(1.0, 2.0, 0.0) == pytest.approx(0.3955931148, rel=1e-9)
    # mean=0.5, std=0.5, best=2: z = 3, Phi(3) = 0.9986501020, phi(3) = 0.0044318484
    # EI = 0.5 * (3 * 0.9986501020 + 0.0044318484) = 0.5 * 3.0003821544 = 1.5001910772
    assert expected_improvement(0.5, 0.5, 2.0) == pytest.approx(1.5001910772, rel=1e-9)


def test_ei_zero_std_is_plain_improvement() -> None:
    ei = expected_improvement(np.array([1.0, 3.0, 2.0]), np.zeros(3), 2.0)
    np.testing.assert_array_equal(ei, [1.0, 0.0, 0.0])
    log_ei = log_expected_improvement(np.array([1.0, 3.0]), np.zeros(2), 2.0)
    assert log_ei[0] == 0.0
    assert log_ei[1] == -np.inf


def test_ei_broadcasts_and_rejects_negative_std() -> None:
    mean = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    ei = expected_improvement(mean, 0.3, 0.0)
    assert ei.shape == (2, 3)
    assert np.all(np.diff(ei.ravel()) < 0)  # larger mean = less improvement
    with pytest.raises(ValueError, match="std"):
        expected_improvement(0.0, -1.0, 0.0)
    with pytest.raises(ValueError, match="std"):
        log_expected_improvement(0.0, np.array([1.0, -1.0]), 0.0)


@settings(max_examples=200, deadline=None)
@given(
    mean=st.floats(-1e3, 1e3),
    std=st.floats(0.0, 1e3),
    best=st.floats(-1e3, 1e3),
)
def test_ei_properties(mean: float, std: float, best: float) -> None:
    ei = float(expected_improvement(mean, std, best))
    assert ei >= 0.0
    # Jensen: E[max(best - f, 0)] >= max(best - E f, 0)
    assert ei >= max(best - mean, 0.0) * (1 - 1e-12)
    # more uncertainty never lowers EI
    assert float(expected_improvement(mean, std + 1.0, best)) >= ei * (1 - 1e-12)


# ------------------------------------------------------------------------ log EI
def test_log_ei_agrees_with_log_of_ei() -> None:
    rng = np.random.default_rng(0)
    mean = rng.normal(0.0, 5.0, 2000)
    std = rng.uniform(0.01, 3.0, 2000)
    best = 0.0
    ei = expected_improvement(mean, std, best)
    ok = ei > 1e-300
    assert ok.sum() > 1500
    np.testing.assert_allclose(
        log_expected_improvement(mean, std, best)[ok],
        np.log(ei[ok]),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("z", [-5.0, -10.0, -37.5, -74.0, -76.0, -100.0, -1000.0, -1e4])
def test_log_ei_matches_exact_reference_deep_in_the_tail(z: float) -> None:
    # std = 1, best = 0, mean = -z, so log EI = log h(z)
    ours = float(log_expected_improvement(-z, 1.0, 0.0))
    assert ours == pytest.approx(_reference_log_h(z), rel=1e-13)


def test_log_ei_finite_and_monotone_for_very_negative_z() -> None:
    z = np.linspace(-1e3, 5.0, 200_001)  # crosses both branch switches (-75 and -1)
    log_ei = log_expected_improvement(-z, 1.0, 0.0)
    assert np.all(np.isfinite(log_ei))
    assert np.all(np.diff(log_ei) > 0)
    # plain EI has long underflowed there
    assert expected_improvement(1e3, 1.0, 0.0) == 0.0
    # scale: log EI = log std + log h(z)
    np.testing.assert_allclose(
        log_expected_improvement(-3.0 * z[:100], 3.0, 0.0),
        np.log(3.0) + log_ei[:100],
        rtol=1e-12,
    )
    assert np.isfinite(log_expected_improvement(1e100, 1.0, 0.0))


# ---------------------------------------------------------------------- partials
def _partials_by_differences(f, mean, std, best, rel_step=1e-6):
    """Central differences of f(mean, std, best) in mean and in std, elementwise."""
    h = rel_step * np.maximum(std, 1e-3)
    d_mean = (f(mean + h, std, best) - f(mean - h, std, best)) / (2.0 * h)
    d_std = (f(mean, std + h, best) - f(mean, std - h, best)) / (2.0 * h)
    return d_mean, d_std


# z = (best - mean) / std from the far tail (both log-h branches) to large z
_Z_GRID = np.concatenate([[-300.0, -80.0, -30.0, -8.0], np.linspace(-3.0, 6.0, 10)])


def test_ei_partials_match_finite_differences() -> None:
    std = np.full(_Z_GRID.size, 0.7)
    mean = 1.0 - _Z_GRID * std
    ei, d_mean, d_std = expected_improvement_and_partials(mean, std, 1.0)
    np.testing.assert_array_equal(ei, expected_improvement(mean, std, 1.0))
    fd_mean, fd_std = _partials_by_differences(expected_improvement, mean, std, 1.0)
    np.testing.assert_allclose(d_mean, fd_mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d_std, fd_std, rtol=1e-6, atol=1e-9)
    # std = 0: EI = max(best - mean, 0)
    _, d_mean, d_std = expected_improvement_and_partials([0.5, 2.0], [0.0, 0.0], 1.0)
    np.testing.assert_array_equal(d_mean, [-1.0, 0.0])
    np.testing.assert_array_equal(d_std, [0.0, 0.0])


def test_log_ei_partials_match_finite_differences_far_into_the_tail() -> None:
    std = np.full(_Z_GRID.size, 0.7)
    mean = 1.0 - _Z_GRID * std
    log_ei, d_mean, d_std = log_expected_improvement_and_partials(mean, std, 1.0)
    np.testing.assert_array_equal(log_ei, log_expected_improvement(mean, std, 1.0))
    assert np.all(np.isfinite(d_mean)) and np.all(np.isfinite(d_std))
    fd_mean, fd_std = _partials_by_differences(log_expected_improvement, mean, std, 1.0)
    # atol: at large z, d/dstd ~ phi(z) is below the differences' rounding noise
    np.testing.assert_allclose(d_mean, fd_mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d_std, fd_std, rtol=1e-6, atol=1e-9)
    # at z = -30: d log EI / dmean = -(Phi/h)(z) / std ~ -|z| (1 + 2/z^2) / std
    z30 = int(np.flatnonzero(_Z_GRID == -30.0)[0])
    assert d_mean[z30] * 0.7 == pytest.approx(-30.0 * (1.0 + 2.0 / 900.0), rel=1e-5)
    # std = 0 with improvement: d log(best - mean) / dmean = -1 / (best - mean)
    _, d_mean, d_std = log_expected_improvement_and_partials(
        [0.5, 2.0], [0.0, 0.0], 1.0
    )
    np.testing.assert_array_equal(d_mean, [-2.0, 0.0])
    np.testing.assert_array_equal(d_std, [0.0, 0.0])


@pytest.mark.parametrize("z", [-1e6, -1e3, -76.0, -74.0, -30.0, -1.0, 0.0, 3.0, 40.0])
def test_h_ratios_are_the_derivative_of_log_h_and_satisfy_its_identity(
    z: float,
) -> None:
    log_h, cdf_ratio, pdf_ratio = _log_h_and_ratios(np.array([z]))
    assert log_h[0] == _log_h(np.array([z]))[0]
    # h = phi + z Phi, so phi/h + z Phi/h = 1; in the tail the two terms nearly
    # cancel (~z^2 each), so this holds to ~eps z^2 relative to them
    assert pdf_ratio[0] + z * cdf_ratio[0] == pytest.approx(
        1.0, abs=1e-13 * max(1.0, z * z)
    )
    step = 1e-5 * max(1.0, abs(z))
    fd = (_log_h(np.array([z + step])) - _log_h(np.array([z - step])))[0] / (2 * step)
    assert cdf_ratio[0] == pytest.approx(fd, rel=1e-6)


def test_integrated_ei_partials_match_finite_differences() -> None:
    rng = np.random.default_rng(2)
    means = rng.normal(0.0, 2.0, size=(4, 7))
    stds = rng.uniform(0.1, 1.5, size=(4, 7))
    means[:, 0] = [30.0, 25.0, 40.0, 32.0]  # every sample deep in the tail
    stds[:, 0] = 1.0
    for value_and_partials, value, rtol in (
        (
            integrated_expected_improvement_and_partials,
            integrated_expected_improvement,
            1e-6,
        ),
        (
            log_integrated_expected_improvement_and_partials,
            log_integrated_expected_improvement,
            1e-6,
        ),
    ):
        out, d_means, d_stds = value_and_partials(means, stds, 0.0)
        np.testing.assert_array_equal(out, value(means, stds, 0.0))
        assert d_means.shape == d_stds.shape == means.shape
        for s in range(4):
            for partial, array in ((d_means, "means"), (d_stds, "stds")):
                h = 1e-6
                up, down = means.copy(), means.copy()
                if array == "stds":
                    up, down = stds.copy(), stds.copy()
                up[s] += h
                down[s] -= h
                args_up = (up, stds) if array == "means" else (means, up)
                args_down = (down, stds) if array == "means" else (means, down)
                fd = (value(*args_up, 0.0) - value(*args_down, 0.0)) / (2.0 * h)
                np.testing.assert_allclose(partial[s], fd, rtol=rtol, atol=1e-9)


def test_log_integrated_ei_partials_are_zero_where_no_sample_improves() -> None:
    value, d_means, d_stds = log_integrated_expected_improvement_and_partials(
        np.ones((3, 2)), np.zeros((3, 2)), 0.0
    )
    assert np.all(value == -np.inf)
    np.testing.assert_array_equal(d_means, 0.0)
    np.testing.assert_array_equal(d_stds, 0.0)


# -------------------------------------------------------------------- maximizer
def test_maximize_acquisition_finds_quadratic_peak() -> None:
    c = np.array([0.31, 0.72, 0.55])

    def acq(X: np.ndarray) -> np.ndarray:
        return -np.sum((X - c) ** 2, axis=1)

    x, val = maximize_acquisition(acq, 3, np.random.default_rng(0))
    assert x.shape == (3,)
    np.testing.assert_allclose(x, c, atol=1e-3)
    assert val == pytest.approx(float(acq(x[None, :])[0]))
    assert val > -1e-6


def test_maximize_acquisition_respects_bounds() -> None:
    c = np.array([1.4, -0.3])  # outside the cube: optimum is the projection (1, 0)

    def acq(X: np.ndarray) -> np.ndarray:
        return -np.sum((X - c) ** 2, axis=1)

    x, _ = maximize_acquisition(acq, 2, np.random.default_rng(1), n_candidates=64)
    assert np.all((x >= 0.0) & (x <= 1.0))
    np.testing.assert_allclose(x, [1.0, 0.0], atol=1e-6)


def test_maximize_acquisition_is_deterministic_and_beats_sobol_only() -> None:
    def acq(
        X: np.ndarray,
    ) -> np.ndarray:  # multimodal, max at x ~ 0.15 in each coordinate
        return np.sum(np.sin(10.0 * X) * np.exp(-X), axis=1)

    a = maximize_acquisition(acq, 2, np.random.default_rng(3), n_candidates=100)
    b = maximize_acquisition(acq, 2, np.random.default_rng(3), n_candidates=100)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]
    x0, v0 = maximize_acquisition(
        acq, 2, np.random.default_rng(3), n_candidates=100, n_local_starts=0
    )
    assert a[1] >= v0
    # the Sobol-only answer is one of the candidates and slightly worse than the refined one
    assert a[1] - v0 > 0.0
    # 1-D optimum of sin(10 x) exp(-x): 10 cos(10x) = sin(10x) -> x = atan(10)/10
    np.testing.assert_allclose(a[0], math.atan(10.0) / 10.0, atol=1e-4)


def test_maximize_acquisition_handles_non_finite_values() -> None:
    def acq(
        X: np.ndarray,
    ) -> np.ndarray:  # -inf (like log EI with no improvement) off-peak
        out = np.full(X.shape[0], -np.inf)
        inside = X[:, 0] < 0.5
        out[inside] = -((X[inside, 0] - 0.2) ** 2)
        out[np.isclose(X[:, 0], 0.9)] = np.nan
        return out

    x, val = maximize_acquisition(acq, 1, np.random.default_rng(4), n_candidates=32)
    assert np.isfinite(val)
    np.testing.assert_allclose(x, [0.2], atol=1e-3)


def test_maximize_acquisition_with_an_analytic_gradient() -> None:
    c = np.array([0.31, 0.72, 0.55])
    calls = []

    def acq(X: np.ndarray) -> np.ndarray:
        return -np.sum((X - c) ** 2, axis=1)

    def acq_and_gradient(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append(len(X))
        return acq(X), -2.0 * (X - c)

    x, val = maximize_acquisition(
        acq, 3, np.random.default_rng(0), value_and_gradient=acq_and_gradient
    )
    np.testing.assert_allclose(x, c, atol=1e-6)
    assert val == pytest.approx(float(acq(x[None, :])[0]))
    # every local search advances in the same calls: at most one row per start
    assert calls and max(calls) <= 5 and calls[0] == 5


def test_local_searches_in_lockstep_end_where_each_would_alone() -> None:
    c = np.linspace(0.1, 1.2, 4)

    def f_and_gradient(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # multimodal, with an optimum on the upper bound in the last coordinate
        d = X - c
        return np.sum(d * d + 0.3 * np.sin(9.0 * X), axis=1), 2.0 * d + 2.7 * np.cos(
            9.0 * X
        )

    starts = np.random.default_rng(5).random((6, 4))
    ends = _lbfgsb_in_lockstep(f_and_gradient, starts)
    for start, end in zip(starts, ends, strict=True):
        alone = minimize(
            lambda x: tuple(a[0] for a in f_and_gradient(x[None, :])),
            start,
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, 1.0)] * 4,
        )
        np.testing.assert_allclose(end, alone.x, rtol=0, atol=1e-12)
    assert np.any(ends[:, 3] == 1.0)


def test_local_searches_in_lockstep_pass_on_an_error() -> None:
    def failing(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise RuntimeError("model broke")

    with pytest.raises(RuntimeError, match="model broke"):
        _lbfgsb_in_lockstep(failing, np.full((3, 2), 0.5))


def test_maximize_acquisition_validates_inputs() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="acquisition must return shape"):
        maximize_acquisition(lambda X: np.zeros((X.shape[0], 1)), 2, rng)
    with pytest.raises(ValueError, match="dim"):
        maximize_acquisition(lambda X: X[:, 0], 0, rng)
    with pytest.raises(ValueError, match="n_candidates"):
        maximize_acquisition(lambda X: X[:, 0], 2, rng, n_candidates=0)
    with pytest.raises(ValueError, match="value_and_gradient must return shapes"):
        maximize_acquisition(
            lambda X: X[:, 0],
            2,
            rng,
            value_and_gradient=lambda X: (X[:, 0], np.ones(len(X))),
        )


# ------------------------------------------------------------ integrated EI / LCB
def test_integrated_ei_of_identical_samples_is_plain_ei() -> None:
    rng = np.random.default_rng(0)
    mean, std = rng.normal(size=9), rng.uniform(0.0, 2.0, size=9)
    std[0] = 0.0
    means, stds = np.tile(mean, (5, 1)), np.tile(std, (5, 1))
    ei = expected_improvement(mean, std, 0.3)
    iei = integrated_expected_improvement(means, stds, 0.3)
    assert iei.shape == (9,)
    np.testing.assert_allclose(iei, ei, rtol=1e-15, atol=0)
    np.testing.assert_allclose(
        log_integrated_expected_improvement(means, stds, 0.3),
        log_expected_improvement(mean, std, 0.3),
        rtol=1e-14,
        atol=1e-14,
    )


def test_integrated_ei_hand_computed_two_samples() -> None:
    # point 0: sample A (mean 0, std 1, best 0): EI = phi(0) = 0.3989422804
    #          sample B (mean 1, std 2, best 0): EI = 0.3955931148 (hand value above)
    #          average = (0.3989422804 + 0.3955931148) / 2 = 0.3972676976
    # point 1: sample A (mean 0.5, std 0.5): z = -1, EI = 0.5 (phi(1) - Phi(-1))
    #          = 0.5 (0.2419707245 - 0.1586552539) = 0.04165773529
    #          sample B (mean 3, std 0): no improvement, EI = 0; average 0.02082886765
    means = np.array([[0.0, 0.5], [1.0, 3.0]])
    stds = np.array([[1.0, 0.5], [2.0, 0.0]])
    iei = integrated_expected_improvement(means, stds, 0.0)
    np.testing.assert_allclose(iei, [0.3972676976, 0.02082886765], rtol=1e-9)
    log_iei = log_integrated_expected_improvement(means, stds, 0.0)
    np.testing.assert_allclose(
        log_iei, np.log([0.3972676976, 0.02082886765]), rtol=1e-9
    )


def test_log_integrated_ei_agrees_and_is_finite_deep_in_the_tail() -> None:
    rng = np.random.default_rng(1)
    means = rng.normal(0.0, 3.0, size=(6, 500))
    stds = rng.uniform(0.05, 2.0, size=(6, 500))
    iei = integrated_expected_improvement(means, stds, 0.0)
    ok = iei > 1e-300
    assert ok.sum() > 450
    np.testing.assert_allclose(
        log_integrated_expected_improvement(means, stds, 0.0)[ok],
        np.log(iei[ok]),
        rtol=1e-10,
        atol=1e-12,
    )
    # z = -1e3 and -2e3: plain EI underflows; the log average is dominated by the
    # better sample: log((EI_1 + EI_2) / 2) = log EI_1 + log1p(EI_2 / EI_1) - log 2
    means = np.array([[1e3, 5e3], [2e3, 2e3]])
    stds = np.ones((2, 2))
    assert np.all(integrated_expected_improvement(means, stds, 0.0) == 0.0)
    log_iei = log_integrated_expected_improvement(means, stds, 0.0)
    assert np.all(np.isfinite(log_iei))
    per_sample = log_expected_improvement(means, stds, 0.0)
    np.testing.assert_allclose(
        log_iei, np.max(per_sample, axis=0) - math.log(2.0), rtol=1e-12
    )
    # no sample can improve at all: -inf, without warnings or NaN
    with np.errstate(all="raise"):
        out = log_integrated_expected_improvement(
            np.ones((3, 1)), np.zeros((3, 1)), 0.0
        )
    assert out[0] == -np.inf


def test_integrated_ei_validates_shapes() -> None:
    with pytest.raises(ValueError, match="2-D"):
        integrated_expected_improvement(np.zeros(3), np.ones(3), 0.0)
    with pytest.raises(ValueError, match="2-D"):
        log_integrated_expected_improvement(np.zeros((0, 3)), np.ones((0, 3)), 0.0)
    with pytest.raises(ValueError, match="shape of means"):
        integrated_expected_improvement(np.zeros((2, 3)), np.ones((3, 2)), 0.0)
    with pytest.raises(ValueError, match="std"):
        integrated_expected_improvement(np.zeros((2, 3)), -np.ones((2, 3)), 0.0)


def test_lower_confidence_bound_hand_values() -> None:
    mean = np.array([1.0, -2.0, 0.5])
    std = np.array([0.5, 2.0, 0.0])
    np.testing.assert_allclose(
        lower_confidence_bound(mean, std, 2.0), [0.0, -6.0, 0.5], rtol=0, atol=1e-15
    )
    # beta = 0 is the posterior mean (pure exploitation)
    np.testing.assert_array_equal(lower_confidence_bound(mean, std, 0.0), mean)
    # beta = 1.96: 1 - 0.98 = 0.02, -2 - 3.92 = -5.92
    np.testing.assert_allclose(
        lower_confidence_bound(mean, std, 1.96), [0.02, -5.92, 0.5], rtol=1e-13
    )
    # maximizing -LCB picks the most promising point for minimization
    assert int(np.argmax(-lower_confidence_bound(mean, std, 2.0))) == 1


@pytest.mark.parametrize("beta", [-0.1, -np.inf, np.inf, np.nan])
def test_lower_confidence_bound_rejects_bad_beta(beta: float) -> None:
    with pytest.raises(ValueError, match="beta"):
        lower_confidence_bound(np.zeros(2), np.ones(2), beta)


def test_lower_confidence_bound_rejects_negative_std() -> None:
    with pytest.raises(ValueError, match="std"):
        lower_confidence_bound(np.zeros(2), np.array([1.0, -1.0]), 1.0)
