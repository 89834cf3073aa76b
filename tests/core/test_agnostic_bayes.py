import math

import numpy as np
import pytest

from ensemble_bo.core.agnostic_bayes import (
    RHO_GRID,
    argmin_weights,
    bayesian_bootstrap_posterior,
    bootstrap_posterior,
    dirichlet_posterior,
    mean_ensemble_cv_loss,
    softmin_weights,
    student_t_posterior,
    student_t_posterior_parameters,
    tune_alpha,
    tune_parameter,
    tune_rho,
)
from ensemble_bo.core.losses import squared_error

# Table 1 of Lacoste et al. (2014): three hypotheses, each wrong on a different one
# of three samples (zero-one losses l_1, l_2, l_3).
TABLE_1 = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
TABLE_1_WITH_DUPLICATE = np.vstack([TABLE_1, TABLE_1[2]])  # h4 = h3

N_MC = 20_000
# Monte Carlo tolerance: a share p estimated from N_MC samples has standard error
# at most sqrt(0.25 / N_MC) = 0.0035; allow 4.5 standard errors.
MC_TOL = 4.5 * math.sqrt(0.25 / N_MC)


def posteriors(n_samples=N_MC):
    """Every sampling posterior as f(L, rng) with its own defaults."""
    return {
        "bootstrap": lambda L, rng, **kw: bootstrap_posterior(L, n_samples, rng, **kw),
        "bayesian_bootstrap": lambda L, rng, **kw: bayesian_bootstrap_posterior(
            L, n_samples, rng, **kw
        ),
        "dirichlet": lambda L, rng, **kw: dirichlet_posterior(
            L, 1.0, n_samples, rng, **kw
        ),
        "student_t": lambda L, rng, **kw: student_t_posterior(L, n_samples, rng, **kw),
    }


# ------------------------------------------------------------------ Table 1


@pytest.mark.parametrize("name", list(posteriors()))
def test_table_1_top_three_equally_good_different_hypotheses_get_a_third_each(name):
    weights = posteriors()[name](TABLE_1, np.random.default_rng(0))
    np.testing.assert_allclose(weights, [1 / 3] * 3, atol=MC_TOL)
    assert weights.sum() == pytest.approx(1.0)


def test_table_1_bottom_bootstrap_reproduces_the_paper():
    weights = bootstrap_posterior(
        TABLE_1_WITH_DUPLICATE, N_MC, np.random.default_rng(1)
    )
    # the paper's rounded values
    np.testing.assert_allclose(weights, [0.31, 0.31, 0.19, 0.19], atol=0.005 + MC_TOL)
    # exact, from the 27 equally likely resamples with ties split evenly:
    # h1 gets (6 * 1/4 + 1/3 + 1/2 + 6) / 27 = 25/81, h3 gets (6/4 + 2/3 + 3) / 27 = 15.5/81
    np.testing.assert_allclose(
        weights, [25 / 81, 25 / 81, 15.5 / 81, 15.5 / 81], atol=MC_TOL
    )


def test_table_1_bottom_bayesian_bootstrap_splits_the_duplicated_share():
    # Not in the paper; by hand: r = Dirichlet weights w, so h_i wins iff w_i is the
    # smallest (probability 1/3, no ties), and h3, h4 always tie and share 1/3.
    weights = bayesian_bootstrap_posterior(
        TABLE_1_WITH_DUPLICATE, N_MC, np.random.default_rng(2)
    )
    np.testing.assert_allclose(weights, [1 / 3, 1 / 3, 1 / 6, 1 / 6], atol=MC_TOL)


@pytest.mark.parametrize("name", ["dirichlet", "student_t"])
def test_table_1_bottom_duplicates_lose_mass_under_the_other_priors(name):
    # The paper reports only E_b* here; these priors keep the symmetry and also give
    # the pair (h3, h4) less than the 1/2 that weighting by hypothesis would.
    weights = posteriors()[name](TABLE_1_WITH_DUPLICATE, np.random.default_rng(3))
    assert weights[0] == pytest.approx(weights[1], abs=2 * MC_TOL)
    assert weights[2] == pytest.approx(weights[3], abs=2 * MC_TOL)
    assert weights[0] > weights[2] + 0.05


