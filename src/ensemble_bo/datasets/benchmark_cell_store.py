"""The benchmark's finished cells, one JSON file per cell, written as each cell ends.

A killed benchmark loses only the cells that were running: a rerun with the same
parameters finds the finished ones here and skips them. Each file is written to
a temporary name in the same folder and moved into place with `os.replace`
(atomic on POSIX and Windows), so a reader never sees half a record.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from ensemble_bo.core.journal import atomic_write_bytes

_SUFFIX = ".json"
# What a key may contain: it is a file name (and an MLflow run name).
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.+=-]+$")


class BenchmarkCellStore:
    """Records of finished cells by key, one `<key>.json` file each under `path`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def _file(self, key: str) -> Path:
        if not _KEY_PATTERN.match(key) or key.startswith("."):
            raise ValueError(
                f"cell key {key!r} is not a safe file name "
                "(letters, digits and _ . + = - only)"
            )
        return self.path / f"{key}{_SUFFIX}"

    def has(self, key: str) -> bool:
        return self._file(key).is_file()

    def get(self, key: str) -> dict[str, Any]:
        file = self._file(key)
        try:
            return json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyError(f"no finished cell {key!r} in {self.path}") from None

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        """Write the record atomically: a temporary file, then os.replace."""
        text = json.dumps(dict(record), indent=1, sort_keys=True)
        atomic_write_bytes(self._file(key), text.encode("utf-8"))

    def keys(self) -> list[str]:
        """Keys of the stored cells, sorted (temporary files are not cells)."""
        if not self.path.is_dir():
            return []
        return sorted(
            file.name.removesuffix(_SUFFIX)
            for file in self.path.glob(f"*{_SUFFIX}")
            if not file.name.startswith(".")
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __repr__(self) -> str:
        return f"BenchmarkCellStore({str(self.path)!r})"


class BenchmarkCellStoreDataset(AbstractDataset[Mapping[str, Any], BenchmarkCellStore]):
    """Catalog entry of the cell store: `load()` gives a `BenchmarkCellStore`.

    Saving a mapping {key: record} puts each record (the store is never
    emptied by a save: finished cells are what a rerun reuses).
    """

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._path = path
        self.metadata = metadata

    def load(self) -> BenchmarkCellStore:
        return BenchmarkCellStore(self._path)

    def save(self, data: Mapping[str, Any]) -> None:
        store = BenchmarkCellStore(self._path)
        for key, record in data.items():
            store.put(key, record)

    def _exists(self) -> bool:
        return Path(self._path).is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}
