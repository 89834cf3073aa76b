"""Custom Kedro datasets of the project (referenced by their path in the catalog)."""

from .benchmark_cell_store import BenchmarkCellStoreDataset
from .journal_folder import JournalFolderDataset
from .mlflow_pool import MlflowPoolDataset

__all__ = [
    "BenchmarkCellStoreDataset",
    "JournalFolderDataset",
    "MlflowPoolDataset",
]
