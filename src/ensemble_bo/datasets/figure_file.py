"""A figure as a PNG file, rendered once for the file and the MLflow run."""

from __future__ import annotations

from kedro_datasets.matplotlib import MatplotlibDataset
from matplotlib.figure import Figure

from ensemble_bo.reporting import png_bytes


class FigureDataset(MatplotlibDataset):
    """kedro-datasets' MatplotlibDataset (a figure, a list or a dict of them,
    versioned or not), writing the PNG the run's MLflow logging already
    rendered (reporting.png_bytes) instead of rendering it again."""

    def _save_to_fs(self, full_key_path: str, plot: Figure) -> None:
        if self._save_args:  # another format or resolution: its own rendering
            super()._save_to_fs(full_key_path, plot)
            return
        with self._fs.open(full_key_path, **self._fs_open_args_save) as file:
            file.write(png_bytes(plot))
