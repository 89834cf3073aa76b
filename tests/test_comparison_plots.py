import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from ensemble_bo.comparison_plots import (
    critical_difference_diagram,
    nonsignificant_groups,
)

RANKS = pd.Series({"BO-best": 3.6, "BO-post": 2.9, "EO": 1.6, "EO-post": 1.9})


def test_groups_join_methods_closer_than_the_cd():
    ranks = pd.Series({"A": 1.0, "B": 1.5, "C": 2.8, "D": 3.0})
    # CD 1: A-B (0.5) and C-D (0.2) join; B-C (1.3) does not
    assert nonsignificant_groups(ranks, 1.0) == [["A", "B"], ["C", "D"]]
    # CD 2: A..C span 1.8 < 2, A..D span 2.0 is not < 2; B..D span 1.5
    assert nonsignificant_groups(ranks, 2.0) == [["A", "B", "C"], ["B", "C", "D"]]
    # CD 0.1: nobody joins
    assert nonsignificant_groups(ranks, 0.1) == []


def test_diagram_names_every_method_and_saves(tmp_path):
    figure = critical_difference_diagram(RANKS, 1.1055, title="SVM space")
    assert isinstance(figure, Figure)
    axes = figure.axes[0]
    texts = {text.get_text(): text for text in axes.texts}
    assert [text.get_text() for text in axes.texts].count("EO") == 1
    assert axes.get_title() == "SVM space"
    # the rank axis 1..4 (k methods), ticks labelled
    assert {"1", "2", "3", "4"} <= set(texts)
    # the better half named left of the axis, the worse half right of it
    for name in ("EO", "EO-post"):
        assert texts[name].get_ha() == "right" and texts[name].get_position()[0] < 1
    for name in ("BO-post", "BO-best"):
        assert texts[name].get_ha() == "left" and texts[name].get_position()[0] > 4
    # each name's connector drops from its rank on the axis to its label's row
    connectors = [line for line in axes.lines if line.get_color() == "gray"]
    for name, rank in RANKS.items():
        x, y = texts[name].get_position()
        (line,) = [
            c
            for c in connectors
            if c.get_ydata()[2] == y and abs(c.get_xdata()[2] - x) < 0.1
        ]
        assert list(line.get_xdata()[:2]) == [rank, rank] and line.get_ydata()[0] == 0
    # the CD bar: from rank 1 over the critical difference, labelled
    assert "CD = 1.11" in texts
    cd_bar = [
        line
        for line in axes.lines
        if list(line.get_ydata()) == [0.6, 0.6] and line.get_color() == "black"
    ]
    assert len(cd_bar) == 1
    np.testing.assert_allclose(cd_bar[0].get_xdata(), [1.0, 1.0 + 1.1055])
    # sorted 1.6, 1.9, 2.9, 3.6: EO-EO-post 0.3, EO-post-BO-post 1.0 and
    # BO-post-BO-best 0.7 are < CD; EO-BO-post 1.3 and EO-post-BO-best 1.7 are not
    groups = [["EO", "EO-post"], ["EO-post", "BO-post"], ["BO-post", "BO-best"]]
    assert nonsignificant_groups(RANKS, 1.1055) == groups
    bars = [line for line in axes.lines if line.get_linewidth() == 3]
    spans = sorted(tuple(np.round(bar.get_xdata(), 6)) for bar in bars)
    assert spans == sorted(
        (round(RANKS[a] - 0.03, 6), round(RANKS[b] + 0.03, 6)) for a, b in groups
    )
    path = tmp_path / "cd.png"
    figure.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("ranks", "cd", "message"),
    [
        (pd.Series({"A": 1.0}), 1.0, "at least 2 methods"),
        (pd.Series({"A": 1.0, "B": float("nan")}), 1.0, "rank of 'B'"),
        (RANKS, 0.0, "critical_difference must be a finite number > 0, got 0.0"),
        ([1.0, 2.0], 1.0, "must be a pandas Series"),
    ],
)
def test_bad_inputs_raise(ranks, cd, message):
    with pytest.raises(ValueError, match=message):
        critical_difference_diagram(ranks, cd)
