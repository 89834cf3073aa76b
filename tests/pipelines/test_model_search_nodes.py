"""The model search nodes: generated from the registry, thin around run_method."""

import os

import numpy as np
import pandas as pd
import pytest

from ensemble_bo import events
from ensemble_bo.core import workers
from ensemble_bo.core.journal import JournalFolder, TrialJournal
from ensemble_bo.core.methods import METHODS, POSTHOC, run_method
from ensemble_bo.core.preparation import make_model_input
from ensemble_bo.pipelines.model_search.nodes import (
    display_name_blocks,
    refit_and_score,
    report_node,
    search_node,
    selection_node,
)
from ensemble_bo.reporting import SEARCH_REPORTS
from tests.support import cheap_parameters

CONF = cheap_parameters()  # the regression searches: the cheap tree
RNG = np.random.default_rng(0)
FEATURES = pd.DataFrame(RNG.normal(size=(60, 3)), columns=["x0", "x1", "x2"])
CODES = (FEATURES.x0 + 0.3 * FEATURES.x1 > 0).astype(int) + (FEATURES.x2 > 1)
LABELS = pd.Series(np.array(["low", "mid", "high"])[CODES], name="target")
VALUES = pd.Series(3.0 * FEATURES.x0 + 10.0 + 0.1 * RNG.normal(size=60), name="y")
FOLDS = np.arange(60) % 5


def model_input(target, task):
    info = {"name": "toy", "task": task, "categorical_columns": []}
    return make_model_input(FEATURES, target, info, FOLDS)


def fast(name, **change):
    block = {**CONF[name], "time_limit": None, **change}
    if block["optimizer"]["kind"] == "gp":
        block["optimizer"] = {**block["optimizer"], "n_initial": 3}
    return block


# The refit node's final model: refit members, no conformal fold models.
REFIT = {
    "final_model": "refit",
    "conformal": False,
    "conformal_rows": None,
    "split_conformal_above": None,
}


def blocks_of(method, budget):
    return {
        name: fast(name)
        if isinstance(CONF[name], dict) and "optimizer" in CONF[name]
        else CONF[name]
        for name in method.params
    } | {"budget": budget}


@pytest.fixture
def heard():
    received = []
    events.subscribe(received.append)
    yield received
    events.unsubscribe(received.append)


def test_the_search_node_runs_the_method_and_publishes_each_iteration(heard, tmp_path):
    method = METHODS["smbo_posthoc"]
    data = model_input(VALUES, "regression")
    settings = blocks_of(method, budget=6)
    journals = JournalFolder(tmp_path)
    search = search_node(method)
    result = search(data, data, 2, journals, True, **REFIT, **settings)
    again = run_method(method, data, settings, 2)
    assert result.members == again.members
    (resumable,) = [e for e in heard if isinstance(e, events.SearchResumable)]
    assert resumable.recorded == 0
    iterations = [e for e in heard if isinstance(e, events.IterationEnded)]
    assert [e.step for e in iterations] == [0, 1, 2, 3, 4, 5, 5]  # selection: 5 again
    assert (
        iterations[-1].metrics["cv_loss_ensemble"] == result.history[-1].ensemble_loss
    )
    assert search.__name__ == "search_smbo_posthoc"

    # the journal holds the 6 trials: the same search again trains none of them
    assert len(TrialJournal(resumable.journal).entries()) == 6
    assert search(data, data, 2, journals, True, **REFIT, **settings).trials_reused == 6
    # resume=False drops them and trains afresh
    assert (
        search(data, data, 2, journals, False, **REFIT, **settings).trials_reused == 0
    )


def test_the_search_node_keeps_back_the_time_of_the_final_model_to_be_fit(tmp_path):
    # 5 folds: a refit member fits 1/4 of its trial's rows, CV+ conformal
    # fold models one trial's, a bagged member one trial's.
    data = model_input(VALUES, "regression")
    settings = blocks_of(METHODS["smbo"], budget=3) | {"time_budget": 600}
    search = search_node(METHODS["smbo"])
    journals = JournalFolder(tmp_path)
    conformal = {**REFIT, "conformal": True}
    result = search(data, data, 2, journals, True, **conformal, **settings)
    member_seconds = sum(result.pool.fit_seconds[i] for i in set(result.members))
    kept = result.search_metrics["final_fit_seconds_kept"]
    assert member_seconds > 0 and kept == pytest.approx(1.25 * member_seconds)
    # the same trials, replayed from the journal at their recorded seconds
    bagged = {**REFIT, "final_model": "bagged"}
    again = search(data, data, 2, journals, True, **bagged, **settings)
    assert again.trials_reused == 3 and again.members == result.members
    assert again.search_metrics["final_fit_seconds_kept"] == pytest.approx(
        member_seconds
    )


