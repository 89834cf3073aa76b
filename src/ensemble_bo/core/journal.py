"""A search's journal: its finished trials on disk, so a stopped search resumes
without retraining.

Each trial (its request and its result, core.trials) is one pickle file in the
journal's folder, written under a temporary name and moved into place
(`os.replace`), so a kill at any moment leaves whole trials only. A search
resumed from its journal replays: the optimizer and the strategy are
deterministic given the seed, so they propose the same configurations again,
and `ReplayingRunner` returns the recorded result of each instead of training
it (an async parallel search, whose proposals depend on which trial ended
first, takes its recorded trials back in the order they ended instead).

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
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sklearn

from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.runners import TrialRunner
from ensemble_bo.core.time_budget import TimeBudget
from ensemble_bo.core.trials import TrialRequest, TrialResult

# How a journal is replayed: by proposal (serial, sync) or by completion (async).
REPLAYS = ("proposals", "completions")

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
    """One finished trial: what was asked for and what its evaluation gave."""

    request: TrialRequest
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

    def record(self, index: int, request: TrialRequest, result: TrialResult) -> None:
        # The deadline is the live clock of the search that wrote it: not kept.
        kept = TrialRequest(
            request.ticket, dict(request.config), request.folds, request.train_fraction
        )
        entry = JournalEntry(kept, result)
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


class ReplayingRunner:
    """A runner that answers recorded trials from the journal and records new ones.

    replay="proposals" (serial and sync searches, whose proposals a seed
    decides): trial t is answered from the journal when the search proposes
    the configuration recorded at t; otherwise the journal from t on no longer
    applies and is dropped. replay="completions" (async searches, whose
    proposals depend on which trial ended first): the recorded trials are
    given back once, in their order, for the search to take as finished
    (`recorded_trials`), and new ones are recorded after them as they end.
    A replayed trial is charged to `time_budget` at the seconds it took over
    `n_workers`, the trials that trained side by side.
    """

    def __init__(
        self,
        runner: TrialRunner,
        journal: TrialJournal,
        time_budget: TimeBudget | None = None,
        replay: str = "proposals",
    ) -> None:
        if replay not in REPLAYS:
            raise ValueError(f"replay={replay!r} is not one of {list(REPLAYS)}")
        self.runner = runner
        self.n_workers = runner.n_workers
        self.journal = journal
        self.time_budget = time_budget
        self.replay = replay
        # proposals: by ticket, gaps and all (a sync search stopped mid-way
        # leaves the later trials that had ended); completions: in the order
        # they ended.
        self._recorded = journal.recorded() if replay == "proposals" else {}
        self._completions = journal.entries() if replay == "completions" else []
        self._replayed: deque[tuple[int, TrialResult]] = deque()
        self._requests: dict[int, TrialRequest] = {}
        self._finished = 0
        self.reused = 0
        self.trained = 0

    def recorded_trials(self) -> list[tuple[TrialRequest, TrialResult]]:
        completions, self._completions = self._completions, []
        if self.replay == "completions":
            # whatever lies past the first gap was never taken as finished
            self.journal.truncate(len(completions))
        for entry in completions:
            self._charge(entry.result)
        self.reused = self._finished = len(completions)
        return [(entry.request, entry.result) for entry in completions]

    def _charge(self, result: TrialResult) -> None:
        # Trials that trained side by side took about 1/n_workers of their sum.
        if self.time_budget is not None:
            self.time_budget.charge(result.fit_seconds / self.n_workers)

    def submit(self, request: TrialRequest) -> None:
        ticket = request.ticket
        entry = self._recorded.get(ticket)
        if entry is not None:
            if entry.request.same_evaluation(request):
                self.reused += 1
                self._charge(entry.result)
                self._replayed.append((ticket, entry.result))
                return
            # The search went another way here: the rest no longer applies.
            self._recorded = {i: e for i, e in self._recorded.items() if i < ticket}
            self.journal.truncate(ticket)
        self._requests[ticket] = request
        self.runner.submit(request)

    def next_finished(self) -> tuple[int, TrialResult]:
        if self._replayed:
            return self._replayed.popleft()
        ticket, result = self.runner.next_finished()
        index = ticket if self.replay == "proposals" else self._finished
        request = self._requests.pop(ticket)
        # A trial that never ran (its worker did not start) is left out, as a
        # gap: a resumed search trains it, where a replay would fail it again.
        if not result.never_ran:
            self.journal.record(index, request, result)
        self._finished += 1
        self.trained += 1
        return ticket, result


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
        # replay checks that the search proposes it again (ReplayingRunner).
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
