"""Tests for the GP surrogates: ensemble_bo.core.gp_model (Matern-5/2 ARD kernel,
likelihood), gaussian_process (ML-II, MAP) and sampled_gaussian_process."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import approx_fprime, check_grad
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from ensemble_bo.core import gaussian_process
from ensemble_bo.core.gaussian_process import GaussianProcess, map_log_prior
from ensemble_bo.core.gp_model import (
    CholeskyError,
    GPHyperparameters,
    cholesky_with_jitter,
    matern52,
)
from ensemble_bo.core.sampled_gaussian_process import SampledGaussianProcess, log_prior
from tests.support import central_gradient


def _toy_data(n: int = 25, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    y = np.sin(6.0 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.normal(size=n)
    return X, y


def _sample_gp(n: int, length_scale: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One draw of a 1-D GP (amp 1, noise 1e-4) with a Matern-5/2 kernel at n points."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 1))
    K = matern52(X, X, [length_scale], 1.0) + 1e-4 * np.eye(n)
    return X, np.linalg.cholesky(K) @ rng.normal(size=n)


# --------------------------------------------------------------------------- kernel
def test_matern52_hand_computed_pair() -> None:
    x1 = np.array([[0.1, 0.5]])
    x2 = np.array([[0.4, 0.1]])
    ls, amp = np.array([0.5, 2.0]), 1.7
    # r^2 = (0.3/0.5)^2 + (0.4/2)^2 = 0.36 + 0.04 = 0.4, r = 0.6324555...
    # sqrt5 r = sqrt(2) = 1.4142136; 5/3 r^2 = 2/3
    # k = 1.7 * (1 + 1.4142136 + 0.6666667) * exp(-1.4142136) = 1.7 * 3.0808802 * 0.2431167
    #   = 1.7 * 0.7490135 = 1.2733230
    expected = 1.7 * (1.0 + math.sqrt(2.0) + 2.0 / 3.0) * math.exp(-math.sqrt(2.0))
    assert expected == pytest.approx(1.2733230, abs=1e-6)
    k = matern52(x1, x2, ls, amp)
    assert k.shape == (1, 1)
    assert k[0, 0] == pytest.approx(expected, rel=1e-13)


def test_matern52_matches_sklearn_and_is_symmetric() -> None:
    rng = np.random.default_rng(3)
    X1, X2 = rng.uniform(size=(7, 3)), rng.uniform(size=(5, 3))
    ls = np.array([0.2, 0.7, 1.5])
    ours = matern52(X1, X2, ls, 2.5)
    ref = 2.5 * Matern(length_scale=ls, nu=2.5)(X1, X2)
    assert ours.shape == (7, 5)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-14)
    K = matern52(X1, X1, ls, 2.5)
    np.testing.assert_allclose(K, K.T, rtol=0, atol=0)
    np.testing.assert_allclose(np.diag(K), 2.5, rtol=1e-15)


# ------------------------------------------------------------ posterior vs sklearn
@pytest.mark.parametrize("y_scale, y_shift", [(1.0, 0.0), (37.0, -5.0)])
def test_condition_matches_sklearn(y_scale: float, y_shift: float) -> None:
    """condition() equals sklearn's GPR for the same, fixed hyperparameters.

    Our model lives in standardized units: ys = (y - m) / s with m = mean(y), s = std(y),
        ys = mu + f_s + eps,  f_s ~ GP(0, amp * Matern52(ls)),  eps ~ N(0, noise).
    In original units y = m + s * ys, so y = (m + s * mu) + f + e with
        f ~ GP(0, s^2 * amp * Matern52(ls)),  e ~ N(0, s^2 * noise).
    sklearn (normalize_y=False, zero prior mean, alpha=0) therefore gets
        kernel = ConstantKernel(s^2 amp) * Matern(ls, nu=2.5) + WhiteKernel(s^2 noise)
    fitted on y - (m + s * mu); its predictive mean plus (m + s * mu) is our latent mean.
    sklearn's predictive variance includes WhiteKernel.diag = s^2 noise, so our latent
    variance is sklearn_std^2 - s^2 * noise. The log marginal likelihoods differ by the
    Jacobian of the standardization: LML_orig = LML_std - n log s.
    """
    X, y = _toy_data(n=30, d=3, seed=1)
    y = y_shift + y_scale * y
    hp = GPHyperparameters(
        amplitude=1.3, length_scales=np.array([0.3, 0.6, 2.0]), noise=1e-3, mean=0.4
    )
    gp = GaussianProcess().condition(X, y, hp)
    m, s = float(np.mean(y)), float(np.std(y))
    assert gp.y_mean == pytest.approx(m)
    assert gp.y_std == pytest.approx(s)
    prior_mean = m + s * hp.mean

    kernel = ConstantKernel(s**2 * hp.amplitude) * Matern(
        length_scale=hp.length_scales, nu=2.5
    ) + WhiteKernel(s**2 * hp.noise)
    sk = GaussianProcessRegressor(
        kernel=kernel, alpha=0.0, optimizer=None, normalize_y=False
    )
    sk.fit(X, y - prior_mean)

    Xt = np.vstack([np.random.default_rng(2).uniform(size=(40, 3)), X[:5]])
    mu, sd = gp.predict(Xt)
    sk_mu, sk_sd = sk.predict(Xt, return_std=True)
    np.testing.assert_allclose(mu, sk_mu + prior_mean, rtol=1e-9, atol=1e-9 * y_scale)
    sk_latent_var = sk_sd**2 - s**2 * hp.noise
    np.testing.assert_allclose(sd**2, sk_latent_var, rtol=1e-7, atol=1e-10 * y_scale**2)

    n = len(y)
    assert gp.log_marginal_likelihood() - n * math.log(s) == pytest.approx(
        sk.log_marginal_likelihood_value_, rel=1e-10
    )
    assert gp.hyperparameters == hp


def test_predict_shapes_and_interpolation() -> None:
    X, y = _toy_data(n=20, d=2)
    gp = GaussianProcess().condition(
        X,
        y,
        GPHyperparameters(
            amplitude=1.0, length_scales=[0.3, 0.3], noise=1e-8, mean=0.0
        ),
    )
    mu, sd = gp.predict(X)
    assert mu.shape == (20,) and sd.shape == (20,)
    # near-noiseless GP interpolates the data and is (almost) certain there
    np.testing.assert_allclose(mu, y, atol=1e-4)
    assert np.all(sd < 1e-3 * gp.y_std)
    far_mu, far_sd = gp.predict(np.array([[5.0, 5.0]]))
    # far from the data: prior mean and prior std (in original units)
    assert far_mu[0] == pytest.approx(gp.y_mean, abs=1e-9)
    assert far_sd[0] == pytest.approx(gp.y_std, rel=1e-9)


# -------------------------------------------------------------- prediction gradient
def _gradient_test_points(X: np.ndarray, seed: int) -> np.ndarray:
    """Random points, training inputs, and points 1e-3 away from training inputs."""
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    near = X[:4] + 1e-3 * rng.choice([-1.0, 1.0], size=(4, d))
    return np.vstack([rng.uniform(0.05, 0.95, size=(6, d)), X[:4], near])


@pytest.mark.parametrize("d", [1, 3, 6])
@pytest.mark.parametrize("noise", [1e-2, 1e-4])
def test_predict_gradient_matches_finite_differences(d: int, noise: float) -> None:
    rng = np.random.default_rng(d)
    X = rng.uniform(size=(30, d))
    y = 3.0 * np.sin(6.0 * X.sum(axis=1)) + 1.0  # not standardized: y's units
    hp = GPHyperparameters(
        amplitude=1.3, length_scales=np.linspace(0.2, 0.6, d), noise=noise, mean=0.1
    )
    gp = GaussianProcess().condition(X, y, hp)
    points = _gradient_test_points(X, seed=d)
    mean, std, d_mean, d_std = gp.predict_with_gradient(points)
    mu, sd = gp.predict(points)
    np.testing.assert_allclose(mean, mu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std, sd, rtol=1e-9, atol=1e-12)
    assert d_mean.shape == d_std.shape == points.shape
    fd_mean = central_gradient(lambda P: gp.predict(P)[0], points)
    fd_std = central_gradient(lambda P: gp.predict(P)[1], points)
    # relative to each point's largest component: at a training input a
    # component is ~0 and only differences of rounding errors are left
    for analytic, numeric in ((d_mean, fd_mean), (d_std, fd_std)):
        scale = np.abs(numeric).max(axis=1, keepdims=True) + 1e-6
        assert np.all(np.abs(analytic - numeric) <= 1e-5 * scale)


def test_predict_gradient_is_zero_at_a_lone_training_point() -> None:
    """dk/dx has no 1/r left: at r = 0 the kernel's gradient is exactly 0, not NaN."""
    x0 = np.array([[0.3, 0.6]])
    hp = GPHyperparameters(amplitude=1.0, length_scales=[0.2, 0.5], noise=0.0, mean=0.0)
    gp = GaussianProcess().condition(np.vstack([x0, [[0.9, 0.1]]]), [1.0, -1.0], hp)
    gp_one = GaussianProcess().condition(x0, [2.0], hp)
    _, std, d_mean, d_std = gp_one.predict_with_gradient(x0)
    np.testing.assert_array_equal(d_mean, 0.0)
    # noiseless: std is 0 at the training point, a minimum, so its gradient is 0
    assert std[0] == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_array_equal(d_std, 0.0)
    _, _, d_mean, d_std = gp.predict_with_gradient(x0)
    assert np.all(np.isfinite(d_mean)) and np.all(np.isfinite(d_std))


