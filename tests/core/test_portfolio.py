"""Portfolios: greedy construction, the shipped ones, and searches that start with them."""

import numpy as np
import pytest
from scipy.stats import qmc

from ensemble_bo.api import default_parameters
from ensemble_bo.core.grid import cell_fingerprint, cell_settings
from ensemble_bo.core.journal import TrialJournal
from ensemble_bo.core.methods import METHODS, run_method, start_portfolio
from ensemble_bo.core.optimizer import GPEIOptimizer
from ensemble_bo.core.optimizer_kinds import make_optimizer
from ensemble_bo.core.portfolio import (
    best_of_first,
    check_portfolios,
    greedy_portfolio,
    normalized_losses,
)
from ensemble_bo.core.preparation import ModelInput, search_input
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import model_input, stop_after

CONF = default_parameters()
SPACES = {name: SearchSpace.from_dict(spec) for name, spec in CONF["models"].items()}
REGRESSION_SPACE = CONF["default_models"]["regression"]
PORTFOLIO = CONF["portfolios"][REGRESSION_SPACE]
LARGE_DATA_PORTFOLIO = CONF["large_data_portfolios"][REGRESSION_SPACE]

# Normalized losses of 4 candidates on 3 datasets, and the greedy order by hand:
# 1st c2 (mean 0.3); with c2 the best are (.3, .3, .3): c0 gives (0, .3, .2),
# mean .167, c1 and c3 .2; then c1 gives (0, 0, .2), .067, c3 (0, .3, 0), .1.
NORMALIZED = np.array(
    [
        [0.0, 1.0, 0.2],
        [0.5, 0.0, 1.0],
        [0.3, 0.3, 0.3],
        [1.0, 1.0, 0.0],
    ]
)


def test_greedy_adds_the_candidate_that_most_lowers_the_mean_best_loss():
    assert greedy_portfolio(NORMALIZED, 3) == [2, 0, 1]
    assert greedy_portfolio(NORMALIZED, 4) == [2, 0, 1, 3]


def test_greedy_leaves_out_candidates_over_the_time_cap():
    seconds = np.ones_like(NORMALIZED)
    seconds[2, 1] = 3.0  # c2 is slow on one dataset
    # c0 (mean .4); then c1 (0, 0, .2), .067, before c3 (0, 1, 0), .333; then c3
    assert greedy_portfolio(NORMALIZED, 3, seconds, max_seconds=2.0) == [0, 1, 3]
    # every candidate over the cap: nothing to choose
    assert greedy_portfolio(NORMALIZED, 3, seconds, max_seconds=0.5) == []


def test_greedy_breaks_ties_by_the_cheaper_candidate():
    twins = np.array([[0.2, 0.4], [0.2, 0.4], [1.0, 1.0]])
    seconds = np.array([[2.0, 2.0], [1.0, 2.0], [0.1, 0.1]])
    assert greedy_portfolio(twins, 1, seconds) == [1]
    assert greedy_portfolio(twins, 1) == [0]  # no times: the lower index


