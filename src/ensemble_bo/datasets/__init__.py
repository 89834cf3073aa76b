"""Custom Kedro datasets of the project (referenced by their path in the catalog)."""

from .benchmark_cell_store import BenchmarkCellStore, BenchmarkCellStoreDataset

__all__ = ["BenchmarkCellStore", "BenchmarkCellStoreDataset"]
