"""The folder of trial journals (core/journal.py) as a catalog entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from ensemble_bo.core.journal import JournalFolder


class JournalFolderDataset(AbstractDataset[None, JournalFolder]):
    """`load()` gives a JournalFolder; searches write their journals into it."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._path = path
        self.metadata = metadata

    def load(self) -> JournalFolder:
        return JournalFolder(self._path)

    def save(self, data: None) -> None:
        raise NotImplementedError("journals are written by the searches themselves")

    def _exists(self) -> bool:
        return Path(self._path).is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}
