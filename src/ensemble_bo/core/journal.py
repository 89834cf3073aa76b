"""A search's finished trials on disk, so a stopped search resumes without retraining.

Each trial is one pickle file in the journal's folder, written under a
temporary name and moved into place (`os.replace`), so a kill at any moment
leaves whole trials only. A search resumed from its journal replays: the
optimizer and the strategy are deterministic given the seed, so they propose
the same configurations again, and `core.parallel.ReplayingRunner` returns the
recorded result of each instead of training it (an async parallel search,
whose proposals depend on which trial ended first, takes its recorded trials
back in the order they ended instead).

Replaying, rather than pickling the optimizer's, the strategy's and the RNGs'
state after every trial, keeps one code path for fresh and resumed searches
and makes a resumed result identical to an uninterrupted one by construction;
its cost is refitting the GP once per replayed iteration, never a model.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sklearn

from ensemble_bo.core.pool import TrialResult
from ensemble_bo.core.preparation import ModelInput

_TRIAL_FILE = re.compile(r"^trial_(\d+)\.pkl$")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all: a temporary file, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class JournalEntry:
    """One finished trial: the configuration and what its evaluation gave."""

    config: dict[str, Any]
    result: TrialResult


class TrialJournal:
    """The finished trials of one search, `trial_<i>.pkl` under `directory`."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def entries(self) -> list[JournalEntry]:
        """The trials recorded from trial 0 on, up to the first missing one."""
        recorded = self.recorded()
        entries = []
        while len(entries) in recorded:
            entries.append(recorded[len(entries)])
        return entries

    def recorded(self) -> dict[int, JournalEntry]:
        """Every whole trial recorded, by index: a parallel search's batch may
        leave a gap where a trial still training was stopped."""
        if not self.directory.is_dir():
            return {}
        return {
            # Written by this project's own search into the project's folder.
            int(match.group(1)): pickle.loads(file.read_bytes())  # noqa: S301
            for file in self.directory.iterdir()
            if (match := _TRIAL_FILE.match(file.name))
        }

    def record(
        self, index: int, config: Mapping[str, Any], result: TrialResult
    ) -> None:
        entry = JournalEntry(dict(config), result)
        atomic_write_bytes(self.directory / f"trial_{index}.pkl", pickle.dumps(entry))

    def truncate(self, length: int) -> None:
        """Forget the trials from index `length` on."""
        if not self.directory.is_dir():
            return
        for file in self.directory.iterdir():
            match = _TRIAL_FILE.match(file.name)
            if match and int(match.group(1)) >= length:
                file.unlink()

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return f"TrialJournal({str(self.directory)!r})"


class JournalFolder:
    """The journals of many searches, one sub-folder per search's key."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def journal(self, key: str) -> TrialJournal:
        if not re.fullmatch(r"[A-Za-z0-9_.+=-]+", key) or key.startswith("."):
            raise ValueError(f"journal key {key!r} is not a safe folder name")
        return TrialJournal(self.path / key)

    def __repr__(self) -> str:
        return f"JournalFolder({str(self.path)!r})"


def _digest_array(array: np.ndarray) -> str:
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(str((array.dtype.str, array.shape)).encode())
    digest.update(array.tobytes())
    return digest.hexdigest()


def journal_key(
    method: str, settings: Mapping[str, Any], seed: int, data: ModelInput, version: str
) -> str:
    """The search a journal belongs to: sha256 of the method, its settings (but
    `parallel`), the seed, the data (features, target, folds), our version and
    scikit-learn's.

    A journal is only replayed into the very search that wrote it.
    """
    content = {
        "method": method,
        # Where the trials ran does not change what a recorded trial is; the
        # replay checks that the search proposes it again (core.parallel).
        "settings": {
            name: block for name, block in settings.items() if name != "parallel"
        },
        "seed": seed,
        "data": [_digest_array(a) for a in (data.features, data.target, data.fold_ids)],
        "task": data.task,
        "versions": [version, sklearn.__version__],
    }
    text = json.dumps(content, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]
