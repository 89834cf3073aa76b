"""The search's progress bar: trials, or the seconds of a time budget."""

import re
from dataclasses import replace

from ensemble_bo.core.results import IterationRecord
from ensemble_bo.pipelines.progress import progress_bar


def record(iteration):
    return IterationRecord(
        iteration, 0, iteration, "ok", "replace", 0.5, 0.6, 3, 0.0, 0.1
    )


def test_the_bar_counts_trials_against_the_budget(capsys):
    with progress_bar(4, "SEGOR on concrete") as on_iteration:
        for iteration in range(4):
            on_iteration(record(iteration))
    output = capsys.readouterr().err
    assert "SEGOR on concrete: 100%" in output and "4/4" in output
    assert "trials=" not in output


def test_with_a_time_budget_the_bar_counts_its_seconds_and_names_the_trials(capsys):
    with progress_bar(10_000, "SEGOR on concrete", time_budget=60) as on_iteration:
        for iteration in range(3):
            on_iteration(record(iteration))
    output = capsys.readouterr().err
    assert "trials=3" in output
    # seconds of the 60 (not 3 of 10000 trials)
    assert re.search(r"\d+(\.\d+)?/60", output) and "/10000" not in output


def test_a_multi_fidelity_bar_counts_the_full_fidelity_equivalents_spent(capsys):
    with progress_bar(6, "SEGOR on concrete", multi_fidelity=True) as on_iteration:
        for iteration, spent in enumerate([1.8, 3.6, 6.6]):
            on_iteration(replace(record(iteration), fidelity_spent=spent))
    output = capsys.readouterr().err
    # 6.6 of 6 (the last bracket's rungs may pass it): the bar is full
    assert "100%" in output and "6.0/6 [" in output and "equiv/s" in output
