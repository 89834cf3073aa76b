"""Custom Kedro datasets of the project (referenced by their path in the catalog)."""

from .benchmark_cell_store import BenchmarkCellStoreDataset
from .journal_folder import JournalFolderDataset
from .mlflow_pool import MlflowPoolDataset
from .search_result_folder import SearchResultDataset

__all__ = [
    "BenchmarkCellStoreDataset",
    "JournalFolderDataset",
    "MlflowPoolDataset",
    "SearchResultDataset",
]
