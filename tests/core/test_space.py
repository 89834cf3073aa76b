import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ensemble_bo.core.space import SearchSpace

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
    assert point.shape == (5,)
    assert np.all((point >= 0) & (point <= 1))
    decoded = SPACE.decode(point)
    assert decoded["depth"] == depth and decoded["leaf"] == leaf
    assert decoded["activation"] == activation
    assert math.isclose(decoded["fraction"], fraction, rel_tol=1e-12)
    assert math.isclose(decoded["rate"], rate, rel_tol=1e-12)


@given(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5))
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
            "low=2.0 is greater than high=1.0",
        ),
        (
            {"type": "float", "low": 0.0, "high": 1.0, "log": True},
            "log scale needs low > 0",
        ),
        ({"type": "int", "low": 1.5, "high": 4}, "int bounds must be integers"),
        ({"type": "categorical", "choices": []}, "empty choice list"),
        ({"type": "gaussian", "low": 0, "high": 1}, "unknown type 'gaussian'"),
        ({"type": "float", "low": 0.0}, "missing high"),
    ],
)
def test_bad_specs_name_the_parameter_and_value(spec, message):
    with pytest.raises(ValueError, match="parameter 'p'") as error:
        SearchSpace.from_dict({"p": spec})
    assert message in str(error.value)


def test_encode_rejects_out_of_range_and_unknown_values():
    config = SPACE.decode(np.full(5, 0.5))
    with pytest.raises(ValueError, match="'depth': 31 is outside"):
        SPACE.encode({**config, "depth": 31})
    with pytest.raises(ValueError, match="'sigmoid' is not one of"):
        SPACE.encode({**config, "activation": "sigmoid"})
    with pytest.raises(ValueError, match="unknown parameters \\['extra'\\]"):
        SPACE.encode({**config, "extra": 1})
