import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ensemble_bo.core.space import SearchSpace
from tests.support import SVM_SPEC

SPECS = {
    "depth": {"type": "int", "low": 1, "high": 30},
    "leaf": {"type": "int", "low": 1, "high": 64, "log": True},
    "fraction": {"type": "float", "low": 0.05, "high": 1.0},
    "rate": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "activation": {"type": "categorical", "choices": ["relu", "tanh", "logistic"]},
}
SPACE = SearchSpace.from_dict(SPECS)


@given(
    depth=st.integers(1, 30),
    leaf=st.integers(1, 64),
    fraction=st.floats(0.05, 1.0),
    rate=st.floats(1e-4, 1.0),
    activation=st.sampled_from(["relu", "tanh", "logistic"]),
)
def test_encode_decode_round_trip(depth, leaf, fraction, rate, activation):
    config = {
        "depth": depth,
        "leaf": leaf,
        "fraction": fraction,
        "rate": rate,
        "activation": activation,
    }
    point = SPACE.encode(config)
    assert point.shape == (7,)  # 4 numeric + one-hot of 3 choices
    assert np.all((point >= 0) & (point <= 1))
    decoded = SPACE.decode(point)
    assert decoded["depth"] == depth and decoded["leaf"] == leaf
    assert decoded["activation"] == activation
    assert math.isclose(decoded["fraction"], fraction, rel_tol=1e-12)
    assert math.isclose(decoded["rate"], rate, rel_tol=1e-12)


@given(st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7))
def test_decode_always_gives_a_valid_configuration(unit):
    config = SPACE.decode(np.array(unit))
    assert isinstance(config["depth"], int) and 1 <= config["depth"] <= 30
    assert isinstance(config["leaf"], int) and 1 <= config["leaf"] <= 64
    assert 0.05 <= config["fraction"] <= 1.0
    assert 1e-4 <= config["rate"] <= 1.0
    assert config["activation"] in ("relu", "tanh", "logistic")
    # a decoded configuration survives another round trip (floats up to rounding)
    again = SPACE.decode(SPACE.encode(config))
    for name in ("depth", "leaf", "activation"):
        assert again[name] == config[name]
    for name in ("fraction", "rate"):
        assert math.isclose(again[name], config[name], rel_tol=1e-12)


def test_int_bins_have_equal_width():
    space = SearchSpace.from_dict({"k": {"type": "int", "low": 1, "high": 4}})
    grid = np.linspace(0, 1, 4001)
    values = [space.decode(np.array([u]))["k"] for u in grid]
    counts = np.bincount(values)[1:]
    assert counts.min() >= 999 and counts.max() <= 1002


def test_log_scale_midpoint_is_geometric_mean():
    space = SearchSpace.from_dict(
        {"rate": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}}
    )
    assert math.isclose(space.decode(np.array([0.5]))["rate"], 1e-2, rel_tol=1e-12)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"type": "float", "low": 2.0, "high": 1.0},
            "low=2.0 is greater than high=1.0; swap them",
        ),
        (
            {"type": "float", "low": 0.0, "high": 1.0, "log": True},
            "log scale needs low > 0",
        ),
        ({"type": "int", "low": 1.5, "high": 4}, "int bounds must be integers"),
        ({"type": "categorical", "choices": []}, "empty choice list"),
        ({"type": "gaussian", "low": 0, "high": 1}, "unknown type 'gaussian'"),
        ({"type": "float", "low": 0.0}, "missing high"),
        ({"type": "float", "low": "tiny", "high": 1.0}, "low='tiny' is not a number"),
        ({"type": "int", "low": 1, "hi": 4}, "unknown keys ['hi'] for an int"),
        ({"type": "categorical", "choice": [1]}, "unknown keys ['choice']"),
        ({"type": "float", "low": 1, "high": 2, "log": "no"}, "log='no' is not"),
    ],
)
def test_bad_specs_name_the_parameter_and_value(spec, message):
    with pytest.raises(ValueError, match="parameter 'p'") as error:
        SearchSpace.from_dict({"p": spec})
    assert message in str(error.value)


def test_encode_rejects_out_of_range_and_unknown_values():
    config = SPACE.decode(np.full(7, 0.5))
    with pytest.raises(ValueError, match="'depth': 31 is outside"):
        SPACE.encode({**config, "depth": 31})
    with pytest.raises(ValueError, match="'sigmoid' is not one of"):
        SPACE.encode({**config, "activation": "sigmoid"})
    with pytest.raises(ValueError, match="unknown parameters \\['extra'\\]"):
        SPACE.encode({**config, "extra": 1})


