"""Custom Kedro datasets of the project (referenced by their path in the catalog)."""

from .benchmark_cell_store import BenchmarkCellStore, BenchmarkCellStoreDataset
from .journal_folder import JournalFolderDataset

__all__ = ["BenchmarkCellStore", "BenchmarkCellStoreDataset", "JournalFolderDataset"]
