"""The wall-time budget: the clock, the search loop that checks it, and a resumed
search that is charged its replayed trials. The loop's tests run on a fake clock,
so they are exact, not timed. The evaluator that cuts a trial at the budget's
end is tested with the other time limits, in test_evaluation.py."""

import re
from dataclasses import replace

import numpy as np
import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core import methods
from ensemble_bo.core.journal import ReplayingRunner, TrialJournal
from ensemble_bo.core.optimizer import RandomSearch
from ensemble_bo.core.preparation import search_input
from ensemble_bo.core.refit import ConformalPlan, conformal_plan, final_fit_factor
from ensemble_bo.core.results import AllTrialsFailed
from ensemble_bo.core.runners import SerialRunner
from ensemble_bo.core.time_budget import (
    LARGE_DATA_TRIAL_SHARE,
    SMALL_DATA_TRIAL_SHARE,
    TimeBudget,
    TrialLimit,
    check_time_budget,
    check_trial_share,
    cut_trial,
    deadline_for,
    effective_trial_share,
    trial_limit,
)
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.core.test_strategies import FOLDS, SPACE, Y, synthetic_evaluator
from tests.support import (
    cross_validation_evaluator,
    model_input,
    request,
    segor_search,
)


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("seconds", [0, -1.0, float("inf"), float("nan"), True, "30"])
def test_a_time_budget_must_be_positive_and_finite(seconds):
    with pytest.raises(ValueError, match=f"got {re.escape(repr(seconds))}"):
        check_time_budget(seconds)


def test_the_clock_counts_from_its_start_plus_what_it_is_charged():
    clock = FakeClock()
    budget = TimeBudget(10, clock=clock)
    budget.start()
    clock.now += 4.0
    budget.charge(3.5)
    assert budget.elapsed == 7.5 and budget.remaining() == 2.5
    assert not budget.spent()
    clock.now += 2.5
    assert budget.spent()
    unlimited = TimeBudget(None, clock=clock)
    unlimited.start()
    clock.now += 1e6
    assert unlimited.remaining() is None and not unlimited.spent()


def timed_segor(
    seconds,
    trial_seconds,
    budget=100,
    final_fit_factor=0.0,
    kept=None,
    final_members=None,
):
    """A SEGOR search on the synthetic pool whose every trial takes
    `trial_seconds` on a fake clock, keeping back `final_fit_factor` times
    its members' trial seconds (or those `final_members` names); its result.
    `kept` (a list) gets each iteration's (seconds spent, seconds kept back)
    as it ends."""
    clock = FakeClock()

    def evaluate(config):
        clock.now += trial_seconds
        return replace(synthetic_evaluator(config), fit_seconds=trial_seconds)

    # seed 1: the first configuration trains (the synthetic pool fails a > 0.85)
    search = segor_search(RandomSearch(SPACE, seed=1), evaluate, Y, FOLDS, 3)
    search.final_members = final_members
    time_budget = TimeBudget(seconds, clock=clock, final_fit_factor=final_fit_factor)
    callbacks = (
        ()
        if kept is None
        else [lambda record: kept.append((time_budget.elapsed, time_budget.reserve))]
    )
    return search.run(budget, callbacks, time_budget=time_budget)


def test_a_search_stops_between_trials_once_its_time_budget_is_spent():
    # Trials end at 0.3, 0.6, 0.9, 1.2 s: the budget of 1 s is spent after the
    # fourth, so the fifth is never started, and the search overshoots by less
    # than one trial.
    result = timed_segor(seconds=1.0, trial_seconds=0.3)
    assert len(result.pool) == len(result.history) == 4
    assert result.stopped_by == "time_budget"
    assert result.search_seconds == pytest.approx(1.2)
    assert result.search_seconds - 1.0 < 0.3
    assert result.members  # the ensemble of what was trained is kept


def budget_keeping(seconds, final_fit_factor, spent, member_seconds):
    """A started budget on a fake clock after `spent` seconds, keeping back
    the final fit of members whose trials took `member_seconds`; (budget, clock)."""
    clock = FakeClock()
    budget = TimeBudget(seconds, clock=clock, final_fit_factor=final_fit_factor)
    budget.start()
    clock.now += spent
    budget.reserve_final_fit(member_seconds)
    return budget, clock


def test_the_time_kept_for_the_final_fit_is_its_factor_times_its_members_trials():
    budget, clock = budget_keeping(10, 0.5, spent=4.0, member_seconds=3.0)
    assert budget.reserve == 1.5 and budget.remaining() == pytest.approx(4.5)
    clock.now += 4.5
    assert budget.spent()  # 8.5 s of 10 spent, 1.5 s kept for the final fit
    budget.reserve_final_fit(float("nan"))  # no member measured: nothing kept
    assert budget.reserve == 0.0 and not budget.spent()
    for factor in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="final_fit_factor"):
            TimeBudget(10, final_fit_factor=factor)


