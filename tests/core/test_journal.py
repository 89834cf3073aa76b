"""Trial journals: a stopped search resumes without retraining and ends the same."""

import dataclasses

import numpy as np
import pytest

from ensemble_bo.core.journal import ReplayingRunner, TrialJournal, journal_key
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.core.runners import SerialRunner
from ensemble_bo.core.trials import TrialResult
from tests.support import cheap_parameters, from_config, request, stop_after

CONF = cheap_parameters()  # segor searches the tree
RNG = np.random.default_rng(0)
X = RNG.normal(size=(50, 3))
DATA = ModelInput(
    X,
    X[:, 0] + 0.2 * RNG.normal(size=50),
    np.arange(50) % 5,
    "regression",
    {"mean": 0.0, "std": 1.0},
    {"name": "toy", "categorical_columns": []},
)


def settings(budget=8):
    segor = {
        **CONF["segor"],
        "time_limit": None,
        "optimizer": {**CONF["segor"]["optimizer"], "n_initial": 3},
    }
    return {
        **CONF,
        "segor": segor,
        "ensemble": {**CONF["ensemble"], "size": 3},
        "budget": budget,
    }


@pytest.mark.parametrize("stopped_at", [0, 3, 7])
def test_a_resumed_search_retrains_nothing_and_ends_as_an_uninterrupted_one(
    tmp_path, stopped_at
):
    uninterrupted = run_method("segor", DATA, settings(), 5)
    journal = TrialJournal(tmp_path / "journal")
    with pytest.raises(SearchInterrupted):
        run_method("segor", DATA, settings(), 5, [stop_after(stopped_at)], journal)
    assert len(journal.entries()) == stopped_at + 1

    resumed = run_method("segor", DATA, settings(), 5, journal=journal)
    assert resumed.trials_reused == stopped_at + 1
    assert resumed.members == uninterrupted.members
    assert resumed.pool.configs == uninterrupted.pool.configs
    np.testing.assert_array_equal(
        resumed.pool.predictions, uninterrupted.pool.predictions
    )
    assert [r.ensemble_loss for r in resumed.history] == [
        r.ensemble_loss for r in uninterrupted.history
    ]
    # every trial is in the journal now: a third run trains nothing
    assert run_method("segor", DATA, settings(), 5, journal=journal).trials_reused == 8


def test_a_journal_that_no_longer_matches_is_dropped_from_where_it_differs(tmp_path):
    journal = TrialJournal(tmp_path / "j")
    calls = []

    def evaluate(config):
        calls.append(config)
        return TrialResult(np.full(4, float(config["x"])), 0.1)

    def trial(runner, ticket, config):
        runner.submit(request(config, ticket=ticket))
        assert runner.next_finished()[0] == ticket
        return runner

    first = ReplayingRunner(SerialRunner(from_config(evaluate)), journal)
    for ticket, x in enumerate((1, 2, 3)):
        trial(first, ticket, {"x": x})
    assert first.trained == 3 and len(journal.entries()) == 3

    second = ReplayingRunner(SerialRunner(from_config(evaluate)), journal)
    second.submit(request({"x": 1}))
    assert second.next_finished()[1].oof_predictions.tolist() == [1.0] * 4
    trial(second, 1, {"x": 9})  # the search went another way at trial 1
    assert (second.reused, second.trained) == (1, 1)
    assert [entry.request.config for entry in journal.entries()] == [
        {"x": 1},
        {"x": 9},
    ]
    assert calls == [{"x": 1}, {"x": 2}, {"x": 3}, {"x": 9}]


def test_a_torn_or_missing_trial_ends_the_journal_there(tmp_path):
    journal = TrialJournal(tmp_path / "j")
    for index in (0, 1, 3):
        journal.record(
            index, request({"x": index}, ticket=index), TrialResult(None, 0.0, "boom")
        )
    (tmp_path / "j" / ".trial_2.pkl.123.tmp").write_bytes(b"half a write")
    assert [entry.request.config for entry in journal.entries()] == [
        {"x": 0},
        {"x": 1},
    ]
    journal.discard()
    assert journal.entries() == [] and not (tmp_path / "j").exists()


def test_the_key_changes_with_anything_that_changes_the_search():
    base = journal_key("segor", settings(), 5, DATA, "0.1")
    assert base == journal_key("segor", settings(), 5, DATA, "0.1")
    other_data = ModelInput(
        DATA.features, DATA.target + 1.0, DATA.fold_ids, "regression", {}, {}
    )
    for changed in (
        journal_key("smbo", settings(), 5, DATA, "0.1"),
        journal_key("segor", settings(budget=9), 5, DATA, "0.1"),
        journal_key("segor", settings(), 6, DATA, "0.1"),
        journal_key("segor", settings(), 5, other_data, "0.1"),
        journal_key("segor", settings(), 5, DATA, "0.2"),
    ):
        assert changed != base
    # where the trials run is not part of the search: a journal written on a
    # cluster resumes on local workers (the replay checks each proposal)
    on_dask = {
        **settings(),
        "parallel": {"backend": "dask", "n_workers": 4, "mode": "async"},
    }
    assert journal_key("segor", on_dask, 5, DATA, "0.1") == base


def test_a_resumed_search_counts_its_own_seconds_not_the_replayed_trials(tmp_path):
    journal = TrialJournal(tmp_path / "journal")
    with pytest.raises(SearchInterrupted):
        run_method("segor", DATA, settings(), 5, [stop_after(3)], journal)
    # as if each trial had taken 500 s when the stopped run trained it
    for index, entry in journal.recorded().items():
        slow = dataclasses.replace(entry.result, fit_seconds=500.0)
        journal.record(index, entry.request, slow)

    resumed = run_method("segor", DATA, settings(), 5, journal=journal)
    assert resumed.trials_reused == 4
    # the seconds of this search alone; the 2000 s were an earlier run's
    assert 0 < resumed.search_seconds < 100