# -------------------------------------------------- effective sample size ratio


def test_bootstrap_rho_resamples_ceil_rho_n_samples():
    # rho = 0.3, n = 3: m' = ceil(0.9) = 1, each resample is one sample. Sample 1:
    # h2, h3, h4 tie at 0; sample 2: h1, h3, h4; sample 3: h1, h2.
    weights = bootstrap_posterior(
        TABLE_1_WITH_DUPLICATE, N_MC, np.random.default_rng(4), rho=0.3
    )
    expected = [(1 / 3 + 1 / 2) / 3, (1 / 3 + 1 / 2) / 3, 2 / 9, 2 / 9]
    np.testing.assert_allclose(weights, expected, atol=MC_TOL)


@pytest.mark.parametrize("name", list(posteriors()))
def test_smaller_rho_flattens_the_posterior(name):
    rng = np.random.default_rng(5)
    L = rng.normal(size=(4, 200)) + np.array([[0.0], [0.12], [0.12], [0.12]])
    sharp = posteriors(4000)[name](L, np.random.default_rng(6), rho=1.0)
    flat = posteriors(4000)[name](L, np.random.default_rng(6), rho=0.1)
    assert sharp[0] > flat[0] + 0.1


def test_student_t_parameters_by_hand():
    # d = 2, n = 2, losses already in [0, 1]: means (0.5, 1), variances (0.25, 0).
    # kappa = 3, df = nu0 + m - d + 1 = 3, r_m = (0.5 + 2 * mean) / 3,
    # T = 0.25 I + 2 S + (2/3) (r0 - mean)(r0 - mean)^T = diag(0.75, 0.25 + 1/6).
    L = np.array([[0.0, 1.0], [1.0, 1.0]])
    posterior = student_t_posterior_parameters(L, loss_range=(0.0, 1.0))
    assert posterior.df == 3
    np.testing.assert_allclose(posterior.loc, [0.5, 2.5 / 3])
    np.testing.assert_allclose(posterior.shape, np.diag([0.75, 0.25 + 1 / 6]) / 9)
    # rho scales the sample count: m' = 1 -> kappa = 2, df = 2
    half = student_t_posterior_parameters(L, rho=0.5, loss_range=(0.0, 1.0))
    assert half.df == 2
    np.testing.assert_allclose(half.loc, [0.5, 0.75])
    np.testing.assert_allclose(half.shape, np.diag([0.25 + 0.25, 0.25 + 0.125]) / 4)


def test_dirichlet_with_alpha_zero_is_the_bayesian_bootstrap():
    L = np.random.default_rng(7).random((5, 30))
    np.testing.assert_array_equal(
        dirichlet_posterior(L, 0.0, 500, 8, rho=0.4),
        bayesian_bootstrap_posterior(L, 500, 8, rho=0.4),
    )


def test_a_stronger_dirichlet_prior_pulls_the_posterior_towards_uniform():
    rng = np.random.default_rng(9)
    L = (rng.random((3, 100)) < np.array([[0.2], [0.35], [0.35]])).astype(float)
    weak = dirichlet_posterior(L, 1.0, 3000, 10)
    strong = dirichlet_posterior(L, 100.0, 3000, 10)
    assert weak[0] > 0.9
    assert strong[0] < weak[0] - 0.05


# ---------------------------------------------------------------- baselines


def test_argmin_by_hand_with_ties_failed_rows_and_folds():
    L = np.array(
        [
            [1.0, 2.0, 3.0, 0.0],  # mean 1.5
            [np.nan] * 4,  # failed
            [0.0, 0.0, 0.0, 6.0],  # mean 1.5
            [2.0, 2.0, 2.0, 2.0],  # mean 2
        ]
    )
    np.testing.assert_array_equal(argmin_weights(L), [0.5, 0.0, 0.5, 0.0])
    # folds {0, 1, 2} and {3}: CV losses 1, 3, 2 -> only the first
    np.testing.assert_array_equal(
        argmin_weights(L, fold_ids=np.array([0, 0, 0, 1])), [1.0, 0.0, 0.0, 0.0]
    )


