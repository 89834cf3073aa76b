"""A search result under data/06_models, as a catalog entry, in the data-only format."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io import AbstractVersionedDataset, Version
from kedro.io.core import DatasetError

from ensemble_bo.core.result_files import read_result, write_result
from ensemble_bo.core.results import EnsembleSearchResult


class SearchResultDataset(
    AbstractVersionedDataset[EnsembleSearchResult, EnsembleSearchResult]
):
    """A search result as the folder `filepath` (core.result_files: result.json
    and arrays.npz); versioned, `<filepath>/<version>/<name>/`."""

    def __init__(
        self,
        filepath: str,
        version: Version | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(PurePosixPath(filepath), version)
        self.metadata = metadata

    def load(self) -> EnsembleSearchResult:
        return read_result(Path(self._get_load_path()))

    def save(self, data: EnsembleSearchResult) -> None:
        write_result(data, Path(self._get_save_path()))

    def _exists(self) -> bool:
        try:
            return Path(self._get_load_path()).is_dir()
        except DatasetError:  # no version saved yet
            return False

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "version": self._version}
