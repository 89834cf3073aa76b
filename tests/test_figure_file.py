"""A report figure is rendered once for its file and its MLflow artifact."""

from pathlib import Path

import mlflow
import pytest
from kedro.io.core import Version
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from mlflow.tracking import MlflowClient

from ensemble_bo.datasets.figure_file import FigureDataset
from ensemble_bo.reporting import FIGURE
from ensemble_bo.tracking.artifacts import log_output
from tests.support import run_in_new_store


class CountedFigure(Figure):
    """A figure that counts its renderings."""

    renders = 0

    def savefig(self, *args, **kwargs):
        self.renders += 1
        return super().savefig(*args, **kwargs)


def counted_figure() -> CountedFigure:
    figure = CountedFigure(figsize=(3, 2))
    FigureCanvasAgg(figure)
    figure.add_subplot().plot([0, 1, 2], [1, 3, 2])
    return figure


@pytest.fixture
def run(tmp_path):
    with run_in_new_store(tmp_path, "figures") as active:
        yield MlflowClient(mlflow.get_tracking_uri()), active.info.run_id


def test_a_figure_logged_and_filed_is_rendered_once_and_both_are_the_same_png(
    run, tmp_path
):
    client, run_id = run
    figure = counted_figure()
    log_output("segor_convergence_plot", figure, {"as": FIGURE})
    dataset = FigureDataset(
        filepath=str(tmp_path / "plot.png"), version=Version(None, None)
    )
    dataset.save(figure)
    assert figure.renders == 1
    logged = Path(
        client.download_artifacts(run_id, "plots/segor_convergence_plot.png")
    ).read_bytes()
    (filed,) = (tmp_path / "plot.png").rglob("plot.png")  # versioned: plot.png/<v>/
    assert filed.read_bytes() == logged
    assert logged.startswith(b"\x89PNG")


def test_a_dict_of_figures_is_filed_one_file_each(tmp_path):
    figures = {"a.png": counted_figure(), "b.png": counted_figure()}
    FigureDataset(filepath=str(tmp_path / "plots")).save(figures)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["a.png", "b.png"]
    assert [f.renders for f in figures.values()] == [1, 1]


def test_a_figure_filed_with_its_own_save_args_is_rendered_with_them(tmp_path):
    figure = counted_figure()
    FigureDataset(filepath=str(tmp_path / "default.png")).save(figure)
    FigureDataset(filepath=str(tmp_path / "small.png"), save_args={"dpi": 20}).save(
        figure
    )
    assert figure.renders == 2
    default = (tmp_path / "default.png").stat().st_size
    assert (tmp_path / "small.png").stat().st_size < default
