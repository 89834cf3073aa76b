"""A pool (search result) an earlier run logged to MLflow, as a catalog entry."""

from __future__ import annotations

from typing import Any

from kedro.io import AbstractDataset

from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.tracking.pools import load_pool


class MlflowPoolDataset(AbstractDataset[None, EnsembleSearchResult]):
    """`load()` reads the pool `source` names, as data only (tracking.pools.load_pool):
    a method's name or `runs:/<run id>`, from the tracking store of the active
    run, or `file:<folder>`, a result folder on this machine."""

    def __init__(self, source: str, metadata: dict[str, Any] | None = None) -> None:
        self._source = str(source)
        self.metadata = metadata

    def load(self) -> EnsembleSearchResult:
        return load_pool(self._source)

    def save(self, data: None) -> None:
        raise NotImplementedError("pools are logged by the run that searched them")

    def _describe(self) -> dict[str, Any]:
        return {"source": self._source}