def test_softmin_by_hand():
    L = np.array([[1.0, 1.0], [np.nan, np.nan], [2.0, 4.0]])  # risks 1, -, 3
    weights = softmin_weights(L, temperature=2.0)
    e1, e3 = math.exp(-1 / 2), math.exp(-3 / 2)
    np.testing.assert_allclose(weights, [e1 / (e1 + e3), 0.0, e3 / (e1 + e3)])
    np.testing.assert_allclose(softmin_weights(L, 1e-3), [1.0, 0.0, 0.0])


# -------------------------------------------------------- determinism, NaN rows


@pytest.mark.parametrize("name", list(posteriors()))
def test_seeded_rng_is_deterministic(name):
    L = np.random.default_rng(11).random((4, 25))
    posterior = posteriors(300)[name]
    first = posterior(L, np.random.default_rng(12))
    np.testing.assert_array_equal(first, posterior(L, np.random.default_rng(12)))
    np.testing.assert_array_equal(first, posterior(L, 12))  # an int seeds the same way
    assert first.sum() == pytest.approx(1.0) and np.all(first >= 0)


@pytest.mark.parametrize("name", list(posteriors()))
def test_failed_hypotheses_get_weight_zero(name):
    L = np.random.default_rng(13).random((5, 25))
    L[[0, 3]] = np.nan
    weights = posteriors(300)[name](L, 14)
    assert weights.shape == (5,)
    assert weights[[0, 3]].tolist() == [0.0, 0.0]
    assert weights.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(
        weights[[1, 2, 4]], posteriors(300)[name](L[[1, 2, 4]], 14)
    )


# ------------------------------------------------------------------- tuning


def test_mean_ensemble_cv_loss_by_hand():
    y = np.zeros(4)
    predictions = np.array([[1.0, 1, 1, 1], [np.nan] * 4, [-3.0, -3, -3, 1]])
    loss = mean_ensemble_cv_loss(predictions, y, np.array([0, 0, 0, 1]), squared_error)
    # 0.75 * row 0 + 0.25 * row 2 = (0, 0, 0, 1); folds: mean(0, 0, 0) and 1 -> 0.5
    assert loss(np.array([0.75, 0.0, 0.25])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="be 0 on failed rows"):
        loss(np.array([0.5, 0.5, 0.0]))


def test_tune_rho_picks_the_grid_value_with_the_best_ensemble():
    # A stand-in posterior putting rho on h0 = y + 1 and 1 - rho on h1 = y - 1:
    # the ensemble is exact at rho = 1/2, and the nearest grid value is RHO_GRID[11].
    y = np.linspace(0, 1, 10)
    predictions = np.vstack([y + 1, y - 1])
    ensemble_loss = mean_ensemble_cv_loss(
        predictions, y, np.arange(10) % 2, squared_error
    )
    calls = []

    def posterior(L, rng, rho):
        calls.append(rng.random())
        return np.array([rho, 1 - rho])

    tuned = tune_rho(posterior, squared_error(predictions - y), ensemble_loss, rng=0)
    assert len(RHO_GRID) == 20 and RHO_GRID[0] == 0.1 and RHO_GRID[-1] == 0.8
    assert tuned.value == RHO_GRID[11]
    assert tuned.losses.shape == (20,) and tuned.losses.argmin() == 11
    np.testing.assert_allclose(tuned.weights, [RHO_GRID[11], 1 - RHO_GRID[11]])
    assert len(set(calls)) == 1  # every rho sees the same random stream


def test_tune_rho_with_the_bootstrap_on_k_fold_losses():
    rng = np.random.default_rng(15)
    n = 60
    y = rng.normal(size=n)
    fold_ids = np.arange(n) % 5
    predictions = y + rng.normal(scale=[[0.5], [0.55], [0.6], [1.5]], size=(4, n))
    L = squared_error(predictions - y)
    ensemble_loss = mean_ensemble_cv_loss(predictions, y, fold_ids, squared_error)
    tuned = tune_rho(bootstrap_posterior, L, ensemble_loss, rng=16, n_bootstrap=500)
    assert tuned.value in RHO_GRID
    assert tuned.losses[np.argmax(RHO_GRID == tuned.value)] == tuned.losses.min()
    assert ensemble_loss(tuned.weights) == pytest.approx(tuned.losses.min())
    again = tune_rho(bootstrap_posterior, L, ensemble_loss, rng=16, n_bootstrap=500)
    np.testing.assert_array_equal(again.weights, tuned.weights)