def test_normalized_losses_put_each_dataset_s_best_at_0_and_median_at_1():
    losses = np.array(
        [[1.0, 7.0, 2.0], [2.0, 7.0, np.nan], [3.0, 7.0, 4.0], [5.0, 9.0, 3.0]]
    )
    # column 0: best 1, median 2.5; column 1: median = best: 0 or 1;
    # column 2: best 2, median 3, the failed candidate 1
    expected = np.array(
        [[0.0, 0.0, 0.0], [2 / 3, 0.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    )
    np.testing.assert_allclose(normalized_losses(losses), expected)


def test_best_of_first_is_the_running_minimum_of_the_chosen():
    np.testing.assert_allclose(
        best_of_first(NORMALIZED, [2, 0]), [[0.3, 0.3, 0.3], [0.0, 0.3, 0.2]]
    )


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_each_default_space_ships_a_portfolio_of_valid_cheap_first_points(task):
    space_name = CONF["default_models"][task]
    portfolio = CONF["portfolios"][space_name]
    assert 1 <= len(portfolio) <= CONF["segor"]["optimizer"]["n_initial"]
    assert check_portfolios({space_name: portfolio}, SPACES) == {space_name: portfolio}
    # distinct configurations, each a point of its space
    assert len({repr(sorted(c.items())) for c in portfolio}) == len(portfolio)
    for config in portfolio:
        SPACES[space_name].encode(config)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_each_default_space_ships_a_large_data_start_that_fits_the_design(task):
    space_name = CONF["default_models"][task]
    large = CONF["large_data_portfolios"][space_name]
    assert check_portfolios({space_name: large}, SPACES) == {space_name: large}
    # with the portfolio after it, the whole start is still in the design,
    # each configuration once
    method = "segor" if task == "regression" else "sego"
    settings = check_settings(METHODS[method], CONF, 1, task)
    sample = search_input(model_input(300, task), 150, seed=1)
    both = start_portfolio(settings, space_name, sample)
    assert both[: len(large)] == tuple(large)
    assert len(both) <= CONF["segor"]["optimizer"]["n_initial"]
    assert len({repr(sorted(c.items())) for c in both}) == len(both)
    # histogram boosting: a cost linear in the rows, a size free of them
    choice = "regressor" if task == "regression" else "classifier"
    assert {config[choice] for config in large} == {"hist_gradient_boosting"}


def test_a_portfolio_configuration_outside_its_space_is_refused_with_the_fix():
    broken = {**PORTFOLIO[0], "regressor": "no_such_family"}
    with pytest.raises(ValueError, match=r"portfolios.segor_sklearn.*build_portfolio"):
        check_portfolios({REGRESSION_SPACE: [broken]}, SPACES)
    with pytest.raises(ValueError, match="'missing' is not a model of `models`"):
        check_portfolios({"missing": []}, SPACES)
    parameters = {**CONF, "portfolios": {REGRESSION_SPACE: [broken]}}
    with pytest.raises(InvalidInput, match="parameters_portfolios.yml"):
        check_settings(METHODS["segor"], parameters, 0, "regression")
    parameters = {**CONF, "large_data_portfolios": {REGRESSION_SPACE: [broken]}}
    with pytest.raises(
        InvalidInput,
        match=r"large_data_portfolios.segor_sklearn: .*"
        r"\(conf/base/parameters_large_data_portfolios.yml\)",
    ):
        check_settings(METHODS["segor"], parameters, 0, "regression")


def test_the_portfolio_switch_must_be_true_or_false():
    parameters = {
        **CONF,
        "segor": {
            **CONF["segor"],
            "optimizer": {**CONF["segor"]["optimizer"], "portfolio": "yes"},
        },
    }
    with pytest.raises(InvalidInput, match="portfolio='yes' is not true or false"):
        check_settings(METHODS["segor"], parameters, 0, "regression")


def test_the_design_starts_with_the_portfolio_then_the_sobol_points():
    space = SPACES[REGRESSION_SPACE]
    plain = GPEIOptimizer(space, seed=3, n_initial=10)
    started = GPEIOptimizer(space, seed=3, n_initial=10, initial_configs=PORTFOLIO)
    asked = [s.config for s in started.ask_batch(10)]
    # the portfolio as written (constants included), then the Sobol design's
    # first points in its order
    assert asked[: len(PORTFOLIO)] == PORTFOLIO
    assert asked[len(PORTFOLIO) :] == [
        s.config for s in plain.ask_batch(10 - len(PORTFOLIO))
    ]
    # a design shorter than the portfolio takes its first configurations
    short = GPEIOptimizer(space, seed=3, n_initial=2, initial_configs=PORTFOLIO)
    assert [s.config for s in short.ask_batch(2)] == PORTFOLIO[:2]


def test_without_the_portfolio_the_design_is_the_scrambled_sobol_one():
    space = SPACES[REGRESSION_SPACE]
    options = METHODS["segor"].optimizer_options(
        {**CONF["segor"]["optimizer"], "portfolio": False}, PORTFOLIO
    )
    assert "initial_configs" not in options
    optimizer = make_optimizer(space, 7, **options)
    # the design by hand: scipy's scrambled Sobol points of the design seed
    sobol = qmc.Sobol(
        space.dim,
        scramble=True,
        rng=np.random.default_rng(np.random.SeedSequence(7).spawn(3)[1]),
    )
    points = sobol.random_base2(4)[: options["n_initial"]]
    assert [s.config for s in optimizer.ask_batch(len(points))] == [
        space.decode(point) for point in points
    ]


def test_the_paper_preset_keeps_the_papers_start():
    options = METHODS["segor"].optimizer_options(
        {**CONF["segor"]["optimizer"], "preset": "paper"}, PORTFOLIO
    )
    assert "initial_configs" not in options


RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 3))
TOY = ModelInput(
    X,
    X[:, 0] + 0.1 * RNG.normal(size=60),
    np.arange(60) % 5,
    "regression",
    {"mean": 0.0, "std": 1.0},
    {"name": "toy", "categorical_columns": []},
)


def _settings(budget, n_initial=3):
    segor = {
        **CONF["segor"],
        "time_limit": None,
        "optimizer": {**CONF["segor"]["optimizer"], "n_initial": n_initial},
    }
    return {
        **CONF,
        "segor": segor,
        "ensemble": {**CONF["ensemble"], "size": 3},
        "budget": budget,
    }


def test_a_search_trains_the_portfolio_first_and_resumes_past_it(tmp_path):
    uninterrupted = run_method("segor", TOY, _settings(4), 1)
    assert uninterrupted.pool.configs[:3] == PORTFOLIO[:3]
    journal = TrialJournal(tmp_path / "journal")
    with pytest.raises(SearchInterrupted):
        run_method("segor", TOY, _settings(4), 1, [stop_after(1)], journal)
    resumed = run_method("segor", TOY, _settings(4), 1, journal=journal)
    assert resumed.trials_reused == 2
    assert resumed.pool.configs == uninterrupted.pool.configs
    assert resumed.members == uninterrupted.members