def test_sampled_gp_predict_gradient_is_one_gradient_per_sample() -> None:
    X, y = _toy_data(n=25, d=3, seed=5)
    gp = SampledGaussianProcess(n_samples=3, seed=2).fit(X, 10.0 * y)
    points = _gradient_test_points(X, seed=6)
    means, stds, d_means, d_stds = gp.predict_with_gradient(points)
    assert d_means.shape == d_stds.shape == (3, len(points), 3)
    np.testing.assert_array_equal(means, gp.predict(points)[0])
    for s, hp in enumerate(gp.samples):
        expected = GaussianProcess().condition(X, 10.0 * y, hp)
        _, _, d_mean, d_std = expected.predict_with_gradient(points)
        np.testing.assert_allclose(d_means[s], d_mean, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(d_stds[s], d_std, rtol=1e-9, atol=1e-9)
    fd = central_gradient(lambda P: gp.predict(P)[1][1], points)
    scale = np.abs(fd).max(axis=1, keepdims=True) + 1e-6
    assert np.all(np.abs(d_stds[1] - fd) <= 1e-5 * scale)


# ------------------------------------------------------------------ ML-II gradient
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lml_gradient_matches_finite_differences(seed: int) -> None:
    X, y = _toy_data(n=25, d=3, seed=seed)
    gp = GaussianProcess().condition(
        X,
        y,
        GPHyperparameters(amplitude=1.0, length_scales=[0.5] * 3, noise=1e-2, mean=0.0),
    )
    rng = np.random.default_rng(seed)
    theta = np.concatenate(
        [
            rng.normal(0.0, 0.5, 1),
            np.log(rng.uniform(0.1, 1.0, 3)),
            [math.log(rng.uniform(1e-3, 1e-1))],
            rng.normal(0.0, 0.5, 1),
        ]
    )
    value, grad = gp.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(gp.log_marginal_likelihood(theta), rel=1e-12)
    assert grad.shape == (3 + 3,)

    def f(t: np.ndarray) -> float:
        return gp.log_marginal_likelihood(t)

    def g(t: np.ndarray) -> np.ndarray:
        return gp.log_marginal_likelihood(t, eval_gradient=True)[1]

    err = check_grad(f, g, theta, epsilon=1e-6)
    assert err < 1e-5 * max(1.0, np.linalg.norm(grad))
    # central differences, component-wise
    h = 1e-5
    fd = np.array(
        [(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(theta.size)]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_lml_gradient_at_fitted_optimum_is_small_for_interior_parameters() -> None:
    X, y = _toy_data(n=30, d=2, seed=4)
    gp = GaussianProcess(n_restarts=3, seed=0).fit(X, y)
    theta = gp.hyperparameters.theta
    _, grad = gp.log_marginal_likelihood(theta, eval_gradient=True)
    fd = approx_fprime(theta, lambda t: gp.log_marginal_likelihood(t), 1e-7)
    np.testing.assert_allclose(grad, fd, rtol=1e-3, atol=1e-3)
    lo, hi = np.log(1e-2), np.log(1e1)
    interior = (theta[1:3] > lo + 1e-3) & (theta[1:3] < hi - 1e-3)
    assert np.all(np.abs(grad[1:3][interior]) < 1e-2)


# ------------------------------------------------------------------------- ML-II
def test_ml2_recovers_length_scale() -> None:
    """Data from a 1-D GP with l = 0.2 (60 points): ML-II estimates l within a factor 1.5.

    One sample path is a noisy estimate, so take the median over 5 draws and require each
    single draw within a factor 2.
    """
    estimates = []
    for seed in range(5):
        X, y = _sample_gp(60, 0.2, seed)
        gp = GaussianProcess(n_restarts=3, seed=0).fit(X, y)
        estimates.append(gp.hyperparameters.length_scales[0])
    estimates = np.array(estimates)
    assert 0.2 / 1.5 < np.median(estimates) < 0.2 * 1.5
    assert np.all((estimates > 0.2 / 2) & (estimates < 0.2 * 2))


def test_fit_finds_same_optimum_as_many_restarts() -> None:
    X, y = _sample_gp(60, 0.2, 0)
    few = GaussianProcess(n_restarts=3, seed=0).fit(X, y)
    many = GaussianProcess(n_restarts=30, seed=1).fit(X, y)
    assert few.log_marginal_likelihood() == pytest.approx(
        many.log_marginal_likelihood(), abs=1e-4
    )
    # ... and ML-II is at least as good as the data-generating hyperparameters
    true_theta = GPHyperparameters(
        amplitude=1.0 / np.std(y) ** 2,
        length_scales=[0.2],
        noise=1e-4 / np.std(y) ** 2,
        mean=-np.mean(y) / np.std(y),
    ).theta
    assert few.log_marginal_likelihood() >= few.log_marginal_likelihood(true_theta)


def test_ard_switches_off_irrelevant_dimension() -> None:
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(50, 2))
    y = np.sin(8.0 * X[:, 0])  # dimension 1 is irrelevant
    ls = GaussianProcess(seed=0).fit(X, y).hyperparameters.length_scales
    assert ls[1] > 10 * ls[0]


def test_fit_is_deterministic_for_seed_and_warm_starts() -> None:
    X, y = _toy_data(n=30, d=3, seed=6)
    a = GaussianProcess(seed=7).fit(X, y)
    b = GaussianProcess(seed=7).fit(X, y)
    assert a.hyperparameters == b.hyperparameters
    np.testing.assert_array_equal(a.predict(X)[0], b.predict(X)[0])
    # refitting warm-starts from the previous optimum: no worse than the first fit
    lml_first = a.log_marginal_likelihood()
    a.fit(X, y)
    assert a.log_marginal_likelihood() >= lml_first - 1e-8
    # a new d discards the warm start instead of failing
    a.fit(X[:, :2], y)
    assert a.hyperparameters.length_scales.shape == (2,)


def test_fit_is_equivariant_to_affine_y_transforms() -> None:
    X, y = _toy_data(n=30, d=2, seed=8)
    Xt = np.random.default_rng(9).uniform(size=(10, 2))
    mu, sd = GaussianProcess(seed=0).fit(X, y).predict(Xt)
    for scale, shift in [(1e8, 3e8), (1e-8, -2e-8)]:
        mu2, sd2 = GaussianProcess(seed=0).fit(X, scale * y + shift).predict(Xt)
        np.testing.assert_allclose(mu2, scale * mu + shift, rtol=1e-6)
        np.testing.assert_allclose(sd2, scale * sd, rtol=1e-5)


# -------------------------------------------------------------------- robustness
def _assert_finite_predictions(
    gp: GaussianProcess, d: int
) -> tuple[np.ndarray, np.ndarray]:
    Xt = np.random.default_rng(0).uniform(size=(17, d))
    mu, sd = gp.predict(Xt)
    assert mu.shape == (17,) and sd.shape == (17,)
    assert np.all(np.isfinite(mu)) and np.all(np.isfinite(sd)) and np.all(sd >= 0)
    return mu, sd


def test_single_point() -> None:
    gp = GaussianProcess().fit(np.array([[0.3, 0.4]]), np.array([2.5]))
    mu, sd = _assert_finite_predictions(gp, 2)
    # with no variation to learn from, the GP stays at the observation with prior spread
    np.testing.assert_allclose(gp.predict(np.array([[0.3, 0.4]]))[0], [2.5], atol=1e-3)
    assert np.all(sd > 0.1)


def test_two_points() -> None:
    X = np.array([[0.1], [0.9]])
    gp = GaussianProcess().fit(X, np.array([1.0, 3.0]))
    mu, _ = _assert_finite_predictions(gp, 1)
    assert np.all((mu > 0.0) & (mu < 4.0))


def test_duplicate_points() -> None:
    X = np.array([[0.2, 0.2], [0.2, 0.2], [0.2, 0.2], [0.7, 0.1], [0.5, 0.9]])
    y = np.array([1.0, 1.2, 0.8, 3.0, 2.0])
    gp = GaussianProcess().fit(X, y)
    _assert_finite_predictions(gp, 2)
    # the repeated point's prediction is pulled to the average of its observations
    assert gp.predict(X[:1])[0][0] == pytest.approx(1.0, abs=0.15)
    # exact duplicates with noise ~ 0 need the jitter path
    gp2 = GaussianProcess().condition(
        X,
        y,
        GPHyperparameters(amplitude=1.0, length_scales=[0.3, 0.3], noise=0.0, mean=0.0),
    )
    _assert_finite_predictions(gp2, 2)


def test_constant_y() -> None:
    X = np.random.default_rng(1).uniform(size=(8, 3))
    y = np.full(8, 0.1)  # np.std gives ~1e-17 here, not 0
    gp = GaussianProcess().fit(X, y)
    assert gp.y_std == 1.0
    mu, _ = _assert_finite_predictions(gp, 3)
    np.testing.assert_allclose(mu, 0.1, atol=1e-9)


@pytest.mark.parametrize("scale", [1e8, 1e-8])
def test_extreme_y_scales(scale: float) -> None:
    X, y = _toy_data(n=20, d=2, seed=2)
    gp = GaussianProcess().fit(X, scale * y)
    mu, sd = _assert_finite_predictions(gp, 2)
    assert np.max(np.abs(mu)) < 10 * scale
    assert gp.y_std == pytest.approx(scale * np.std(y))


@pytest.mark.parametrize(
    "X, y, match",
    [
        (np.zeros(5), np.zeros(5), "X must be a 2-D"),
        (np.zeros((2, 3, 1)), np.zeros(2), "X must be a 2-D"),
        (np.zeros((0, 2)), np.zeros(0), "at least one row"),
        (np.zeros((3, 0)), np.zeros(3), "at least one column"),
        (np.zeros((4, 2)), np.zeros(3), "y length mismatch"),
        (np.zeros((4, 2)), np.zeros((4, 1)), "y must be a 1-D"),
        (np.array([[0.1, np.nan], [0.2, 0.3]]), np.zeros(2), "X contains NaN or inf"),
        (np.array([[0.1, np.inf], [0.2, 0.3]]), np.zeros(2), "X contains NaN or inf"),
        (np.zeros((2, 2)), np.array([1.0, np.nan]), "y contains NaN or inf"),
        (np.zeros((2, 2)), np.array([1.0, -np.inf]), "y contains NaN or inf"),
    ],
)
def test_bad_inputs_raise(X: np.ndarray, y: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GaussianProcess().fit(X, y)
    hp = GPHyperparameters(amplitude=1.0, length_scales=[0.5], noise=1e-3, mean=0.0)
    with pytest.raises(ValueError, match=match):
        GaussianProcess().condition(X, y, hp)


def test_bad_predict_and_hyperparameter_inputs_raise() -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        GaussianProcess().predict(np.zeros((1, 2)))
    X, y = _toy_data(n=10, d=2)
    gp = GaussianProcess().fit(X, y)
    with pytest.raises(ValueError, match="d=3 columns"):
        gp.predict(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="X contains NaN"):
        gp.predict(np.array([[np.nan, 0.1]]))
    with pytest.raises(ValueError, match="2 length scales"):
        GaussianProcess().condition(
            np.zeros((3, 3)),
            np.zeros(3),
            GPHyperparameters(
                amplitude=1.0, length_scales=[0.5, 0.5], noise=1e-3, mean=0.0
            ),
        )
    with pytest.raises(ValueError, match="theta must have length"):
        gp.log_marginal_likelihood(np.zeros(3))
    with pytest.raises(ValueError, match="amplitude"):
        GPHyperparameters(amplitude=-1.0, length_scales=[0.5], noise=1e-3, mean=0.0)
    with pytest.raises(ValueError, match="length_scales"):
        GPHyperparameters(amplitude=1.0, length_scales=[0.0], noise=1e-3, mean=0.0)
    with pytest.raises(ValueError, match="noise"):
        GPHyperparameters(amplitude=1.0, length_scales=[0.5], noise=np.nan, mean=0.0)
    with pytest.raises(ValueError, match="n_restarts"):
        GaussianProcess(n_restarts=-1)


def test_cholesky_jitter_escalation_and_error() -> None:
    assert issubclass(CholeskyError, np.linalg.LinAlgError)
    # singular PSD matrix: succeeds once jitter is added, and stays close to K
    K = np.ones((3, 3))
    L = cholesky_with_jitter(K)
    np.testing.assert_allclose(L @ L.T, K, atol=1e-6)
    assert np.allclose(L, np.tril(L))
    # indefinite matrix (eigenvalues -1 and 3): no small jitter can fix it
    with pytest.raises(CholeskyError, match="not positive definite"):
        cholesky_with_jitter(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(CholeskyError, match="NaN or inf"):
        cholesky_with_jitter(np.array([[np.nan, 0.0], [0.0, 1.0]]))


def test_hyperparameters_roundtrip_theta() -> None:
    hp = GPHyperparameters(
        amplitude=2.0, length_scales=[0.1, 3.0], noise=1e-4, mean=-0.3
    )
    back = GPHyperparameters.from_theta(hp.theta)
    assert back.amplitude == pytest.approx(2.0)
    np.testing.assert_allclose(back.length_scales, [0.1, 3.0])
    assert back.noise == pytest.approx(1e-4)
    assert back.mean == -0.3
    assert not hp.length_scales.flags.writeable


# ----------------------------------------------------------------- log prior
_LOG_AMP = (math.log(1e-3), math.log(1e2))
_LOG_LS = (math.log(1e-2), math.log(1e1))
_LOG_NOISE = (math.log(1e-6), math.log(1e1))


def _theta(log_amp=0.0, log_ls=(-1.0, -0.5), log_noise=-3.0, mean=0.2) -> np.ndarray:
    return np.array([log_amp, *log_ls, log_noise, mean])


def test_log_prior_finite_inside_and_minus_inf_outside_bounds() -> None:
    mb = (-1.5, 2.0)
    assert math.isfinite(log_prior(_theta(), 2, mean_bounds=mb))
    # the ML-II bounds themselves belong to the support
    corner_lo = np.array([_LOG_AMP[0], _LOG_LS[0], _LOG_LS[0], _LOG_NOISE[0], mb[0]])
    corner_hi = np.array([_LOG_AMP[1], _LOG_LS[1], _LOG_LS[1], _LOG_NOISE[1], mb[1]])
    assert math.isfinite(log_prior(corner_lo, 2, mean_bounds=mb))
    assert math.isfinite(log_prior(corner_hi, 2, mean_bounds=mb))
    for i in range(5):
        for corner, step in ((corner_lo, -1e-9), (corner_hi, 1e-9)):
            out = corner.copy()
            out[i] += step
            assert log_prior(out, 2, mean_bounds=mb) == -math.inf, (i, step)
    assert log_prior(_theta(mean=np.nan), 2) == -math.inf
    # without mean bounds the mean is unrestricted
    assert math.isfinite(log_prior(_theta(mean=1e6), 2))
    # min_noise moves the lower noise bound, as for GaussianProcess
    low_noise = _theta(log_noise=math.log(1e-7))
    assert log_prior(low_noise, 2) == -math.inf
    assert math.isfinite(log_prior(low_noise, 2, min_noise=1e-8))
    with pytest.raises(ValueError, match="theta must have length"):
        log_prior(np.zeros(4), 2)
    with pytest.raises(ValueError, match="d must be"):
        log_prior(np.zeros(3), 0)


def test_log_prior_hand_values() -> None:
    base = log_prior(_theta(), 2, mean_bounds=(-3.0, 3.0))
    # log amplitude ~ N(0, 1): log density differences -x^2 / 2
    assert log_prior(_theta(log_amp=1.0), 2) - log_prior(_theta(), 2) == pytest.approx(
        -0.5, abs=1e-12
    )
    assert log_prior(_theta(log_amp=-2.0), 2) - log_prior(_theta(), 2) == pytest.approx(
        -2.0, abs=1e-12
    )
    # length scales log-uniform and mean top-hat: flat inside the bounds
    assert log_prior(_theta(log_ls=(-4.0, 2.0)), 2, mean_bounds=(-3.0, 3.0)) == base
    assert log_prior(_theta(mean=-2.9), 2, mean_bounds=(-3.0, 3.0)) == base
    # noise: p(u = log noise) ∝ noise * log(1 + (0.1 / noise)^2)
    #   noise = 0.1:  log(log 2) + log 0.1        = -0.366513 - 2.302585 = -2.669098
    #   noise = 1e-3: log(log(1 + 1e4)) + log 1e-3 =  2.220337 - 6.907755 = -4.687418
    diff = log_prior(_theta(log_noise=math.log(0.1)), 2) - log_prior(
        _theta(log_noise=math.log(1e-3)), 2
    )
    assert diff == pytest.approx(-2.669098 + 4.687418, abs=1e-6)
    # ... and it is a proper density in u: mass in the tails vanishes
    u = np.linspace(_LOG_NOISE[0], _LOG_NOISE[1], 2001)
    lp = np.array([log_prior(_theta(log_noise=v), 2) for v in u])
    # mode: d/du [u + log log(1 + x)] = 0 with x = (0.1 / noise)^2 gives
    # log(1 + x) = 2x / (1 + x), x = 3.92155, noise = 0.1 / sqrt(x) = 0.0505
    assert u[np.argmax(lp)] == pytest.approx(-2.98583, abs=0.01)
    # noise = 1e-6: log(log(1 + 1e10)) - 13.8155 = -10.68; noise = 10: log(1e-4) + 2.30 = -6.91
    assert lp[0] == pytest.approx(-10.68, abs=0.01)
    assert lp[-1] == pytest.approx(-6.91, abs=0.01)


# ------------------------------------------------------- sampled GP (slice sampling)
def _thetas(gp: SampledGaussianProcess) -> np.ndarray:
    return np.array([hp.theta for hp in gp.samples])


def test_sampled_gp_samples_are_in_bounds_and_vary() -> None:
    X, y = _toy_data(n=30, d=3, seed=0)
    gp = SampledGaussianProcess(seed=0).fit(X, y)
    samples = gp.samples
    assert len(samples) == 10
    assert all(isinstance(hp, GPHyperparameters) for hp in samples)
    ys = (y - y.mean()) / y.std()
    mb = (ys.min() - 1.0, ys.max() + 1.0)
    for hp in samples:
        assert math.isfinite(log_prior(hp.theta, 3, mean_bounds=mb))
        assert 1e-3 <= hp.amplitude <= 1e2
        assert np.all((hp.length_scales >= 1e-2) & (hp.length_scales <= 1e1))
        assert 1e-6 <= hp.noise <= 1e1
    thetas = _thetas(gp)
    # every coordinate moves: 10 distinct values per hyperparameter
    for j in range(thetas.shape[1]):
        assert len(np.unique(thetas[:, j])) == 10, j
    # ARD: the strongly relevant input (0: sin(6 x)) has a shorter length scale than
    # the irrelevant one (2) in every sample; the weak x^2 input (1) on average
    ls = np.exp(thetas[:, 1:4])
    assert np.all(ls[:, 0] < ls[:, 2])
    assert np.mean(np.log(ls[:, 1])) < np.mean(np.log(ls[:, 2]))


def test_sampled_gp_recovers_length_scale() -> None:
    """80 points of a 1-D GP with l = 0.2: posterior-sample mean of l within a factor 2."""
    for seed in range(3):
        X, y = _sample_gp(80, 0.2, seed)
        gp = SampledGaussianProcess(seed=seed).fit(X, y)
        ls = np.array([hp.length_scales[0] for hp in gp.samples])
        assert 0.1 < np.mean(ls) < 0.4, (seed, ls)


def test_sampled_gp_predict_is_one_posterior_per_sample() -> None:
    X, y = _toy_data(n=25, d=2, seed=3)
    y = 40.0 * y - 7.0
    gp = SampledGaussianProcess(n_samples=4, seed=1).fit(X, y)
    Xt = np.random.default_rng(4).uniform(size=(13, 2))
    means, stds = gp.predict(Xt)
    assert means.shape == (4, 13) and stds.shape == (4, 13)
    assert np.all(np.isfinite(means)) and np.all(stds >= 0)
    # row s is the GaussianProcess posterior under sample s, in original y units
    for s, hp in enumerate(gp.samples):
        mu, sd = GaussianProcess().condition(X, y, hp).predict(Xt)
        np.testing.assert_allclose(means[s], mu, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(stds[s], sd, rtol=1e-8, atol=1e-10)
    assert not np.allclose(means[0], means[1])


def test_sampled_gp_continues_chain_without_reinitialize() -> None:
    """reinitialize=False: two fits of 5 on the same data are one chain of 10."""
    X, y = _toy_data(n=20, d=2, seed=5)
    kw = {"n_samples": 5, "burn_in": 0, "thin": 1, "seed": 3}
    one_chain = _thetas(SampledGaussianProcess(**{**kw, "n_samples": 10}).fit(X, y))

    cont = SampledGaussianProcess(reinitialize=False, **kw)
    first = _thetas(cont.fit(X, y))
    second = _thetas(cont.fit(X, y))
    np.testing.assert_array_equal(first, one_chain[:5])
    # samples[-1].theta is log(exp(theta)) of the chain's state: equal up to rounding
    np.testing.assert_allclose(cont.chain_start, first[-1], rtol=1e-14, atol=0)
    np.testing.assert_array_equal(second, one_chain[5:])

    # reinitialize=True restarts at the ML-II point: same first half, different second
    fresh = SampledGaussianProcess(reinitialize=True, **kw)
    np.testing.assert_array_equal(_thetas(fresh.fit(X, y)), one_chain[:5])
    start_1 = fresh.chain_start
    second_fresh = _thetas(fresh.fit(X, y))
    np.testing.assert_array_equal(fresh.chain_start, start_1)
    assert not np.array_equal(fresh.chain_start, first[-1])
    assert not np.allclose(second_fresh, one_chain[5:])


def test_sampled_gp_continued_chain_keeps_the_gp_in_original_units() -> None:
    """With new data the standardization changes; the continued start is the previous
    last sample re-expressed: same amplitude, noise (in y units^2) and mean (y units)."""
    X, y = _toy_data(n=30, d=2, seed=6)
    gp = SampledGaussianProcess(n_samples=3, reinitialize=False, seed=0)
    gp.fit(X[:20], y[:20])
    last, m0, s0 = gp.samples[-1], gp.y_mean, gp.y_std
    gp.fit(X, y)
    m1, s1 = gp.y_mean, gp.y_std
    assert s1 != pytest.approx(s0, rel=1e-3)
    start = GPHyperparameters.from_theta(gp.chain_start)
    assert start.amplitude * s1**2 == pytest.approx(last.amplitude * s0**2, rel=1e-12)
    assert start.noise * s1**2 == pytest.approx(last.noise * s0**2, rel=1e-12)
    assert m1 + s1 * start.mean == pytest.approx(m0 + s0 * last.mean, rel=1e-12)
    np.testing.assert_allclose(start.length_scales, last.length_scales, rtol=1e-15)
    # a change of d starts afresh instead of failing
    gp.fit(X[:, :1], y)
    assert gp.samples[0].length_scales.shape == (1,)


def test_sampled_gp_is_deterministic_and_affine_equivariant() -> None:
    X, y = _toy_data(n=25, d=2, seed=7)
    Xt = np.random.default_rng(8).uniform(size=(6, 2))
    a = SampledGaussianProcess(n_samples=3, seed=2).fit(X, y)
    b = SampledGaussianProcess(n_samples=3, seed=2).fit(X, y)
    np.testing.assert_array_equal(_thetas(a), _thetas(b))
    c = SampledGaussianProcess(n_samples=3, seed=3).fit(X, y)
    assert not np.array_equal(_thetas(a), _thetas(c))
    mu, sd = a.predict(Xt)
    mu2, sd2 = (
        SampledGaussianProcess(n_samples=3, seed=2).fit(X, 1e6 * y - 3.0).predict(Xt)
    )
    np.testing.assert_allclose(mu2, 1e6 * mu - 3.0, rtol=1e-6)
    np.testing.assert_allclose(sd2, 1e6 * sd, rtol=1e-5)


def test_sampled_gp_robustness() -> None:
    # constant y: no chain, the default hyperparameters, exact constant prediction
    Xc = np.random.default_rng(1).uniform(size=(8, 3))
    gp = SampledGaussianProcess(n_samples=4).fit(Xc, np.full(8, 0.1))
    assert gp.chain_start is None and gp.y_std == 1.0
    mu, sd = gp.predict(Xc[:3])
    assert mu.shape == (4, 3)
    np.testing.assert_allclose(mu, 0.1, atol=1e-9)
    # single point (constant after standardization)
    gp.fit(np.array([[0.3, 0.4]]), np.array([2.5]))
    mu, sd = gp.predict(np.array([[0.3, 0.4], [0.9, 0.9]]))
    np.testing.assert_allclose(mu[:, 0], 2.5, atol=1e-3)
    assert np.all(sd[:, 1] > 0.5)  # prior spread away from the point
    # two points
    gp = SampledGaussianProcess(n_samples=4).fit(np.array([[0.1], [0.9]]), [1.0, 3.0])
    mu, sd = gp.predict(np.linspace(0, 1, 7)[:, None])
    assert np.all(np.isfinite(mu)) and np.all((mu > 0.0) & (mu < 4.0))
    # exact duplicates
    Xd = np.array([[0.2, 0.2], [0.2, 0.2], [0.2, 0.2], [0.7, 0.1], [0.5, 0.9]])
    yd = np.array([1.0, 1.2, 0.8, 3.0, 2.0])
    gp = SampledGaussianProcess(n_samples=4).fit(Xd, yd)
    mu, sd = gp.predict(Xd)
    assert np.all(np.isfinite(mu)) and np.all(np.isfinite(sd)) and np.all(sd >= 0)
    assert len(gp.samples) == 4


def test_sampled_gp_bad_inputs_raise() -> None:
    with pytest.raises(RuntimeError, match="not fitted"):
        SampledGaussianProcess().predict(np.zeros((1, 2)))
    with pytest.raises(RuntimeError, match="not fitted"):
        SampledGaussianProcess().samples
    for X, y, match in [
        (np.zeros(5), np.zeros(5), "X must be a 2-D"),
        (np.zeros((4, 2)), np.zeros(3), "y length mismatch"),
        (np.array([[0.1, np.nan], [0.2, 0.3]]), np.zeros(2), "X contains NaN"),
        (np.zeros((2, 2)), np.array([1.0, np.inf]), "y contains NaN"),
    ]:
        with pytest.raises(ValueError, match=match):
            SampledGaussianProcess().fit(X, y)
    X, y = _toy_data(n=10, d=2)
    gp = SampledGaussianProcess(n_samples=2, burn_in=0, thin=1).fit(X, y)
    with pytest.raises(ValueError, match="d=3 columns"):
        gp.predict(np.zeros((1, 3)))
    for kwargs, match in [
        ({"n_samples": 0}, "n_samples"),
        ({"burn_in": -1}, "burn_in"),
        ({"thin": 0}, "thin"),
        ({"min_noise": 0.0}, "min_noise"),
    ]:
        with pytest.raises(ValueError, match=match):
            SampledGaussianProcess(**kwargs)


def test_map_log_prior_by_hand_and_its_gradient():
    d = 3
    # l = amp = noise = 1: -(0.1 + 0.1) per length scale, log 1 - 1, 0.1 log 1 - 30
    value, grad = map_log_prior(np.zeros(d + 3), d)
    assert value == pytest.approx(-0.2 * d - 1.0 - 30.0)
    np.testing.assert_allclose(grad, [0.0, 0.0, 0.0, 0.0, -29.9, 0.0], atol=1e-12)
    theta = np.array([0.3, -1.0, 0.5, 2.0, -4.0, 0.2])
    error = check_grad(
        lambda t: map_log_prior(t, d)[0], lambda t: map_log_prior(t, d)[1], theta
    )
    assert error < 1e-5


def test_map_fit_is_pulled_towards_the_prior_mode():
    rng = np.random.default_rng(0)
    X = rng.random((15, 2))
    y = np.sin(6 * X[:, 0])  # the second input is irrelevant
    ml2 = GaussianProcess(seed=0).fit(X, y).hyperparameters
    map_ = GaussianProcess(seed=0, prior=True).fit(X, y).hyperparameters
    # ML-II switches the irrelevant input off (scale at its upper bound); the prior,
    # with its mode at l = 1, keeps it nearer
    assert map_.length_scales[1] < ml2.length_scales[1]
    assert abs(np.log(map_.length_scales[1])) < abs(np.log(ml2.length_scales[1]))


def test_ml2_map_and_slice_are_each_the_answer_of_their_own_criterion():
    """Same 10 noisy points: ML-II maximizes the likelihood, MAP likelihood x prior,
    and slice sampling spreads around the ML-II point it starts from."""
    rng = np.random.default_rng(0)
    X = rng.random((10, 2))
    y = np.sin(5 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=10)
    ml2 = GaussianProcess(seed=0).fit(X, y)
    map_ = GaussianProcess(seed=0, prior=True).fit(X, y)
    sampled = SampledGaussianProcess(seed=0).fit(X, y)
    theta_ml2, theta_map = ml2.hyperparameters.theta, map_.hyperparameters.theta
    # every optimum is interior here, so the gradients must vanish there
    lo = np.log([1e-3, 1e-2, 1e-2, 1e-6])
    hi = np.log([1e2, 1e1, 1e1, 1e1])
    for theta in (theta_ml2, theta_map):
        assert np.all((theta[:4] > lo + 0.1) & (theta[:4] < hi - 0.1))
    _, grad_at_ml2 = ml2.log_marginal_likelihood(theta_ml2, eval_gradient=True)
    assert np.abs(grad_at_ml2).max() < 1e-3
    _, grad_at_map = ml2.log_marginal_likelihood(theta_map, eval_gradient=True)
    prior_grad = map_log_prior(theta_map, 2)[1]
    # MAP is not a likelihood optimum: the prior's pull balances the likelihood's
    assert np.abs(grad_at_map).max() > 0.1
    assert np.abs(grad_at_map + prior_grad).max() < 1e-3
    assert ml2.log_marginal_likelihood(theta_ml2) > ml2.log_marginal_likelihood(
        theta_map
    )
    # and the two answers differ by more than optimizer noise: the amplitude by
    # over 25 %, the weakly relevant second length scale by over 30 %
    assert ml2.hyperparameters.amplitude > 1.25 * map_.hyperparameters.amplitude
    assert (
        ml2.hyperparameters.length_scales[1]
        > 1.3 * map_.hyperparameters.length_scales[1]
    )
    # slice: the chain starts at the ML-II optimum and moves off it; no sample is
    # more likely than that optimum, and the samples spread over every coordinate,
    # their noise over more than a factor 5
    np.testing.assert_allclose(sampled.chain_start, theta_ml2, atol=1e-3)
    thetas = _thetas(sampled)
    assert len(np.unique(thetas, axis=0)) == 10
    assert np.all(thetas.std(axis=0) > 0.1)
    assert max(ml2.log_marginal_likelihood(t) for t in thetas) < (
        ml2.log_marginal_likelihood(theta_ml2)
    )
    assert np.ptp(thetas[:, 3]) > math.log(5.0)
    # 10 points say little about the noise below ~0.05: integrated over, with the
    # horseshoe prior (mode 0.05), it sits well above both point estimates (~0.01)
    mean_log_noise = thetas[:, 3].mean()
    assert mean_log_noise > max(theta_ml2[3], theta_map[3]) + 0.5


@pytest.mark.parametrize("prior", [False, True])
def test_restarts_race_on_a_subsample_and_only_the_winner_is_refined(
    prior, monkeypatch
):
    X, y = _sample_gp(120, length_scale=0.3, seed=4)
    in_full = GaussianProcess(n_restarts=3, seed=0, prior=prior).fit(X, y)
    monkeypatch.setattr(gaussian_process, "RESTART_SUBSAMPLE", 40)
    races = []
    best_start = GaussianProcess._best_start

    def recording(self, starts, X_, ys, bounds):
        races.append((len(starts), len(ys)))
        return best_start(self, starts, X_, ys, bounds)

    monkeypatch.setattr(GaussianProcess, "_best_start", recording)
    raced = GaussianProcess(n_restarts=3, seed=0, prior=prior).fit(X, y)
    # 4 starts (warm or default + 3 restarts) on 40 points, then 1 on all 120
    assert races == [(4, 40), (1, 120)]
    # the same optimum of the likelihood as every start run on all the points
    assert raced.log_marginal_likelihood() == pytest.approx(
        in_full.log_marginal_likelihood(), abs=1e-3
    )
    # restarts come again on fit 2 (1, 2, 4, ...); fit 3 is a warm start alone
    races.clear()
    raced.fit(X, y).fit(X, y)
    assert races == [(4, 40), (1, 120), (1, 120)]
