import numpy as np
import pytest

from ensemble_bo.core.pool import Pool, TrialResult
from ensemble_bo.core.strategies import EnsembleSearchResult
from ensemble_bo.reporting import diversity_heatmap, ensemble_diversity


def result_with(predictions, members):
    pool = Pool(predictions.shape[1])
    for row in predictions:
        pool.add({}, np.zeros(1), TrialResult(row, 0.0))
    return EnsembleSearchResult(pool, members, np.zeros(len(predictions)))


def test_diversity_counts_each_distinct_member_once():
    rng = np.random.default_rng(0)
    base = rng.normal(size=200)
    other = 0.6 * base + 0.8 * rng.normal(size=200)
    result = result_with(np.vstack([base, other]), members=[0, 0, 1])
    rho = np.corrcoef(base, other)[0, 1]
    # two distinct members: one pair, divided by 2^2 (SEGOR eq. 8-9)
    expected = -0.5 * np.log(1 - rho**2) / 4
    assert ensemble_diversity(result)["ensemble_mutual_information"] == pytest.approx(
        expected
    )
    figure = diversity_heatmap(result, "toy")
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == [
        "trial 0",
        "trial 1",
    ]


def test_a_single_member_has_zero_mutual_information_and_still_plots():
    result = result_with(np.random.default_rng(1).normal(size=(1, 50)), members=[0, 0])
    assert ensemble_diversity(result)["ensemble_mutual_information"] == 0.0
    assert diversity_heatmap(result, "one member").axes