def test_a_search_stops_where_its_final_fit_would_end_the_budget():
    # Trials of 0.3 s, a final fit of 2x its distinct members' trials: the
    # search stops after the first iteration whose seconds plus the time kept
    # back reach the 3 s budget, which without keeping any it would not.
    kept = []
    result = timed_segor(3.0, 0.3, final_fit_factor=2.0, kept=kept)
    spent = [elapsed + reserve for elapsed, reserve in kept]
    assert all(total < 3.0 for total in spent[:-1]) and spent[-1] >= 3.0
    assert kept[-1][0] < 3.0 and result.stopped_by == "time_budget"
    assert kept[-1][1] == pytest.approx(2.0 * 0.3 * len(set(result.members)))
    assert result.search_metrics["final_fit_seconds_kept"] == kept[-1][1]
    # the trials are the first of the search that keeps nothing back
    plain = timed_segor(3.0, 0.3)
    assert len(plain.pool) > len(result.pool)
    assert result.pool.configs == plain.pool.configs[: len(result.pool)]
    assert "final_fit_seconds_kept" not in plain.search_metrics


def test_a_stage_that_chooses_the_members_again_sets_what_is_kept_back():
    # a bagged weighting ships other members than the slots: the search keeps
    # back the final fit of those it names, here every model trained so far
    asked = []

    def every_model(pool, members):
        asked.append((len(pool), sorted(set(members))))
        return list(range(len(pool)))

    kept = []
    result = timed_segor(
        3.0, 0.3, final_fit_factor=2.0, kept=kept, final_members=every_model
    )
    assert [size for size, _ in asked] == list(range(1, len(result.pool) + 1))
    assert [reserve for _, reserve in kept] == pytest.approx(
        [2.0 * 0.3 * size for size, _ in asked]
    )
    # without a time budget nothing is kept back, and nothing asked
    asked.clear()
    timed_segor(None, 0.3, budget=4, final_fit_factor=2.0, final_members=every_model)
    assert asked == []


def test_the_final_fit_factor_counts_the_rows_the_final_model_fits():
    # 4 folds: a trial fits 4 fold models on 3/4 of the rows each.
    data = model_input(100, "regression")
    assert final_fit_factor("refit", data) == pytest.approx(1 / 3)
    assert final_fit_factor("bagged", data) == pytest.approx(1.0)
    # CV+ adds 4 fold models on every fold's complement: one trial's fits
    cv_plus = conformal_plan(True, data)
    assert final_fit_factor("refit", data, cv_plus) == pytest.approx(1 / 3 + 1)
    assert final_fit_factor("bagged", data, cv_plus) == pytest.approx(2.0)
    # split conformal: one fold model, here on half its rows
    split = ConformalPlan(data.fold_ids, train_fraction=0.5, calibration_folds=(0,))
    assert final_fit_factor("refit", data, split) == pytest.approx(1 / 3 + 1 / 8)
    # a search on a sample of 400 rows: the final model fits 4x its rows
    sampled = replace(data, sampled_from=400)
    assert final_fit_factor("refit", sampled) == pytest.approx(4 / 3)
    assert final_fit_factor("bagged", sampled, cv_plus) == pytest.approx(8.0)
    with pytest.raises(ValueError, match="final_model='bagging'"):
        final_fit_factor("bagging", data)


def test_a_trial_cut_for_the_final_fit_says_so():
    budget, _ = budget_keeping(30.0, 1.0, spent=20.0, member_seconds=6.0)
    # 4 s left after the final fit's 6 s; a trial of t s that joins the
    # ensemble adds t s of its own (factor 1): it may take 2 s
    limit, cut_by, budget_end = trial_limit(None, budget)
    assert limit == pytest.approx(2.0) and budget_end
    assert cut_by == (
        "was cut at the end of the time budget of 30 s less the time kept for "
        "the final fit (6.0 s, and this trial's own if it joins the ensemble)"
    )


def test_a_trial_cut_at_the_budget_s_end_spends_the_budget():
    budget, clock = budget_keeping(30.0, 1.0, spent=20.0, member_seconds=6.0)
    limit = trial_limit(None, budget)  # 2 s, as above
    clock.now += limit.seconds
    # the 2 s kept for this trial's own final fit are left, but it failed
    assert budget.remaining() == pytest.approx(2.0) and not budget.spent()
    result = cut_trial(limit, budget, limit.seconds)
    assert not result.ok and result.fit_seconds == limit.seconds
    assert result.error == f"TimeoutError: fit {limit.cut_by}"
    assert budget.spent() and budget.remaining() == pytest.approx(2.0)
    budget.start()  # a new start has all of it again
    assert not budget.spent()