def test_a_search_on_a_sample_of_large_data_starts_with_the_large_data_portfolio():
    data = model_input(300, "regression")
    sample = search_input(data, 150, seed=1)
    assert sample.sampled_from == len(data.target)
    on_sample = run_method("segor", sample, _settings(3, n_initial=10), 1)
    assert on_sample.pool.configs == [*LARGE_DATA_PORTFOLIO, PORTFOLIO[0]]
    # all rows: no sample, the portfolio alone
    on_all = run_method("segor", data, _settings(2, n_initial=10), 1)
    assert on_all.pool.configs == PORTFOLIO[:2]


def test_the_large_data_start_leaves_out_the_portfolio_s_kernel_machines():
    data = model_input(300, "regression")
    sample = search_input(data, 150, seed=1)
    settings = check_settings(METHODS["segor"], CONF, 1, "regression")
    # the shipped regression portfolio holds one SVR
    (kernel,) = [i for i, c in enumerate(PORTFOLIO) if c["regressor"] == "svr"]
    assert start_portfolio(settings, REGRESSION_SPACE, sample) == (
        *LARGE_DATA_PORTFOLIO,
        *(
            c
            for i, c in enumerate(PORTFOLIO)
            if i != kernel and c not in LARGE_DATA_PORTFOLIO
        ),
    )
    # on every row, the whole portfolio, its SVR too
    assert start_portfolio(settings, REGRESSION_SPACE, data) == tuple(PORTFOLIO)


def test_the_large_data_start_trains_a_configuration_of_both_portfolios_once():
    data = model_input(300, "regression")
    sample = search_input(data, 150, seed=1)
    # the large-data portfolio's boosting at its defaults, in another key order
    repeated = dict(reversed(list(LARGE_DATA_PORTFOLIO[0].items())))
    conf = {**CONF, "portfolios": {REGRESSION_SPACE: [PORTFOLIO[0], repeated]}}
    settings = check_settings(METHODS["segor"], conf, 1, "regression")
    assert start_portfolio(settings, REGRESSION_SPACE, sample) == (
        *LARGE_DATA_PORTFOLIO,
        PORTFOLIO[0],
    )
    assert start_portfolio(settings, REGRESSION_SPACE, data) == (
        PORTFOLIO[0],
        repeated,
    )


def test_a_timed_cell_carries_its_trial_cap_in_its_key():
    cell = cell_settings(
        "segor", {**CONF, "time_budget": 30}, REGRESSION_SPACE, 5, None
    )
    assert cell["max_trial_share"] == "auto"
    # auto: a tenth on a sample of large data, a quarter otherwise
    whole = cell_fingerprint(cell, REGRESSION_SPACE, {}, "")
    assert whole["max_trial_share"] == 0.25
    sampled = cell_fingerprint(cell, REGRESSION_SPACE, {}, "", sampled=True)
    assert sampled["max_trial_share"] == 0.1
    capped = {**cell, "max_trial_share": 0.5}
    assert cell_fingerprint(capped, REGRESSION_SPACE, {}, "")["max_trial_share"] == 0.5
    # null: no cap, and a cell key without one (as before caps existed)
    uncapped = {**cell, "max_trial_share": None}
    assert "max_trial_share" not in cell_fingerprint(uncapped, REGRESSION_SPACE, {}, "")
    # without a time budget no share applies
    untimed = cell_settings("segor", CONF, REGRESSION_SPACE, 5, None)
    untimed_key = cell_fingerprint(untimed, REGRESSION_SPACE, {}, "", sampled=True)
    assert "max_trial_share" not in untimed_key


def test_a_benchmark_cell_carries_its_space_s_portfolios_in_its_key():
    cell = cell_settings("segor", CONF, REGRESSION_SPACE, 5, None)
    assert cell["portfolios"] == {REGRESSION_SPACE: PORTFOLIO}
    assert cell["large_data_portfolios"] == {REGRESSION_SPACE: LARGE_DATA_PORTFOLIO}
    fingerprint = cell_fingerprint(cell, REGRESSION_SPACE, {}, "sha")
    assert fingerprint["portfolio"] == PORTFOLIO
    # the large-data start only where the data may be sampled: the keys of
    # cells on small data stay those they had before it existed
    assert "large_data_portfolio" not in fingerprint
    fingerprint = cell_fingerprint(cell, REGRESSION_SPACE, {}, "sha", sampled=True)
    assert fingerprint["large_data_portfolio"] == LARGE_DATA_PORTFOLIO
    tree = cell_settings("segor", CONF, "decision_tree_regressor", 5, None)
    assert tree["portfolios"] == tree["large_data_portfolios"] == {}
    fingerprint = cell_fingerprint(tree, "decision_tree_regressor", {}, "")
    assert "portfolio" not in fingerprint
    assert "large_data_portfolio" not in fingerprint