SVM = SearchSpace.from_dict(SVM_SPEC)


def test_categoricals_are_one_hot():
    point = SVM.encode({"kernel": "linear", "C": 1.0})
    np.testing.assert_array_equal(point[:3], [0.0, 1.0, 0.0])
    assert SVM.decode(np.array([0.2, 0.1, 0.9, 0.5, 0.5, 0.5]))["kernel"] == "poly"


@given(
    kernel=st.sampled_from(["rbf", "linear", "poly"]),
    C=st.floats(1e-3, 1e3),
    gamma=st.floats(1e-5, 10.0),
    degree=st.integers(2, 5),
)
def test_conditional_round_trip_keeps_only_active_parameters(kernel, C, gamma, degree):
    config = {"kernel": kernel, "C": C}
    if kernel in ("rbf", "poly"):
        config["gamma"] = gamma
    if kernel == "poly":
        config["degree"] = degree
    decoded = SVM.decode(SVM.encode(config))
    assert set(decoded) == set(config)
    assert decoded["kernel"] == kernel and decoded.get("degree") == config.get("degree")
    assert math.isclose(decoded["C"], C, rel_tol=1e-12)


def test_inactive_dimensions_are_imputed_and_canonicalized_alike():
    linear = SVM.encode({"kernel": "linear", "C": 1.0})
    assert linear[4] == 0.5 and linear[5] == 0.5  # gamma and degree do not apply
    raw = np.array([[0.1, 0.8, 0.3, 0.5, 0.93, 0.07], [0.1, 0.2, 0.7, 0.5, 0.93, 0.07]])
    canonical = SVM.canonicalize(raw)
    # row 0 decodes to linear: gamma and degree move to 0.5; row 1 is poly: all active
    np.testing.assert_array_equal(canonical[0], [0.0, 1.0, 0.0, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(canonical[1], [0.0, 0.0, 1.0, 0.5, 0.93, 0.07])
    for row, point in zip(raw, canonical, strict=True):
        assert SVM.decode(row) == SVM.decode(point)


def test_grid_prunes_inactive_branches():
    grid = SVM.grid(points_per_dimension=2)
    # linear: 2 C; rbf: 2 C x 2 gamma; poly: 2 C x 2 gamma x 2 of the 4 degrees
    assert len(grid) == 2 + 4 + 8
    assert all("degree" not in config for config in grid if config["kernel"] != "poly")
    assert len({tuple(sorted(c.items())) for c in grid}) == len(grid)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (
            {
                "gamma": {
                    "type": "float",
                    "low": 0.1,
                    "high": 1.0,
                    "condition": {"kernel": "rbf"},
                }
            },
            "condition on 'kernel', which is not a parameter declared before it",
        ),
        (
            {
                "C": {"type": "float", "low": 0.1, "high": 1.0},
                "gamma": {
                    "type": "float",
                    "low": 0.1,
                    "high": 1.0,
                    "condition": {"C": 0.5},
                },
            },
            "condition on 'C', which is not categorical",
        ),
        (
            {
                "kernel": {"type": "categorical", "choices": ["rbf"]},
                "gamma": {
                    "type": "float",
                    "low": 0.1,
                    "high": 1.0,
                    "condition": {"kernel": "sigmoid"},
                },
            },
            "condition values \\['sigmoid'\\] are not choices of 'kernel'",
        ),
    ],
)
def test_bad_conditions_are_named(specs, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace.from_dict(specs)


def test_inactive_parameter_in_a_configuration_is_refused():
    with pytest.raises(
        ValueError,
        match="'degree' is given but inactive: it applies only when 'kernel' is one of \\['poly'\\]",
    ):
        SVM.encode({"kernel": "rbf", "C": 1.0, "gamma": 0.1, "degree": 3})


# --- constants ----------------------------------------------------------------

WITH_CONSTANTS = SearchSpace.from_dict(
    {
        "kernel": {"type": "categorical", "choices": ["rbf", "linear", "poly"]},
        "max_iter": {"type": "constant", "value": 1000},
        "C": {"type": "float", "low": 1e-3, "high": 1e3, "log": True},
        "gamma": {
            "type": "float",
            "low": 1e-5,
            "high": 10.0,
            "log": True,
            "condition": {"kernel": ["rbf", "poly"]},
        },
        "degree": {"type": "int", "low": 2, "high": 5, "condition": {"kernel": "poly"}},
        "shrinking": {
            "type": "constant",
            "value": False,
            "condition": {"kernel": "poly"},
        },
    }
)


def test_constants_are_no_dimension_of_the_encoding():
    assert WITH_CONSTANTS.dim == SVM.dim == 6
    assert WITH_CONSTANTS.names == [
        "kernel",
        "max_iter",
        "C",
        "gamma",
        "degree",
        "shrinking",
    ]
    config = {"kernel": "poly", "C": 1.0, "gamma": 0.1, "degree": 3}
    with_constants = {**config, "max_iter": 1000, "shrinking": False}
    # the same point as the space without them, whether the constants are given
    np.testing.assert_array_equal(WITH_CONSTANTS.encode(config), SVM.encode(config))
    np.testing.assert_array_equal(
        WITH_CONSTANTS.encode(with_constants), SVM.encode(config)
    )


@given(st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6))
def test_decode_adds_active_constants_and_round_trips(unit):
    point = np.array(unit)
    config = WITH_CONSTANTS.decode(point)
    # the other parameters decode as in the space without constants
    assert {k: v for k, v in config.items() if k not in ("max_iter", "shrinking")} == (
        SVM.decode(point)
    )
    assert config["max_iter"] == 1000
    assert ("shrinking" in config) == (config["kernel"] == "poly")
    if config["kernel"] == "poly":
        assert config["shrinking"] is False
    again = WITH_CONSTANTS.decode(WITH_CONSTANTS.encode(config))
    assert set(again) == set(config)
    assert again["kernel"] == config["kernel"]
    assert again["max_iter"] == 1000 and again.get("degree") == config.get("degree")
    assert math.isclose(again["C"], config["C"], rel_tol=1e-12)