def test_a_trial_cut_by_another_limit_leaves_the_budget():
    budget, _ = budget_keeping(30.0, 1.0, spent=5.0, member_seconds=1.0)
    for time_limit in (1.0, None):  # per configuration; share of the budget
        budget.trial_share = None if time_limit else 0.1
        limit = trial_limit(time_limit, budget)
        assert not limit.budget_end and limit.seconds < budget.remaining() / 2
        assert not cut_trial(limit, budget, limit.seconds).ok
        assert not budget.spent()
    assert cut_trial(TrialLimit(1.0, "ended", True), None, 1.0).error == (
        "TimeoutError: fit ended"
    )
    unlimited = TimeBudget(None)
    unlimited.end()
    assert not unlimited.spent()


def test_a_search_ends_with_its_first_trial_cut_at_the_budget_s_end():
    # Trials of 0.4 s, and a final fit of 1x its members' trials kept back:
    # the trial that the budget's end cuts leaves the time it was kept for
    # its own final fit. Before, the search went on with the trials that
    # time allowed, each cut after half the time left (a new worker each).
    clock = FakeClock()

    def evaluate(request):
        limit = trial_limit(None, request.deadline)
        if limit.seconds is not None and limit.seconds < 0.4:
            clock.now += limit.seconds
            return cut_trial(limit, request.deadline, limit.seconds)
        clock.now += 0.4
        return replace(synthetic_evaluator(dict(request.config)), fit_seconds=0.4)

    search = segor_search(RandomSearch(SPACE, seed=1), evaluate, Y, FOLDS, 3)
    budget = TimeBudget(3.0, clock=clock, final_fit_factor=1.0)
    result = search.run(100, time_budget=budget)
    cut = [
        index
        for index, error in enumerate(result.pool.errors)
        if error and "end of the time budget" in error
    ]
    assert cut == [len(result.pool) - 1]  # one cut, the search's last trial
    assert result.stopped_by == "time_budget"
    assert budget.elapsed + budget.reserve < 3.0  # time left for the final fit


def test_the_trial_budget_ends_a_search_that_has_time_left():
    result = timed_segor(seconds=100.0, trial_seconds=0.3, budget=5)
    assert len(result.pool) == 5 and result.stopped_by == "budget"
    assert result.search_seconds == pytest.approx(1.5)


def test_the_first_trial_always_runs():
    # A budget spent before any trial (e.g. by a slow proposal) still trains one:
    # a search with nothing trained has no ensemble to refit.
    result = timed_segor(seconds=0.1, trial_seconds=1.0)
    assert len(result.pool) == 1 and result.stopped_by == "time_budget"


def test_a_time_budget_that_ends_with_only_failed_trials_says_so():
    clock = FakeClock()

    def evaluate(config):
        clock.now += 1.0
        return TrialResult(None, 1.0, "ValueError: no")

    search = segor_search(RandomSearch(SPACE, seed=1), evaluate, Y, FOLDS, 3)
    with pytest.raises(
        AllTrialsFailed, match="the time budget ended the search after 2 trials"
    ):
        search.run(100, time_budget=TimeBudget(1.5, clock=clock))


def test_the_same_seed_and_time_budget_give_the_same_trials_as_the_plain_budget():
    # The time budget only chooses where the search stops: its trials are the
    # first trials of the search without it.
    timed = timed_segor(seconds=1.0, trial_seconds=0.3)
    plain = timed_segor(seconds=None, trial_seconds=0.3, budget=4)
    assert timed.pool.configs == plain.pool.configs
    assert timed.members == plain.members


def test_a_resumed_search_is_charged_the_recorded_seconds_of_its_replayed_trials(
    tmp_path,
):
    journal = TrialJournal(tmp_path / "journal")
    for index, seconds in enumerate([0.4, 0.5]):
        journal.record(
            index,
            request({"a": index}, ticket=index),
            TrialResult(np.zeros(3), seconds),
        )
    trained = []
    clock = FakeClock()
    budget = TimeBudget(2.0, clock=clock)
    budget.start()
    replay = ReplayingRunner(
        SerialRunner(
            lambda asked: trained.append(dict(asked.config))
            or TrialResult(np.ones(3), 0.1)
        ),
        journal,
        budget,
    )
    for ticket in range(2):
        replay.submit(request({"a": ticket}, ticket=ticket))
        replay.next_finished()
    assert trained == [] and budget.elapsed == pytest.approx(0.9)
    # trained, not replayed: its time is the clock's, not charged
    replay.submit(request({"a": 2}, ticket=2))
    replay.next_finished()
    assert trained == [{"a": 2}] and budget.elapsed == pytest.approx(0.9)