def test_tune_alpha_defaults_to_fractions_of_the_effective_sample_size():
    rng = np.random.default_rng(17)
    y = rng.normal(size=20)
    predictions = y + rng.normal(size=(3, 20))
    L = squared_error(predictions - y)
    ensemble_loss = mean_ensemble_cv_loss(
        predictions, y, np.arange(20) % 4, squared_error
    )
    tuned = tune_alpha(L, ensemble_loss, 200, rng=18, rho=0.5)
    np.testing.assert_allclose(tuned.candidates, [0.0, 0.1, 0.3, 1.0, 3.0, 10.0])
    assert tuned.value in tuned.candidates


def test_tune_parameter_can_tune_the_softmin_temperature():
    y = np.zeros(6)
    predictions = np.vstack([np.full(6, 1.0), np.full(6, -1.0), np.full(6, 0.5)])
    L = squared_error(predictions - y)
    ensemble_loss = mean_ensemble_cv_loss(
        predictions, y, np.arange(6) % 3, squared_error
    )
    tuned = tune_parameter(
        lambda T: softmin_weights(L, T), [1e-3, 1.0, 1e3], ensemble_loss
    )
    # near-uniform weights average +1, -1 and 0.5 to 1/6 (0.028); argmin picks 0.5 (0.25)
    assert tuned.value == 1e3
    with pytest.raises(ValueError, match="candidates must not be empty"):
        tune_parameter(lambda T: softmin_weights(L, T), [], ensemble_loss)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("L", "message"),
    [
        (np.ones(3), r"L must have shape \(t, n\)"),
        (np.ones((0, 3)), r"L must have shape \(t, n\)"),
        (np.full((2, 3), np.nan), "every row of L is NaN"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), r"L rows \[0\] hold NaN"),
        (np.array([[1.0, 2.0], [0.0, np.inf]]), r"L rows \[1\] hold NaN or infinite"),
    ],
)
@pytest.mark.parametrize("name", list(posteriors()))
def test_posteriors_reject_bad_loss_matrices(name, L, message):
    with pytest.raises(ValueError, match=message):
        posteriors(10)[name](L, 0)


@pytest.mark.parametrize("count", [0, -1, 1.5, True, np.nan])
def test_sample_counts_must_be_positive_integers(count):
    L = np.ones((2, 4))
    with pytest.raises(ValueError, match="n_bootstrap must be an integer >= 1"):
        bootstrap_posterior(L, count, 0)
    for posterior in (bayesian_bootstrap_posterior, student_t_posterior):
        with pytest.raises(ValueError, match="n_samples must be an integer >= 1"):
            posterior(L, count, 0)
    with pytest.raises(ValueError, match="n_samples must be an integer >= 1"):
        dirichlet_posterior(L, 1.0, count, 0)


@pytest.mark.parametrize("rho", [0.0, -0.5, 1.5, np.nan])
@pytest.mark.parametrize("name", list(posteriors()))
def test_rho_must_be_in_zero_one(name, rho):
    with pytest.raises(ValueError, match="rho .* must be in"):
        posteriors(10)[name](np.ones((2, 4)), 0, rho=rho)


def test_bad_alpha_temperature_and_priors_are_named():
    L = np.random.default_rng(0).random((2, 10))
    with pytest.raises(ValueError, match=r"alpha must be in \[0, m' = rho \* n = 5\]"):
        dirichlet_posterior(L, 6.0, 10, 0, rho=0.5)
    with pytest.raises(ValueError, match="alpha must be in"):
        dirichlet_posterior(L, -1.0, 10, 0)
    with pytest.raises(ValueError, match="temperature must be positive"):
        softmin_weights(L, 0.0)
    with pytest.raises(ValueError, match="nu0 > d - 1"):
        student_t_posterior(L, 10, 0, nu0=0.5)
    with pytest.raises(ValueError, match="fold_ids has shape"):
        argmin_weights(L, fold_ids=np.zeros(3))