def test_canonicalize_ignores_constants():
    raw = np.array([[0.1, 0.8, 0.3, 0.5, 0.93, 0.07], [0.1, 0.2, 0.7, 0.5, 0.93, 0.07]])
    np.testing.assert_array_equal(
        WITH_CONSTANTS.canonicalize(raw), SVM.canonicalize(raw)
    )


def test_grid_carries_constants_without_multiplying_configurations():
    grid = WITH_CONSTANTS.grid(points_per_dimension=2)
    plain = SVM.grid(points_per_dimension=2)
    assert len(grid) == len(plain) == 2 + 4 + 8
    assert all(config["max_iter"] == 1000 for config in grid)
    assert all(("shrinking" in c) == (c["kernel"] == "poly") for c in grid)
    stripped = [
        {k: v for k, v in c.items() if k not in ("max_iter", "shrinking")} for c in grid
    ]
    assert stripped == plain
    for config in grid:
        WITH_CONSTANTS.encode(config)  # every grid point is a valid configuration


def test_encode_refuses_another_value_or_an_inactive_constant():
    config = {"kernel": "linear", "C": 1.0}
    with pytest.raises(
        ValueError, match="'max_iter': 5 is not its constant value 1000"
    ):
        WITH_CONSTANTS.encode({**config, "max_iter": 5})
    with pytest.raises(ValueError, match="'shrinking' is given but inactive"):
        WITH_CONSTANTS.encode({**config, "shrinking": False})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "constant"}, "a constant needs a 'value'"),
        (
            {"type": "constant", "value": 3, "low": 1, "high": 5},
            "unknown keys ['low', 'high'] for a constant",
        ),
        ({"type": "constant", "valeu": 3}, "unknown keys ['valeu']"),
    ],
)
def test_bad_constant_specs_name_the_parameter(spec, message):
    with pytest.raises(ValueError, match="parameter 'p'") as error:
        SearchSpace.from_dict({"x": {"type": "float", "low": 0, "high": 1}, "p": spec})
    assert message in str(error.value)


def test_a_constant_cannot_be_a_condition_parent():
    with pytest.raises(
        ValueError,
        match="parameter 'gamma': condition on 'kernel', which is a constant "
        "\\(always 'rbf'\\); a condition needs a categorical parameter",
    ):
        SearchSpace.from_dict(
            {
                "kernel": {"type": "constant", "value": "rbf"},
                "gamma": {
                    "type": "float",
                    "low": 0.1,
                    "high": 1.0,
                    "condition": {"kernel": "rbf"},
                },
            }
        )


def test_a_space_of_constants_only_is_refused():
    with pytest.raises(ValueError, match="needs at least one parameter to search"):
        SearchSpace.from_dict({"n": {"type": "constant", "value": 100}})
