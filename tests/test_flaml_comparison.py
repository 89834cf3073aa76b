"""benchmarks/flaml_comparison.py's tool names: a tool, its settings of our
parameters, and what each runs with."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
from pathlib import Path
from unittest import mock

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "flaml_comparison.py"
spec = importlib.util.spec_from_file_location("flaml_comparison", SCRIPT)
flaml_comparison = importlib.util.module_from_spec(spec)
with mock.patch.dict(os.environ):  # the script limits threads for its own process
    spec.loader.exec_module(flaml_comparison)

ARGS = argparse.Namespace(
    regression_space="segor_sklearn", classification_space="sego_sklearn", budget=9
)


def test_a_tool_with_settings_runs_ours_with_those_parameters_overridden():
    tool = "ours:log_loss+max_trial_share=0.1+sego.ensemble_size=4+voting=null"
    name, params = flaml_comparison.parse_tool(tool)
    assert name == "ours:log_loss"
    assert params == {
        "max_trial_share": 0.1,
        "sego": {"ensemble_size": 4},
        "voting": None,
    }
    setup = flaml_comparison.tool_setup(tool, "classification", ARGS)
    assert setup["method"] == "sego:log_loss" and setup["model"] == "sego_sklearn"
    assert json.loads(setup["params"]) == params
    # a SEGO objective is for classification only
    assert flaml_comparison.tool_setup(tool, "regression", ARGS) == {}
    plain = flaml_comparison.tool_setup("ours", "regression", ARGS)
    assert plain == {"method": "segor", "model": "segor_sklearn", "budget": 9}
    assert flaml_comparison.label(tool) == (
        "ours, sego log_loss (max_trial_share=0.1+sego.ensemble_size=4+voting=null)"
    )


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ("autosklearn", "unknown tool 'autosklearn'"),
        ("ours+max_trial_share", "only our tools take settings, as +name=value"),
        ("flaml+time_budget=3", "only our tools take settings"),
    ],
)
def test_a_bad_tool_name_is_refused_naming_it(tool, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        flaml_comparison.tool_name(tool)
