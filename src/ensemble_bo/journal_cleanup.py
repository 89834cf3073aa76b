"""A Kedro hook that drops a finished run's trial journals (core/journal.py).

Journals exist so that a stopped run resumes; once a run has finished, its
searches' journals are deleted. A failed or killed run keeps them.
"""

from __future__ import annotations

from kedro.framework.hooks import hook_impl

from ensemble_bo import events
from ensemble_bo.core.journal import TrialJournal


class JournalCleanupHook:
    def __init__(self) -> None:
        self._journals: list[str] = []

    def _on_event(self, event: events.Event) -> None:
        if isinstance(event, events.SearchResumable):
            self._journals.append(event.journal)

    @hook_impl
    def before_pipeline_run(self) -> None:
        self._journals.clear()
        events.subscribe(self._on_event)

    @hook_impl
    def after_pipeline_run(self) -> None:
        events.unsubscribe(self._on_event)
        for directory in self._journals:
            TrialJournal(directory).discard()
        self._journals.clear()

    @hook_impl
    def on_pipeline_error(self) -> None:
        events.unsubscribe(self._on_event)
        self._journals.clear()