@pytest.mark.parametrize("seconds", [0, -5, "60s"])
def test_a_bad_time_budget_is_refused_before_anything_is_trained(seconds):
    settings = {**default_parameters(), "time_budget": seconds}
    with pytest.raises(InvalidInput, match=f"time_budget must be .*got {seconds!r}"):
        check_settings("segor", settings)


@pytest.mark.parametrize("share", [0, -0.1, 1.5, float("nan"), True, "0.1"])
def test_a_trial_share_must_be_in_zero_one(share):
    with pytest.raises(
        ValueError, match=f"max_trial_share .*got {re.escape(repr(share))}"
    ):
        check_trial_share(share)
    settings = {**default_parameters(), "max_trial_share": share}
    with pytest.raises(InvalidInput, match="max_trial_share must be"):
        check_settings("segor", settings)


def test_auto_caps_a_trial_at_a_tenth_on_a_sample_of_large_data_else_a_quarter():
    assert default_parameters()["max_trial_share"] == "auto"
    assert check_trial_share("auto") == "auto"
    assert (LARGE_DATA_TRIAL_SHARE, SMALL_DATA_TRIAL_SHARE) == (0.1, 0.25)
    assert effective_trial_share("auto", sampled=True) == 0.1
    assert effective_trial_share("auto", sampled=False) == 0.25
    # a share the user set, or none, applies to any data
    assert effective_trial_share(0.5, sampled=False) == 0.5
    assert effective_trial_share(None, sampled=True) is None
    assert effective_trial_share(None, sampled=False) is None
    # the clock takes a share, never "auto"
    with pytest.raises(ValueError, match="max_trial_share .*got 'auto'"):
        TimeBudget(60.0, trial_share="auto")


@pytest.mark.parametrize(("rows", "cap"), [(300, 6.0), (140, 15.0)])
def test_a_search_caps_its_trials_at_a_tenth_of_its_budget_on_a_sample_else_a_quarter(
    rows, cap, monkeypatch
):
    caps = []

    class Recorded(TimeBudget):
        def start(self):
            caps.append(self.trial_cap)
            super().start()

    monkeypatch.setattr(methods, "TimeBudget", Recorded)
    data = model_input(rows, "regression")
    sample = search_input(data, 150, seed=1)  # 300 rows: a sample; 140: all
    assert (sample.sampled_from is not None) == (rows > 150)
    parameters = {**default_parameters(), "budget": 2, "time_budget": 60}
    methods.run_method("segor", sample, parameters, 1)
    assert caps == [cap]


def test_a_trial_s_limit_is_the_smallest_of_its_time_limit_share_and_time_left():
    clock = FakeClock()
    budget = TimeBudget(30.0, clock=clock, trial_share=0.1)
    budget.start()
    assert budget.trial_cap == pytest.approx(3.0)
    share = "exceeded its share of the time budget (0.1 x 30 s = 3 s)"
    assert trial_limit(None, budget) == (pytest.approx(3.0), share, False)
    assert trial_limit(2.0, budget) == (2.0, "exceeded the time limit of 2 s", False)
    assert trial_limit(3.0, budget).cut_by == "exceeded the time limit of 3 s"  # a tie
    clock.now += 28.5  # 1.5 s left: the end of the budget comes first
    limit, cut_by, budget_end = trial_limit(None, budget)
    assert limit == pytest.approx(1.5) and "end of the time budget of 30 s" in cut_by
    assert budget_end
    # the first trial carries no deadline, so no share caps it
    assert trial_limit(None, deadline_for(budget, first=True)) == (None, "", False)
    assert TimeBudget(None, trial_share=0.1).trial_cap is None  # no budget: no cap


def test_the_first_evaluation_is_not_cut_by_a_spent_budget():
    # A worker start-up that outlasts a short budget still leaves one model.
    clock = FakeClock()
    budget = TimeBudget(1.0, clock=clock)
    budget.start()
    clock.now += 5.0
    features = np.arange(2.0 * len(Y)).reshape(-1, 2)
    evaluate = cross_validation_evaluator("decision_tree_regressor", features, Y, FOLDS)
    # the search's first request (and a multi-fidelity search's first
    # bracket's) carries no deadline: no limit, it runs in process
    first = deadline_for(budget, first=True)
    assert first is None and trial_limit(None, first) == (None, "", False)
    assert evaluate(request({"max_depth": 2}, deadline=first)).ok
    later = deadline_for(budget, first=False)
    assert later is budget
    limit, cut_by, _ = trial_limit(None, later)  # the next one would be cut at once
    assert limit == 1e-3 and "end of the time budget of 1 s" in cut_by
    # without a time budget there is nothing to cut by
    unlimited = TimeBudget(None, clock=clock)
    assert deadline_for(unlimited, first=False) is None