def test_the_search_node_leaves_no_idle_worker_behind(tmp_path, monkeypatch):
    parked_when_stopped = []

    def stop():
        parked_when_stopped.append(os.getpid() in workers._parked_workers)
        workers.stop_parked_worker()

    monkeypatch.setattr(
        "ensemble_bo.pipelines.model_search.nodes.stop_parked_worker", stop
    )
    method = METHODS["segor"]
    settings = blocks_of(method, budget=2)
    # a time limit: the trials train in a worker process, parked at the end
    settings["segor"] = {**settings["segor"], "time_limit": 60}
    data = model_input(VALUES, "regression")
    search_node(method)(
        data, data, 2, JournalFolder(tmp_path), True, **REFIT, **settings
    )
    assert parked_when_stopped == [True]
    assert workers._take_parked_worker() is None


def test_a_selection_node_names_its_source_when_the_pool_does_not_fit():
    data = model_input(VALUES, "regression")
    source = run_method("smbo", data, blocks_of(METHODS["smbo"], 4), 0)
    other = model_input(VALUES + 1.0, "regression")
    select = selection_node(POSTHOC)
    with pytest.raises(ValueError, match="posthoc_source='smbo': the saved pool"):
        select(source, other, "smbo", CONF["posthoc"], 0, CONF["inference"])
    selected = select(source, data, "smbo", CONF["posthoc"], 0, CONF["inference"])
    assert selected.pool is source.pool and selected.history[-1].action == "add"


def test_refit_scores_a_classification_ensemble_by_its_error_rate():
    data = model_input(LABELS, "classification")
    method = METHODS["sego"]
    settings = blocks_of(method, 6) | {"sego": fast("sego", ensemble_size=3)}
    result = run_method(method, data, settings, 0)
    model, metrics = refit_and_score(
        result,
        data,
        data,
        FEATURES[:40],
        LABELS[:40],
        FEATURES[40:],
        LABELS[40:],
        "hard",
        0,
        "refit",
        False,
        False,
        None,
        None,
        None,
    )
    predictions = model.predict(FEATURES[40:])
    assert set(predictions) <= {"low", "mid", "high"}
    assert metrics["test_error_ensemble"] == pytest.approx(
        np.mean(predictions != LABELS[40:].to_numpy())
    )
    assert metrics["ensemble_members_distinct"] == len(result.member_weights)


def test_refit_scores_regression_on_the_standardized_target():
    data = model_input(VALUES, "regression")
    result = run_method("segor", data, blocks_of(METHODS["segor"], 5), 0)
    model, metrics = refit_and_score(
        result,
        data,
        data,
        FEATURES[:40],
        VALUES[:40],
        FEATURES[40:],
        VALUES[40:],
        "hard",
        0,
        "refit",
        True,
        False,
        None,
        None,
        None,
    )
    assert not hasattr(model, "predict_interval")  # conformal off
    residuals = (model.predict(FEATURES[40:]) - VALUES[40:]) / VALUES.std(ddof=0)
    assert metrics["test_mse_ensemble"] == pytest.approx(np.mean(residuals**2))
    # stacking asked for: both CV losses and the choice are logged
    assert metrics["stacking_chosen"] == float(
        metrics["stacking_cv_loss"] < metrics["stacking_ensemble_cv_loss"]
    )
    # the time split: the search's seconds (from its result) and the refit's
    assert metrics["search_seconds"] == result.search_seconds > 0
    assert metrics["refit_seconds"] > 0 and metrics["trials"] == 5
    assert metrics["time_budget_reached"] == 0.0


def test_reports_carry_the_labels_of_the_search_and_its_selection():
    assert display_name_blocks(METHODS["smbo_posthoc"]) == ("smbo", "posthoc")
    assert display_name_blocks(METHODS["ers"]) == ("ers",)
    data = model_input(VALUES, "regression")
    result = run_method("segor", data, blocks_of(METHODS["segor"], 4), 0)
    report = report_node(("smbo", "posthoc"))
    reports = report(result, data, smbo=CONF["smbo"], posthoc=CONF["posthoc"])
    history, rungs, composition, convergence = (
        reports[name]
        for name in (
            "trial_history",
            "rung_history",
            "ensemble_composition",
            "convergence_plot",
        )
    )
    assert convergence.axes[0].get_title() == "SMBO + post-hoc on toy"
    assert len(history) == 4 and rungs.empty  # no fidelity schedule
    assert composition["weight"].sum() == pytest.approx(1.0)
    # every declared report, the heatmap titled like the convergence plot
    assert set(reports) == set(SEARCH_REPORTS)
    assert (
        reports["diversity_heatmap"].axes[0].get_title()
        == "Ensemble diversity, SMBO + post-hoc on toy"
    )
    assert set(reports["diversity"]) == {"ensemble_mutual_information"}
