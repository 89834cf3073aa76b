import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.core.evaluation import seeded_order
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import EnsembleSearchResult, IterationRecord
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.reporting import (
    PLOTTED_ROWS,
    benchmark_report,
    convergence_plot,
    diversity_heatmap,
    rank_curves,
    uncertainty_plot,
)


def result_with(predictions, members, labels=None, history=()):
    pool = Pool(predictions.shape[1], labels=labels)
    for row in predictions:
        pool.add({}, np.zeros(1), TrialResult(row, 0.0))
    return EnsembleSearchResult(
        pool, members, np.zeros(len(predictions)), history=list(history)
    )


def heatmap_cells(figure):
    """The heatmap's values (NaN where masked), its tick labels and colour bar label."""
    axes, colorbar = figure.axes
    image = axes.images[0]
    values = np.ma.filled(np.ma.masked_invalid(image.get_array()).astype(float), np.nan)
    ticks = (
        [t.get_text() for t in axes.get_xticklabels()],
        [t.get_text() for t in axes.get_yticklabels()],
    )
    return axes, image, values, ticks, colorbar.get_ylabel()


def pairwise_mi(a, b):
    rho = np.corrcoef(a, b)[0, 1]
    return -0.5 * np.log(1 - rho**2)


# --- diversity ------------------------------------------------------------------------


def test_diversity_counts_each_distinct_member_once():
    rng = np.random.default_rng(0)
    base = rng.normal(size=200)
    other = 0.6 * base + 0.8 * rng.normal(size=200)
    result = result_with(np.vstack([base, other]), members=[0, 0, 1])
    # two distinct members: one pair, divided by 2^2 (SEGOR eq. 8-9)
    expected = pairwise_mi(base, other) / 4
    assert result.diversity()["ensemble_mutual_information"] == pytest.approx(expected)


def test_the_heatmap_shows_each_pair_s_mutual_information():
    rng = np.random.default_rng(0)
    base = rng.normal(size=300)
    near = 0.95 * base + 0.3 * rng.normal(size=300)
    far = 0.2 * base + rng.normal(size=300)
    predictions = np.vstack([far, base, rng.normal(size=300), near])
    # pool rows 1, 3, 0 are members (3 twice): one row/column per distinct member,
    # in pool order
    result = result_with(predictions, members=[3, 1, 3, 0])
    axes, image, values, ticks, bar = heatmap_cells(diversity_heatmap(result, "toy"))
    members = [0, 1, 3]
    assert ticks == ([f"trial {i}" for i in members],) * 2
    assert axes.get_title() == "toy"
    assert bar == "mutual information (nats)"
    assert values.shape == (3, 3) and np.isnan(np.diag(values)).all()
    for row, i in enumerate(members):
        for column, j in enumerate(members):
            if i != j:
                assert values[row, column] == pytest.approx(
                    pairwise_mi(predictions[i], predictions[j])
                ), (i, j)
    # log colours spanning the pairs: weakest pair at the bottom, strongest at the top
    off_diagonal = values[~np.eye(3, dtype=bool)]
    assert image.norm.vmin == pytest.approx(off_diagonal.min())
    assert image.norm.vmax == pytest.approx(off_diagonal.max())


def test_the_classification_heatmap_shows_disagreement():
    labels = np.array([0, 1, 1, 0, 2, 2, 1, 0])
    predictions = np.array(
        [
            [0, 1, 1, 0, 2, 2, 1, 0],
            [0, 1, 0, 0, 2, 1, 1, 0],  # differs from row 0 at 2 of 8 samples
            [1, 1, 0, 0, 2, 1, 1, 1],  # from row 0 at 4, from row 1 at 2
        ],
        dtype=float,
    )
    result = result_with(predictions, members=[0, 1, 2], labels=labels)
    axes, image, values, ticks, bar = heatmap_cells(diversity_heatmap(result, "cls"))
    expected = np.array([[np.nan, 2, 4], [2, np.nan, 2], [4, 2, np.nan]]) / 8
    np.testing.assert_allclose(values, expected)
    assert bar == "disagreement (share of samples)"
    assert (image.norm.vmin, image.norm.vmax) == (0.0, 1.0)
    assert ticks[0] == ["trial 0", "trial 1", "trial 2"]
    assert result.diversity()["ensemble_disagreement"] == pytest.approx(
        (2 + 4 + 2) / 8 / 3
    )


def test_a_single_member_has_zero_mutual_information_and_still_plots():
    result = result_with(np.random.default_rng(1).normal(size=(1, 50)), members=[0, 0])
    assert result.diversity()["ensemble_mutual_information"] == 0.0
    axes, _, values, ticks, _ = heatmap_cells(diversity_heatmap(result, "one member"))
    assert values.shape == (1, 1) and np.isnan(values).all()
    assert ticks == (["trial 0"], ["trial 0"])
    assert axes.get_title() == "one member"


