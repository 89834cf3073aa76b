"""Parallel trials (core.runners, core.dask_runner): the search loop's sync and async modes on a
scripted runner, the local and Dask runners on real processes, and resume."""

from __future__ import annotations

import heapq
import importlib
import os
import time

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.core.dask_runner import DaskRunner, dask_client
from ensemble_bo.core.journal import ReplayingRunner, TrialJournal
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.optimizer import GPEIOptimizer
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import SearchInterrupted
from ensemble_bo.core.runners import trial_runner
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.time_budget import TimeBudget
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.core.test_esmbo_and_presets import TABLE, esmbo, hand_tuned_rho
from tests.core.test_evaluation import _probe_factory
from tests.core.test_journal import stop_after
from tests.core.test_strategies import FOLDS, SPACE, Y, synthetic_evaluator
from tests.core.test_time_budget import FakeClock
from tests.support import (
    cheap_parameters,
    cross_validation_evaluator,
    esmbo_search,
    from_config,
    request,
    segor_search,
)

# --- the parallel block -----------------------------------------------------


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"backend": "spark"}, "parallel.backend='spark' is not one of"),
        ({"mode": "eager"}, "parallel.mode='eager' is not one of"),
        (
            {"n_workers": 0},
            "parallel.n_workers must be a positive integer or null, got 0",
        ),
        ({"n_workers": 2.5}, "got 2.5"),
        ({"n_workers": True}, "got True"),
        ({"n_workers": None}, "parallel.n_workers=null needs backend: dask"),
        ({"address": "tcp://10.0.0.5:8786"}, "needs backend: dask"),
        ({"backend": "dask", "address": 8786}, "parallel.address=8786 needs"),
        ({"workers": 2}, r"parallel has unknown keys \['workers'\]"),
        ("dask", "parallel must be a mapping, got 'dask'"),
    ],
)
def test_a_bad_parallel_block_is_refused_naming_the_value(block, message):
    settings = {**cheap_parameters(), "parallel": block}
    with pytest.raises(InvalidInput, match=message):
        check_settings("segor", settings)


def test_the_default_block_is_serial_and_a_dask_block_needs_no_worker_count():
    assert ParallelSettings.from_block(cheap_parameters()["parallel"]).serial
    assert ParallelSettings.from_block(None).serial
    cluster = ParallelSettings.from_block(
        {"backend": "dask", "n_workers": None, "address": "tcp://h:8786"}
    )
    assert not cluster.serial and cluster.mode == "sync"


# --- the loop, on a scripted runner -----------------------------------------


class ScriptedRunner:
    """Trains in the test's process on a simulated clock: trial t takes
    `durations[t % len(durations)]` seconds from its submission, and
    `next_finished` returns the running trial that ends first."""

    def __init__(self, n_workers, durations=(1.0,), evaluate=synthetic_evaluator):
        self.n_workers = n_workers
        self.durations = durations
        self.evaluate = from_config(evaluate)
        self.now = 0.0
        self.running: list[tuple[float, int, dict]] = []
        self.submitted: list[tuple[int, dict]] = []
        self.finished: list[int] = []
        self.most_running = 0

    def submit(self, request):
        assert request.scope == (None, 1.0)  # scripted trials are whole evaluations
        duration = self.durations[len(self.submitted) % len(self.durations)]
        ticket = request.ticket
        heapq.heappush(self.running, (self.now + duration, ticket, request))
        self.submitted.append((ticket, dict(request.config)))
        self.most_running = max(self.most_running, len(self.running))

    def next_finished(self):
        self.now, ticket, request = heapq.heappop(self.running)
        self.finished.append(ticket)
        return ticket, self.evaluate(request)

    def recorded_trials(self):
        return []


