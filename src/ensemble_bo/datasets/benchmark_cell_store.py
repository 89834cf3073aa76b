"""The catalog entry of the benchmark's cell store (ensemble_bo.benchmarking.store).

A killed benchmark loses only the cells that were running: a rerun with the same
parameters finds the finished ones in the store and skips them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from ensemble_bo.benchmarking.store import CellFolder


class BenchmarkCellStoreDataset(AbstractDataset[Mapping[str, Any], CellFolder]):
    """`load()` gives the `CellFolder` of finished cells under `path`.

    Saving a mapping {key: record} puts each record (the store is never
    emptied by a save: finished cells are what a rerun reuses).
    """

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._path = path
        self.metadata = metadata

    def load(self) -> CellFolder:
        return CellFolder(self._path)

    def save(self, data: Mapping[str, Any]) -> None:
        store = CellFolder(self._path)
        for key, record in data.items():
            store.put(key, record)

    def _exists(self) -> bool:
        return Path(self._path).is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}
