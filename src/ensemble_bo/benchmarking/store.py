"""Where benchmark cells' records are kept: a folder of JSON files, or JSON lines.

Both stores give a cell's latest record by its key. `CellFolder`, the
pipeline's (data/07_model_output/benchmark_cells/): one `<key>.json` file per
finished cell, each written to a temporary name in the same folder and moved
into place with `os.replace` (atomic on POSIX and Windows), so a reader never
sees half a record; a failed cell is not kept, so a rerun tries it again.
`CellLines`, the scripts' (benchmarks/results/*.jsonl): one JSON line per
finished or failed cell appended to one file and synced to disk, the latest
line of a key winning; a line cut by a kill is skipped (that cell runs again),
and the failed cells stay in the file so that a report read from it names them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ensemble_bo.core.journal import atomic_write_bytes

logger = logging.getLogger(__name__)

_SUFFIX = ".json"
# What a folder's key may contain: it is a file name (and an MLflow run name).
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.+=-]+$")


class CellStore:
    """Records of cells by key; a subclass says where they are kept."""

    # Whether a failed cell's record is kept (a rerun runs the cell again anyway).
    keeps_failed = False

    def get(self, key: str) -> dict[str, Any]:
        raise NotImplementedError

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def keys(self) -> list[str]:
        """Keys of the stored cells, sorted."""
        raise NotImplementedError

    def has(self, key: str) -> bool:
        try:
            self.get(key)
        except KeyError:
            return False
        return True

    def records(self) -> dict[str, dict[str, Any]]:
        """Every stored record by key."""
        return {key: self.get(key) for key in self.keys()}

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())


class CellFolder(CellStore):
    """Records of finished cells, one `<key>.json` file each under `path`."""

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
        try:
            return json.loads(self._file(key).read_text(encoding="utf-8"))
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

    def __repr__(self) -> str:
        return f"CellFolder({str(self.path)!r})"


def json_default(value: Any) -> Any:
    """numpy scalars as Python numbers; anything else JSON cannot take as text."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


class CellLines(CellStore):
    """Records of cells, finished or failed, as JSON lines in the file `path`."""

    keeps_failed = True

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._records: dict[str, dict[str, Any]] | None = None

    def _read(self) -> dict[str, dict[str, Any]]:
        """The latest record of every key (read once: this process is the writer)."""
        if self._records is None:
            self._records = {}
            lines = self.path.read_text().splitlines() if self.path.exists() else []
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill: that cell reruns
                    logger.warning("%s:%d: unreadable line skipped", self.path, number)
                    continue
                self._records[record["key"]] = record
        return self._records

    def get(self, key: str) -> dict[str, Any]:
        try:
            return self._read()[key]
        except KeyError:
            raise KeyError(f"no cell {key!r} in {self.path}") from None

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        """Append the record as one line, synced to disk before this returns."""
        if record.get("key") != key:
            raise ValueError(f"record of {record.get('key')!r} put under {key!r}")
        records = self._read()
        line = json.dumps(dict(record), default=json_default)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as stream:
            stream.write(line + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        records[key] = json.loads(line)  # as a reader of the file gets it

    def keys(self) -> list[str]:
        return sorted(self._read())

    def records(self) -> dict[str, dict[str, Any]]:
        """Every key's latest record, in the order the keys first appear."""
        return dict(self._read())

    def __repr__(self) -> str:
        return f"CellLines({str(self.path)!r})"