# --- convergence ----------------------------------------------------------------------


def test_the_convergence_plot_draws_both_curves_per_iteration():
    history = [
        IterationRecord(i, 0, i, "ok", "replace", ensemble, single, 1, 0.0, 0.1)
        for i, (ensemble, single) in enumerate([(0.9, 0.9), (0.7, 0.8), (0.5, 0.8)])
    ]
    result = result_with(np.zeros((3, 4)), members=[0], history=history)
    axes = convergence_plot(result, "SEGOR on toy").axes[0]
    lines = {line.get_label(): line for line in axes.lines}
    assert set(lines) == {"ensemble", "best single model"}
    np.testing.assert_array_equal(lines["ensemble"].get_xdata(), [1, 2, 3])
    np.testing.assert_array_equal(lines["ensemble"].get_ydata(), [0.9, 0.7, 0.5])
    np.testing.assert_array_equal(
        lines["best single model"].get_ydata(), [0.9, 0.8, 0.8]
    )
    assert axes.get_title() == "SEGOR on toy"
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("iteration", "CV loss")


def test_importing_and_plotting_leave_the_backend_and_pyplot_alone():
    script = """
import io
import sys
import matplotlib
matplotlib.use("svg")
import numpy as np
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.reporting import benchmark_report, convergence_plot, diversity_heatmap
pool = Pool(20)
for row in np.random.default_rng(0).normal(size=(2, 20)):
    pool.add({}, np.zeros(1), TrialResult(row, 0.0))
result = EnsembleSearchResult(pool, [0, 1], np.zeros(2))
for figure in (convergence_plot(result, "c"), diversity_heatmap(result, "d")):
    figure.savefig(io.BytesIO(), format="png")
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert completed.stdout.split() == ["svg", "False"]


# --- the benchmark report -------------------------------------------------------------------


def record(dataset, method, repetition, loss, curve, model="space_a"):
    return {
        "key": f"{dataset}__{model}__{method}__r{repetition}",
        "dataset": dataset,
        "task": "regression",
        "model": model,
        "method": method,
        "repetition": repetition,
        "seed": repetition,
        "budget": len(curve),
        "test_loss": loss,
        "cv_loss": curve[-1],
        "cv_loss_curve": curve,
        "ensemble_size": 1,
        "ensemble_members_distinct": 1,
        "ensemble_mutual_information": 0.0,
        "trials_failed": 0,
        "wall_seconds": 1.0 + repetition,
    }


def test_rank_curves_average_the_per_iteration_ranks():
    records = [
        # dataset d1: A better at iterations 1-2, B at 3
        record("d1", "A", 0, 0.1, [1.0, 0.5, 0.5]),
        record("d1", "B", 0, 0.2, [2.0, 0.6, 0.4]),
        # dataset d2: tie at 1, B better after; A's curve is one short (padded)
        record("d2", "A", 0, 0.3, [1.0, 0.9]),
        record("d2", "B", 0, 0.1, [1.0, 0.2, 0.1]),
    ]
    curves = rank_curves(records)
    assert list(curves.columns) == ["A", "B"]
    assert list(curves.index) == [1, 2, 3]
    np.testing.assert_allclose(curves["A"], [(1 + 1.5) / 2, (1 + 2) / 2, (2 + 2) / 2])
    np.testing.assert_allclose(curves["A"] + curves["B"], 3.0)


def test_no_model_yet_ranks_last():
    curves = rank_curves(
        [record("d", "A", 0, 0.1, [None, 0.5]), record("d", "B", 0, 0.2, [0.9, 0.6])]
    )
    assert curves.loc[1, "A"] == 2.0 and curves.loc[2, "A"] == 1.0


def hand_records():
    losses = {  # dataset -> method -> losses of repetitions 0, 1
        "d1": {"A": (0.1, 0.3), "B": (0.2, 0.2), "C": (0.5, 0.5)},
        "d2": {"A": (0.4, 0.4), "B": (0.1, 0.1), "C": (0.6, 0.8)},
        "d3": {"A": (0.1, 0.1), "B": (0.3, 0.3), "C": (0.2, 0.2)},
    }
    return [
        record(dataset, method, repetition, loss, [1.0, loss])
        for dataset, methods in losses.items()
        for method, pair in methods.items()
        for repetition, loss in enumerate(pair)
    ]


def test_the_report_tables_from_hand_made_records():
    tables, reports, figures = benchmark_report(hand_records())
    losses = tables["space_a/test_loss"].set_index("dataset")
    assert losses.loc["d1", "A"] == pytest.approx(0.2)
    assert losses.loc["d2", "C"] == pytest.approx(0.7)
    comparison = tables["space_a/comparison"].set_index("method")
    # mean losses: d1 A 0.2 = B 0.2 < C; d2 B < A < C; d3 A < C < B
    assert comparison["E[rank]"].to_dict() == pytest.approx(
        {"A": (1.5 + 2 + 1) / 3, "B": (1.5 + 1 + 3) / 3, "C": (3 + 3 + 2) / 3}
    )
    assert list(comparison.index) == ["A", "B", "C"]  # sorted by expected rank
    assert comparison.loc["A", "C"] == pytest.approx(1.0)
    wilcoxon = tables["space_a/wilcoxon"].set_index("method")
    # A beats C on all 3 datasets: exact one-tailed p = 1/2^3
    assert wilcoxon.loc["A", "C"] == pytest.approx(0.125)
    assert list(wilcoxon.index) == ["A", "B", "C"]
    report = reports["space_a/report"]
    assert "Friedman chi-square" in report and "CD = " in report
    assert "| A | - |" in report
    assert set(figures) == {"space_a/critical_difference", "space_a/convergence"}
    curves = tables["space_a/convergence_mean_rank"].set_index("iteration")
    drawn = figures["space_a/convergence"].axes[0].lines
    assert [line.get_label() for line in drawn] == ["A", "B", "C"]
    for line in drawn:
        np.testing.assert_array_equal(line.get_xdata(), curves.index)
        np.testing.assert_array_equal(line.get_ydata(), curves[line.get_label()])
    cd_texts = [
        t.get_text() for t in figures["space_a/critical_difference"].axes[0].texts
    ]
    assert {"A", "B", "C"} <= set(cd_texts)
    assert list(tables["cells"]["key"]) == sorted(r["key"] for r in hand_records())
    assert "wall_seconds" not in tables["cells"]


def test_the_report_does_not_depend_on_record_order_or_wall_time():
    records = hand_records()
    shuffled = [dict(r, wall_seconds=99.0) for r in reversed(records)]
    first, second = benchmark_report(records), benchmark_report(shuffled)
    assert first[1] == second[1]
    for name in first[0]:
        assert first[0][name].to_csv() == second[0][name].to_csv()


def test_one_method_or_one_dataset_does_not_crash():
    one_method = [r for r in hand_records() if r["method"] == "A"]
    tables, reports, figures = benchmark_report(one_method)
    assert "Skipped: needs at least 2 methods" in reports["space_a/report"]
    assert "space_a/critical_difference" not in figures
    one_dataset = [r for r in hand_records() if r["dataset"] == "d1"]
    tables, reports, _ = benchmark_report(one_dataset)
    assert (
        "Friedman test skipped: needs at least 3 methods and 2 datasets"
        in (reports["space_a/report"])
    )
    assert "space_a/comparison" in tables


def test_each_model_space_gets_its_own_report():
    records = hand_records() + [
        dict(r, model="space_b", key=r["key"] + "b") for r in hand_records()
    ]
    _, reports, _ = benchmark_report(records)
    assert set(reports) == {"space_a/report", "space_b/report"}


class _CountingIntervals:
    """A model with intervals that records how many rows it was asked about."""

    def __init__(self):
        self.rows = []

    def predict(self, X):
        self.rows.append(len(X))
        return np.asarray(X)[:, 0]

    def predict_interval(self, X, coverage):
        center = self.predict(X)
        return np.column_stack([center - 1.0, center + 1.0])


def test_the_uncertainty_plot_shows_a_seeded_sample_of_a_large_test_split():
    n = PLOTTED_ROWS + 2_000
    rng = np.random.default_rng(0)
    features = pd.DataFrame({"x": rng.normal(size=n)})
    # every target 5 off its prediction but the rows of the sample, 0 off
    sample = np.sort(seeded_order(n, 0)[:PLOTTED_ROWS])
    target = features["x"] + 5.0
    target.iloc[sample] = features["x"].iloc[sample]
    model = _CountingIntervals()
    figure = uncertainty_plot(model, features, target, "regression", "Final")
    assert model.rows == [PLOTTED_ROWS, PLOTTED_ROWS]
    title = figure.axes[0].get_title()
    assert f"a sample of {PLOTTED_ROWS:,} of its {n:,} rows" in title
    assert "100.0% of test targets inside their 90% interval" in title
    # a small split is shown whole
    small = _CountingIntervals()
    figure = uncertainty_plot(small, features[:50], target[:50], "regression", "F")
    assert small.rows == [50, 50]
    assert "sample" not in figure.axes[0].get_title()