class AskRecorder(GPEIOptimizer):
    """Keeps how many told and pending points each proposal was asked with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending_sizes = []
        self.told_sizes = []

    def ask(self, pending=()):
        self.pending_sizes.append(len(pending))
        self.told_sizes.append(len(self.X))
        return super().ask(pending)


def segor(n_initial=4, seed=3, size=4):
    optimizer = AskRecorder(
        SPACE, seed=seed, n_initial=n_initial, gp_restarts=1, n_candidates=256
    )
    return segor_search(optimizer, synthetic_evaluator, Y, FOLDS, ensemble_size=size)


def test_sync_mode_proposes_trial_t_from_the_trials_before_t_minus_n_workers():
    search = segor()
    runner = ScriptedRunner(3, durations=(3.0, 1.0, 2.0))
    result = search.run(10, runner=runner, mode="sync")
    assert len(result.pool) == 10 and runner.most_running == 3
    # trial t was asked with trials 0..t-4 told and t-3..t-1 as fantasies,
    # whichever of those had ended
    assert search.optimizer.told_sizes == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]
    assert search.optimizer.pending_sizes == [0, 1, 2, 3, 3, 3, 3, 3, 3, 3]
    # whatever order they end in, trial t is the t-th proposal
    assert runner.finished[:3] == [1, 2, 0]
    assert result.pool.configs == [config for _, config in runner.submitted]
    assert [record.iteration for record in result.history] == list(range(10))
    # a proposal after the initial design is none of its fantasies
    encoded = np.array(result.pool.encoded)
    for t in range(4, 10):
        assert (
            min(np.linalg.norm(encoded[t] - encoded[t - k]) for k in (1, 2, 3)) > 1e-6
        )


def test_sync_mode_gives_a_free_worker_the_next_trial_without_waiting_for_the_slowest():
    # Trials of 4 s and 1 s alternate on 2 workers. Batches of 2, each waited
    # for, would end 10 trials at 5 x 4 = 20 s. Trial t waits only for trial
    # t-3 to end and a worker to be free: by hand, 2 starts at 1 s, 3 at 4 s,
    # 4 and 5 at 5 s, 6 at 6 s, 7 at 9 s, 8 and 9 at 10 s, 8 ends at 14 s.
    runner = ScriptedRunner(2, durations=(4.0, 1.0))
    segor().run(10, runner=runner, mode="sync")
    assert runner.now == pytest.approx(14.0)
    assert runner.most_running == 2


@pytest.mark.parametrize(("mode", "fits"), [("sync", 5), ("async", 6)])
def test_the_gp_hyperparameters_are_fitted_once_per_new_result(mode, fits):
    # budget 10, design 4: 6 model-based proposals, each after a result ended;
    # sync's first (trial 4, 3 workers) sees only trial 0 ended, too few to fit
    search = segor()
    model = search.optimizer._model
    calls = []
    fit = model.fit
    model.fit = lambda X, y: calls.append(len(X)) or fit(X, y)
    search.run(10, runner=ScriptedRunner(3, (1.0, 2.0, 1.5)), mode=mode)
    assert len(calls) == fits


def test_sync_mode_gives_the_same_ensemble_twice_whatever_the_completion_order():
    first = segor().run(12, runner=ScriptedRunner(3, (1.0, 2.0, 3.0)), mode="sync")
    second = segor().run(12, runner=ScriptedRunner(3, (3.0, 1.0, 1.5)), mode="sync")
    assert first.pool.configs == second.pool.configs
    assert first.members == second.members
    assert [r.ensemble_loss for r in first.history] == [
        r.ensemble_loss for r in second.history
    ]


def test_async_mode_keeps_every_worker_busy_and_takes_trials_as_they_end():
    search = segor()
    runner = ScriptedRunner(3, durations=(5.0, 1.0, 1.0, 1.0))
    result = search.run(11, runner=runner, mode="async")
    assert len(result.pool) == 11 and runner.most_running == 3
    # trial t of the pool is the t-th to end, not the t-th proposed
    order = {ticket: config for ticket, config in runner.submitted}
    assert result.pool.configs == [order[ticket] for ticket in runner.finished]
    assert runner.finished != sorted(runner.finished)
    # after the first 3, each proposal is asked with the 2 still running
    assert search.optimizer.pending_sizes[:3] == [0, 1, 2]
    assert set(search.optimizer.pending_sizes[3:]) == {2}
    # the ensemble is SEGOR's over the pool it got, as in a serial run
    assert len(result.members) == 4 and np.isfinite(result.history[-1].ensemble_loss)


def test_a_failed_trial_in_a_batch_is_recorded_and_the_search_goes_on():
    search = segor()
    result = search.run(14, runner=ScriptedRunner(4), mode="async")
    failed = [config["a"] > 0.85 for config in result.pool.configs]
    assert list(~result.pool.ok) == failed and any(failed)
    statuses = [record.status for record in result.history]
    assert statuses == ["failed" if f else "ok" for f in failed]


def test_esmbo_proposes_for_consecutive_replicas_on_their_own_targets():
    optimizer = GPEIOptimizer(SPACE, seed=0, n_initial=3, gp_restarts=1)
    search = esmbo_search(
        optimizer, synthetic_evaluator, Y, FOLDS, n_replicas=4, seed=0
    )
    begun, told, asked = [], [], []
    begin, retarget, ask = search.strategy.begin, optimizer.retarget, optimizer.ask
    search.strategy.begin = lambda i, pool: begun.append(i) or begin(i, pool)
    optimizer.retarget = lambda values: told.append(np.array(values)) or retarget(
        values
    )
    optimizer.ask = lambda pending=(): asked.append((begun[-1], told[-1])) or ask(
        pending
    )
    result = search.run(12, runner=ScriptedRunner(4), mode="sync")
    # one worker per replica: iteration i works for replica i mod 4 ...
    assert [record.slot for record in result.history] == [0, 1, 2, 3] * 3
    # ... and was asked on that replica's targets: the last four, asked with
    # trials 0..3 told at least, see those four models differently
    assert [iteration for iteration, _ in asked] == list(range(12))
    first_models = [targets[:4].tobytes() for _, targets in asked[8:]]
    assert len(set(first_models)) == 4


def test_esmbo_tunes_auto_rho_on_its_first_trials_however_many_are_running():
    # Iteration 6 is proposed while only 2 trials have been taken; rho waits for 6.
    search = esmbo("auto", rho_tuned_at=6, n_posterior_samples=200)
    runner = ScriptedRunner(4, evaluate=search.evaluate)  # ends in proposal order
    search.run(15, runner=runner, mode="sync", max_initial_failures=None)
    first = [TABLE[h] for h in range(6) if TABLE[h] is not None]
    expected = hand_tuned_rho(first, 200, seed=7)
    assert search.strategy.rho == pytest.approx(expected.value, rel=1e-12)


def test_a_stopped_search_keeps_its_pool_in_either_mode():
    for mode in ("sync", "async"):
        with pytest.raises(SearchInterrupted) as stopped:
            segor().run(12, [stop_after(5)], runner=ScriptedRunner(3), mode=mode)
        assert len(stopped.value.result.pool) == 6


# --- resume ------------------------------------------------------------------


def journaled_run(journal, budget, mode, runner, callbacks=()):
    replay = "completions" if mode == "async" else "proposals"
    replaying = ReplayingRunner(runner, journal, replay=replay)
    return segor().run(budget, list(callbacks), runner=replaying, mode=mode), replaying


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stopped_parallel_search_resumes_without_retraining(tmp_path, mode):
    journal = TrialJournal(tmp_path / mode)
    durations = (2.0, 1.0, 1.5)

    with pytest.raises(SearchInterrupted):
        journaled_run(journal, 12, mode, ScriptedRunner(3, durations), [stop_after(7)])
    recorded = journal.recorded()
    # the trials that had ended, and (sync) those of the batch that ended later
    assert len(journal.entries()) >= 8

    runner = ScriptedRunner(3, durations)
    resumed, replaying = journaled_run(journal, 12, mode, runner)
    assert replaying.reused == len(recorded) and replaying.trained == 12 - len(recorded)
    assert len(runner.submitted) == replaying.trained  # nothing trained twice
    assert len(resumed.pool) == 12 and len(journal.entries()) == 12
    if mode == "sync":  # the seed decides every proposal: the uninterrupted result
        uninterrupted = segor().run(12, runner=ScriptedRunner(3), mode="sync")
        assert resumed.pool.configs == uninterrupted.pool.configs
        assert resumed.members == uninterrupted.members
    else:  # the recorded trials come first, in the order they ended
        assert resumed.pool.configs[: len(recorded)] == [
            recorded[i].request.config for i in range(len(recorded))
        ]
        # and the optimizer's initial design went on past them: the new
        # proposals are none of them
        taken_back = [entry.request.config for entry in recorded.values()]
        assert not [config for _, config in runner.submitted if config in taken_back]


def test_a_sync_journal_with_a_gap_replays_the_trials_after_it(tmp_path):
    journal = TrialJournal(tmp_path / "gap")
    journaled_run(journal, 9, "sync", ScriptedRunner(3))
    # a kill mid-batch: trial 7 was still training, 6 and 8 had ended
    (tmp_path / "gap" / "trial_7.pkl").unlink()
    runner = ScriptedRunner(3)
    resumed, replaying = journaled_run(journal, 9, "sync", runner)
    assert (replaying.reused, replaying.trained) == (8, 1)
    assert [ticket for ticket, _ in runner.submitted] == [7]
    assert len(resumed.pool) == 9


def test_a_trial_that_never_ran_is_trained_on_resume_not_failed_again(tmp_path):
    journal = TrialJournal(tmp_path / "never ran")
    calls = []

    def worker_down_from_the_third_batch(config):
        calls.append(config)
        if len(calls) > 6:
            return TrialResult(
                None, 0.0, "BrokenProcessPool: could not start", None, True
            )
        return synthetic_evaluator(config)

    runner = ScriptedRunner(3, evaluate=worker_down_from_the_third_batch)
    first, _ = journaled_run(journal, 9, "sync", runner)
    assert not first.pool.ok[6:].any()
    assert sorted(journal.recorded()) == list(range(6))

    runner = ScriptedRunner(3)
    resumed, replaying = journaled_run(journal, 9, "sync", runner)
    assert [ticket for ticket, _ in runner.submitted] == [6, 7, 8]
    assert resumed.pool.configs == first.pool.configs
    expected = [synthetic_evaluator(config).ok for config in first.pool.configs]
    assert list(resumed.pool.ok) == expected and any(expected[6:])
    assert (replaying.reused, replaying.trained) == (6, 3)


def test_replayed_trials_are_charged_the_wall_time_they_took_side_by_side(tmp_path):
    journal = TrialJournal(tmp_path / "charged")
    for index in range(6):
        journal.record(
            index, request({"a": index}, ticket=index), TrialResult(np.zeros(3), 3.0)
        )
    clock = TimeBudget(100.0, clock=FakeClock())
    clock.start()
    replaying = ReplayingRunner(ScriptedRunner(3), journal, clock)
    for ticket in range(6):
        replaying.submit(request({"a": ticket}, ticket=ticket))
        replaying.next_finished()
    # 6 trials of 3 s on 3 workers: 6 s of wall time, not 18
    assert clock.elapsed == pytest.approx(6.0)


# --- real processes -----------------------------------------------------------

RNG = np.random.default_rng(4)
X = RNG.normal(size=(60, 3))
DATA = ModelInput(
    X,
    X @ np.array([1.0, -0.5, 0.2]) + 0.1 * RNG.normal(size=60),
    np.arange(60) % 5,
    "regression",
    {},
    {},
)


def parallel_settings(parallel, budget=8):
    parameters = cheap_parameters()
    parameters["segor"] = {
        **parameters["segor"],
        "optimizer": {**parameters["segor"]["optimizer"], "n_initial": 3},
    }
    # three slots, shipped as they are (a bagged weighting would choose again)
    parameters["ensemble"] = {
        **parameters["ensemble"],
        "size": 3,
        "weighting": "counts",
    }
    return {**parameters, "budget": budget, "parallel": parallel}


@pytest.fixture(scope="module")
def local_cluster():
    """A LocalCluster of 2 worker processes (with nannies), as `dask` starts one.

    Its scheduler gives a task up at the first worker that dies running it
    (Dask's default retries it on 3 more), so that the test of a fit that
    kills its worker costs one restart, not four.
    """
    import dask  # noqa: PLC0415
    import distributed  # noqa: F401, PLC0415 - its defaults in dask's config first:
    # leaving `set` would otherwise drop the whole `distributed` section

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        dask_client(ParallelSettings("dask", 2)) as client,
    ):
        client.wait_for_workers(2, timeout=120)
        yield client


def outcome(result):
    return (
        result.pool.configs,
        result.members,
        [record.ensemble_loss for record in result.history],
    )


def test_sync_mode_on_local_workers_and_on_dask_gives_one_ensemble(
    local_cluster, monkeypatch
):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", local_cluster.scheduler.address)
    local = {"backend": "local", "n_workers": 2, "mode": "sync"}
    dask = {"backend": "dask", "n_workers": 2, "mode": "sync"}
    first = run_method("segor", DATA, parallel_settings(local), 5)
    second = run_method("segor", DATA, parallel_settings(local), 5)
    on_dask = run_method("segor", DATA, parallel_settings(dask), 5)
    assert outcome(first) == outcome(second) == outcome(on_dask)
    assert len(first.pool) == 8 and first.pool.ok.all()


def test_async_mode_on_dask_trains_the_budget(local_cluster, monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", local_cluster.scheduler.address)
    block = {"backend": "dask", "n_workers": 2, "mode": "async"}
    result = run_method("segor", DATA, parallel_settings(block), 5)
    assert len(result.pool) == 8 and result.pool.ok.all()
    assert len(result.members) == 3


def probe_evaluator(time_limit=None):
    return cross_validation_evaluator(
        "decision_tree_regressor",
        DATA.features,
        DATA.target,
        DATA.fold_ids,
        random_state=0,
        time_limit=time_limit,
        model_factory=_probe_factory,
    )


def test_a_dask_trial_past_its_limit_fails_and_its_worker_is_replaced(local_cluster):
    runner = DaskRunner(local_cluster, probe_evaluator(time_limit=2.0), 2)
    workers_before = set(local_cluster.scheduler_info()["workers"])
    start = time.monotonic()
    runner.submit(request({"probe": "sleep", "seconds": 60.0}, ticket=0))
    ticket, result = runner.next_finished()
    assert ticket == 0 and not result.ok
    assert result.error == "TimeoutError: fit exceeded the time limit of 2 s"
    assert time.monotonic() - start < 30
    # the cluster recovers: the worker that ran it was restarted, the next trial trains
    runner.submit(request({"max_depth": 2}, ticket=1))
    ticket, result = runner.next_finished()
    assert ticket == 1 and result.ok, result.error
    local_cluster.wait_for_workers(2, timeout=60)
    assert set(local_cluster.scheduler_info()["workers"]) != workers_before
    runner.close()


def test_a_dask_trial_cut_at_the_budget_s_end_spends_the_budget(local_cluster):
    local_cluster.wait_for_workers(2, timeout=120)
    # 2 s for the trial, 6 s kept for its own final fit; the runner gives a
    # trial DASK_TRANSFER_SLACK (2 s) more before it cuts it
    budget = TimeBudget(8.0, final_fit_factor=3.0)
    budget.start()
    runner = DaskRunner(local_cluster, probe_evaluator(time_limit=30.0), 1)
    runner.submit(request({"probe": "sleep", "seconds": 60.0}, deadline=budget))
    _, result = runner.next_finished()
    runner.close()
    assert result.error.startswith("TimeoutError: fit was cut at the end of the")
    assert budget.remaining() > 0 and budget.spent()
    local_cluster.wait_for_workers(2, timeout=120)  # its worker restarted


def test_a_dask_trial_whose_worker_dies_is_a_failed_trial_not_a_crash(local_cluster):
    # The fit kills its worker (each time Dask retries it, until its
    # allowed-failures are spent): KilledWorker; the other trial and the
    # cluster live on.
    runner = DaskRunner(local_cluster, probe_evaluator(), 2)
    runner.submit(request({"probe": "exit"}, ticket=0))
    runner.submit(request({"max_depth": 3}, ticket=1))
    results = dict(runner.next_finished() for _ in range(2))
    assert not results[0].ok and "KilledWorker" in results[0].error
    assert results[1].ok, results[1].error
    local_cluster.wait_for_workers(2, timeout=60)


def test_a_cell_search_inside_a_dask_worker_keeps_its_time_limit(local_cluster):
    # Benchmark cells run serial searches on Dask workers; the LocalCluster's
    # workers are not daemonic, so a time limit's worker process can start.
    def evaluate_with_limit():
        evaluator = probe_evaluator(time_limit=30.0)
        try:
            return os.getpid(), evaluator(request({"probe": "pid"}))
        finally:
            evaluator.close()

    pid, result = local_cluster.submit(evaluate_with_limit, pure=False).result()
    assert result.ok, result.error
    assert int(result.oof_predictions[0]) != pid  # trained in its own process


def _alive(pid, wait=5.0):
    """Whether process `pid` still runs after up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True


def test_trial_runner_closes_the_local_workers_it_started():
    evaluator = probe_evaluator()
    with trial_runner(ParallelSettings("local", 2), evaluator) as runner:
        runner.submit(request({"probe": "pid"}, ticket=0))
        runner.submit(request({"probe": "pid"}, ticket=1))
        results = dict(runner.next_finished() for _ in range(2))
        pids = {int(result.oof_predictions[0]) for result in results.values()}
    assert len(pids) == 2 and os.getpid() not in pids
    for pid in pids:  # the worker processes are gone
        assert not _alive(pid), pid


def test_closing_local_workers_kills_a_fit_still_running():
    evaluator = probe_evaluator()
    with trial_runner(ParallelSettings("local", 2), evaluator) as runner:
        runner.submit(request({"probe": "pid"}, ticket=0))
        ((_, started),) = [runner.next_finished()]
        runner.submit(request({"probe": "sleep", "seconds": 120.0}, ticket=1))
        time.sleep(0.5)
        start = time.monotonic()
    assert time.monotonic() - start < 30  # not the fit's 120 s (x 5 folds)
    worker = int(started.oof_predictions[0])
    assert not _alive(worker)


def test_dask_trials_queued_behind_busy_workers_get_their_whole_time_limit(
    local_cluster,
):
    # 6 trials of 3 s (0.6 s a fold) on 2 worker threads, each limited to 5 s:
    # the last two wait 6 s for a thread, which their limit does not count.
    local_cluster.wait_for_workers(2, timeout=120)
    # a restarted worker's first task imports the model's module: not here
    local_cluster.run(importlib.import_module, "tests.core.test_evaluation")
    runner = DaskRunner(local_cluster, probe_evaluator(time_limit=5.0), 6)
    for ticket in range(6):
        runner.submit(request({"probe": "sleep", "seconds": 0.6}, ticket=ticket))
    results = dict(runner.next_finished() for _ in range(6))
    assert all(result.ok for result in results.values()), results
    runner.close()


def test_dask_trials_sent_once_the_time_budget_is_spent_are_cut_unsent(local_cluster):
    local_cluster.wait_for_workers(2, timeout=120)
    evaluator = probe_evaluator(time_limit=30.0)
    clock = FakeClock()
    budget = TimeBudget(1.0, clock=clock)
    budget.start()
    runner = DaskRunner(local_cluster, evaluator, 3)
    clock.now += 5.0  # spent before the first is sent: the first is never cut
    for ticket in range(3):
        deadline = None if ticket == 0 else budget  # the search's first: none
        runner.submit(
            request(
                {"probe": "sleep", "seconds": 0.01}, ticket=ticket, deadline=deadline
            )
        )
    results = dict(runner.next_finished() for _ in range(3))
    runner.close()
    assert results[0].ok
    for ticket in (1, 2):  # never sent: no worker ran, none was ended for them
        assert results[ticket].fit_seconds == 0.0
        assert results[ticket].error == (
            "TimeoutError: fit was cut at the end of the time budget of 1 s"
        )
    assert len(local_cluster.scheduler_info()["workers"]) == 2


def _end_the_worker(cell, *args):
    os._exit(1)


def test_a_benchmark_cell_whose_worker_dies_is_a_failed_cell(local_cluster, tmp_path):
    from ensemble_bo.benchmarking.runner import run_cells  # noqa: PLC0415
    from ensemble_bo.core.grid import MethodCell  # noqa: PLC0415

    cell = MethodCell("a-cell", "d", "regression", "m", "smbo", 0, 0, 1, {})
    local_cluster.wait_for_workers(2, timeout=120)  # settled after the last test
    on_the_cluster = ParallelSettings(
        "dask", None, local_cluster.scheduler.address, "sync"
    )
    ((_, record),) = run_cells(
        [cell],
        _end_the_worker,
        frames={"d": pd.DataFrame({"x": [1.0]})},
        arguments=({}, tmp_path),
        cluster=on_the_cluster,
    )
    assert record["status"] == "failed" and "KilledWorker" in record["error"]
    assert record["key"] == "a-cell" and record["cv_loss_curve"] == []
    local_cluster.wait_for_workers(2, timeout=120)
