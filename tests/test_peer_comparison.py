"""benchmarks/peer_comparison.py: the AutoGluon runner's contract, the report's tables.

The contract is checked with a stub runner (this file's STUB, run by this
Python) in place of AutoGluon; one real AutoGluon cell runs only where its
venv (benchmarks/.venv-autogluon) is built.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts
from ensemble_bo.core.grid import ToolCell, dataset_task, run_tool_cell, split_dataset
from ensemble_bo.manifest import read_manifest
from tests.core.test_grid import CONF

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings by name
import peer_report  # noqa: E402
import peer_tools  # noqa: E402

# A runner that keeps the contract without AutoGluon: it predicts class code 1
# with probability 0.75, the rest shared by the other classes (regression: the
# training mean), and reports
# what it was given (presets, rows, time limit) in its answer.
STUB = """
import json, sys
from pathlib import Path
import pandas as pd
folder = Path(sys.argv[1])
request = json.loads((folder / "request.json").read_text())
train = pd.read_parquet(folder / "train.parquet")
test = pd.read_parquet(folder / "test.parquet")
label = train.pop(request["label"])
classes = request["problem_type"] != "regression"
row = [0.25 / label.max()] * (label.max() + 1) if classes else None
if classes:
    row[1] = 0.75
result = {
    "predictions": [1 if classes else float(label.mean())] * len(test),
    "probabilities": [row] * len(test) if classes else None,
    "fit_seconds": request["time_limit"] / 2,
    "n_models": len(train),
    "families": [request["presets"], request["problem_type"]],
    "best_model": ",".join(train.columns),
    "model_bytes": 1000,
    "fitted_bytes": 2000,
    "predict_seconds_per_1000": 0.5,
    "versions": {"stub": "1"},
}
(folder / "result.json").write_text(json.dumps(result))
"""


@pytest.fixture
def stub(tmp_path) -> Path:
    path = tmp_path / "stub_runner.py"
    path.write_text(STUB)
    return path


def cell(task: str, dataset: str, tool: str = "autogluon_best") -> ToolCell:
    setup = peer_tools.tool_setup(tool, task, None)
    return ToolCell(
        dataset, 0, 0, tool, tuple(sorted(setup.items())), time_budget=8.0, task=task
    )


def test_autogluon_s_answers_come_back_in_our_classes_and_are_scored_by_us(stub):
    X = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": list("xyxy")})
    y = pd.Series(["no", "yes", "no", "yes"])
    test = pd.DataFrame({"a": [5.0, 6.0], "b": ["x", "z"]}, index=[10, 11])
    model, info = peer_tools.fit_autogluon(
        cell("classification", "toy"), X, y, test, python=sys.executable, runner=stub
    )
    # code 1 of np.unique's order is "yes"; probabilities by classes_
    assert model.predict(test).tolist() == ["yes", "yes"]
    assert model.classes_.tolist() == ["no", "yes"]
    assert model.predict_proba(test).tolist() == [[0.25, 0.75]] * 2
    assert info["families"] == ["best_quality", "binary"]
    assert info["n_trials"] == 4 and info["n_families"] == 2
    assert info["best_model"] == "a,b"  # the features, not the label
    assert info["fit_wall_seconds"] == info["search_seconds"] == 4.0
    assert info["refit_seconds"] == 0.0
    assert info["model_bytes"] == 1000 and info["fitted_bytes"] == 2000
    assert info["predict_seconds_per_1000"] == 0.5
    with pytest.raises(ValueError, match="2 given rows; asked for 1 other"):
        model.predict(test.iloc[:1])


def test_an_autogluon_cell_is_scored_like_every_tool(stub):
    raw = pd.read_csv(BENCHMARKS.parent / "data/01_raw/wine.csv")
    wine = cell("classification", "wine", "autogluon_medium")
    split = split_dataset(raw, "wine", CONF["data_processing"], wine.seed)
    record = run_tool_cell(
        wine,
        raw,
        CONF["data_processing"],
        lambda c, X, y: peer_tools.fit_autogluon(
            c, X, y, split.test_features, python=sys.executable, runner=stub
        ),
    )
    assert record["status"] == "ok", record.get("error")
    labels = np.unique(split.train_target)
    # every test row predicted as the second class: its error is the others' share
    expected = float(np.mean(split.test_target.to_numpy() != labels[1]))
    assert record["test_loss"] == pytest.approx(expected)
    assert record["families"] == ["medium_quality", "multiclass"]
    assert "test_log_loss" in record and "test_brier" in record


def test_a_runner_that_fails_says_why(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import sys; sys.exit('no AutoGluon here')")
    X, y = pd.DataFrame({"a": [1.0, 2.0]}), pd.Series([1.0, 2.0])
    with pytest.raises(RuntimeError, match="exited with 1: no AutoGluon here"):
        peer_tools.fit_autogluon(
            cell("regression", "toy"), X, y, X, python=sys.executable, runner=broken
        )


# --- the report -------------------------------------------------------------------


def records(losses: dict[tuple[str, str, int], float], **fields) -> dict:
    """One finished regression record per (tool, dataset, repetition) -> loss."""
    return {
        f"{dataset}/r{r}/{tool}/T10": {
            "key": f"{dataset}/r{r}/{tool}/T10",
            "dataset": dataset,
            "task": "regression",
            "repetition": r,
            "tool": tool,
            "time_budget": 10.0,
            "setup": {},
            "status": "ok",
            "test_loss": loss,
            "n_trials": 3,
            "stopped_by": "time_budget",
            "fit_wall_seconds": 12.0,
            "search_seconds": 9.0,
            **fields,
        }
        for (tool, dataset, r), loss in losses.items()
    }


# ours against AutoGluon best: d1 ours wins 2 of 3, d2 ties once and loses twice
LOSSES = {
    ("ours", "d1", 0): 0.10,
    ("ours", "d1", 1): 0.20,
    ("ours", "d1", 2): 0.50,
    ("ours", "d2", 0): 0.30,
    ("ours", "d2", 1): 0.40,
    ("ours", "d2", 2): 0.35,
    ("autogluon_best", "d1", 0): 0.15,
    ("autogluon_best", "d1", 1): 0.30,
    ("autogluon_best", "d1", 2): 0.40,
    ("autogluon_best", "d2", 0): 0.30,
    ("autogluon_best", "d2", 1): 0.20,
    ("autogluon_best", "d2", 2): 0.25,
}


def test_win_rates_count_ties_half_and_p_is_scipy_s_two_sided_wilcoxon():
    frame = pd.DataFrame(records(LOSSES).values())
    (row,) = peer_report.comparison_rows(frame, ["autogluon_best", "ours"])
    label, cells, win_rate, p, dataset_rate, dataset_p = row
    assert label == "ours vs AutoGluon best" and cells == "6"
    assert win_rate == "0.42 (2.5/6)"  # 2 wins in d1, one tie in d2
    ours = [0.10, 0.20, 0.50, 0.30, 0.40, 0.35]
    theirs = [0.15, 0.30, 0.40, 0.30, 0.20, 0.25]
    assert float(p) == pytest.approx(stats.wilcoxon(ours, theirs).pvalue, abs=5e-4)
    # per dataset means: d1 0.2667 vs 0.2833 (won), d2 0.35 vs 0.25 (lost)
    assert dataset_rate == "0.50 (1/2)"
    expected = stats.wilcoxon([0.8 / 3, 1.05 / 3], [0.85 / 3, 0.75 / 3]).pvalue
    assert float(dataset_p) == pytest.approx(expected, abs=5e-4)


def test_every_one_of_our_tools_meets_every_peer():
    pairs = peer_report.comparison_pairs(
        ["flaml", "autogluon_best", "ours", "ours:error", "ours:log_loss"]
    )
    assert pairs == [
        ("ours", "flaml"),
        ("ours", "autogluon_best"),
        ("ours:error", "flaml"),
        ("ours:error", "autogluon_best"),
        ("ours:log_loss", "flaml"),
        ("ours:log_loss", "autogluon_best"),
        ("ours:log_loss", "ours:error"),
    ]


def test_the_family_mix_counts_the_cells_whose_stack_cv_chose():
    tool = "ours+stacking=true"
    cells = {(tool, "d1", 0): 0.1, (tool, "d1", 1): 0.2, (tool, "d2", 0): 0.3}
    chosen = iter([True, False, True])
    frame = pd.DataFrame(
        {**record, "stacking_chosen": next(chosen)}
        for record in records(
            cells,
            n_families=2,
            families={"knn": 0.5, "svr": 0.5},
            ensemble_members_distinct=3,
        ).values()
    )
    (line,) = peer_report.family_lines(frame, [tool])
    assert line.endswith("; stacked where CV chose it: 2 of 3.")
    # a tool without stacking says nothing of it
    frame["stacking_chosen"] = None
    (line,) = peer_report.family_lines(frame, [tool])
    assert "stacked" not in line and line.endswith("svr 3 (mean weight 0.50).")


def test_costs_are_means_per_tool_with_the_budget_share_and_megabytes():
    losses = {key: loss for key, loss in LOSSES.items() if key[0] == "autogluon_best"}
    frame = pd.DataFrame(
        records(
            losses,
            refit_seconds=0.0,
            n_families=2,
            families=["LGBModel", "CatBoostModel"],
            predict_seconds_per_1000=0.25,
            model_bytes=3_000_000,
            fitted_bytes=12_500_000,
        ).values()
    )
    (row,) = peer_report.cost_rows(frame, ["autogluon_best"])
    assert row == [
        "AutoGluon best",
        "6",
        "12.0",
        "1.20",  # 12 s of fit against T = 10 s
        "9.0",
        "0.0",
        "3.0",
        "3.0",
        "2.00",
        "0.250",
        "3.00",
        "12.50",
        "time_budget 6",
    ]


def test_the_report_reads_records_without_the_peers_columns():
    text = peer_report.report(records(LOSSES), "peers.jsonl")
    assert "## T = 10 s, regression" in text
    assert "| ours vs AutoGluon best | 6 | 0.42 (2.5/6) |" in text
    # no prediction times nor sizes stored: shown as missing, not as zero
    assert "| ours | 6 | 12.0 | 1.20 | 9.0 | - | - | 3.0 | - | - | - | - |" in text


def run_real_cell(tool_cell: ToolCell, fit_tool) -> tuple[dict, Any, pd.DataFrame]:
    """The record of `tool_cell` run on its bundled dataset by `fit_tool` (one of
    peer_tools' fit_*), the model it fitted and the test features it predicted."""
    raw = pd.read_csv(BENCHMARKS.parent / f"data/01_raw/{tool_cell.dataset}.csv")
    processing = CONF["data_processing"]
    test = split_dataset(
        raw, tool_cell.dataset, processing, tool_cell.seed
    ).test_features
    held = {}

    def fit(c, X, y):
        held["model"], info = fit_tool(c, X, y, test)
        return held["model"], info

    record = run_tool_cell(tool_cell, raw, processing, fit)
    assert record["status"] == "ok", record.get("error")
    return record, held["model"], test


@pytest.mark.slow
@pytest.mark.skipif(
    not peer_tools.AUTOGLUON_PYTHON.is_file(),
    reason="the AutoGluon venv is not built (benchmarks/requirements-autogluon.txt)",
)
def test_one_real_autogluon_cell():
    wine = cell("classification", "wine", "autogluon_medium")
    record, model, test = run_real_cell(wine, peer_tools.fit_autogluon)
    assert record["test_loss"] <= 0.2 and record["test_log_loss"] < 1.0
    # the labels are the most probable classes: columns in classes_' order
    probabilities = model.predict_proba(test)
    assert probabilities.shape == (len(test), 3)
    assert (model.classes_[probabilities.argmax(axis=1)] == model.predict(test)).all()
    assert record["n_trials"] >= 1 and record["families"]
    assert record["model_bytes"] > 0 and record["predict_seconds_per_1000"] > 0
    assert record["peer_versions"]["autogluon.tabular"] == "1.6.3"


# --- tool names with settings ---------------------------------------------------

ARGS = argparse.Namespace(
    regression_space="segor_sklearn", classification_space="sego_sklearn", budget=9
)


def test_a_tool_with_settings_runs_ours_with_those_parameters_overridden():
    tool = "ours:log_loss+max_trial_share=0.1+sego.ensemble_size=4+voting=null"
    name, params = peer_tools.parse_tool(tool)
    assert name == "ours:log_loss"
    assert params == {
        "max_trial_share": 0.1,
        "sego": {"ensemble_size": 4},
        "voting": None,
    }
    setup = peer_tools.tool_setup(tool, "classification", ARGS)
    assert setup["method"] == "sego:log_loss" and setup["model"] == "sego_sklearn"
    assert json.loads(setup["params"]) == params
    # a SEGO objective is for classification only
    assert peer_tools.tool_setup(tool, "regression", ARGS) == {}
    plain = peer_tools.tool_setup("ours", "regression", ARGS)
    assert plain == {"method": "segor", "model": "segor_sklearn", "budget": 9}
    assert peer_tools.label(tool) == (
        "ours, sego log_loss (max_trial_share=0.1+sego.ensemble_size=4+voting=null)"
    )


def test_a_model_setting_runs_ours_in_that_space_for_its_task_only():
    hgb = "ours+model=hist_gradient_boosting_regressor"
    lgbm = "ours+model=lightgbm_regressor"
    lgbm_classes = "ours+model=lightgbm_classifier+voting=soft"
    assert peer_tools.tool_setup(lgbm, "regression", ARGS) == {
        "method": "segor",
        "model": "lightgbm_regressor",
        "budget": 9,
    }
    assert peer_tools.tool_setup(lgbm, "classification", ARGS) == {}
    setup = peer_tools.tool_setup(lgbm_classes, "classification", ARGS)
    assert setup["model"] == "lightgbm_classifier"
    assert json.loads(setup["params"]) == {"voting": "soft"}
    # models of one task meet each other
    hgb_classes = "ours+model=hist_gradient_boosting_classifier"
    lgbm_only = "ours+model=lightgbm_classifier"
    catboost = "ours+model=catboost_regressor"
    pairs = peer_report.comparison_pairs([catboost, hgb, hgb_classes, lgbm, lgbm_only])
    assert pairs == [
        (hgb, catboost),
        (lgbm, catboost),
        (lgbm, hgb),
        (lgbm_only, hgb_classes),
    ]


def test_a_cv_setting_cross_validates_our_search_on_that_many_folds():
    tool = "ours+cv=3+final_model=bagged"
    setup = peer_tools.tool_setup(tool, "regression", ARGS)
    assert setup["cv"] == 3
    assert json.loads(setup["params"]) == {"final_model": "bagged"}
    assert "cv" not in peer_tools.tool_setup("ours", "regression", ARGS)
    setup = peer_tools.tool_setup("ours+cv=3", "regression", ARGS) | {"budget": 2}
    three = ToolCell(
        "diabetes", 0, 0, "ours+cv=3", tuple(sorted(setup.items())), task="regression"
    )
    _, search, _ = run_real_cell(three, peer_tools.fit_ours)
    assert sorted(np.unique(search.fold_ids_)) == [0, 1, 2]


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
        peer_tools.tool_name(tool)


def test_every_heldout_dataset_loads_as_its_manifest_says_and_passes_our_checks():
    # (peer_comparison.py itself is not imported: it pins the thread counts of
    # the process it is imported in)
    folder = BENCHMARKS / "heldout"
    entries = {entry["name"]: entry for entry in read_manifest(folder)}
    data_processing = default_parameters()["data_processing"]
    frames = scripts.raw_datasets(entries, BENCHMARKS.parent, folder)
    assert len(frames) == 16
    for name, frame in frames.items():
        expected = entries[name]["task"]
        assert dataset_task(frame, name, data_processing) == (
            "regression" if expected == "regression" else "classification"
        )
        # what every cell does first: our split, checks and feature encoding
        split_dataset(frame, name, data_processing, 0)
