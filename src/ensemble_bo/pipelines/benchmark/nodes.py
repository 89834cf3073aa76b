"""Nodes of the benchmark: run the grid's cells, then the report.

The grid, its keys and a cell's run are core/grid.py's; the store and the
runner ensemble_bo.benchmarking's; the report is reporting.benchmark_report.
Cells are stored as they finish, so a killed benchmark rerun with the same
parameters runs only what is missing. Each finished (or reused) cell is
published as a `CellEnded` event, which the tracking hook makes a nested MLflow
run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from ensemble_bo.benchmarking.runner import resume, run_cells
from ensemble_bo.benchmarking.store import CellFolder
from ensemble_bo.core.dask_runner import scheduler_address
from ensemble_bo.core.grid import grid_cells, parse_settings, run_cell
from ensemble_bo.core.journal import JournalFolder
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.events import CellEnded, publish

logger = logging.getLogger(__name__)


def load_datasets(
    raw_datasets: Mapping[str, Callable[[], pd.DataFrame]], names: list[str]
) -> dict[str, pd.DataFrame]:
    """Load only the grid's datasets from the partitions of data/01_raw."""
    unknown = [name for name in names if name not in raw_datasets]
    if unknown:
        raise ValueError(
            f"benchmark.datasets: unknown dataset {unknown[0]!r}; available in "
            f"data/01_raw: {sorted(raw_datasets)}"
        )
    return {name: raw_datasets[name]() for name in names}


def announce_cell(record: Mapping[str, Any], reused: bool) -> None:
    """A console line for the cell, and its `CellEnded` event."""
    if record["status"] == "failed":
        logger.warning(
            "cell %s failed (not stored): %s", record["key"], record["error"]
        )
    else:
        note = " (reused from the store)" if reused else ""
        logger.info(
            "cell %s: test loss %.4g%s", record["key"], record["test_loss"], note
        )
    publish(CellEnded(dict(record), reused))


def run_benchmark(
    raw_datasets: Mapping[str, Callable[[], pd.DataFrame]],
    cell_store: CellFolder,
    journals: JournalFolder,
    benchmark: Mapping[str, Any],
    data_processing: Mapping[str, Any],
    **parameters: Any,
) -> list[dict[str, Any]]:
    """Run the grid's unfinished cells (in parallel), storing each as it finishes.

    Cells run on `benchmark.n_jobs` local processes, or, with `parallel.backend:
    dask`, as tasks of that Dask cluster (its address, or a LocalCluster of
    `parallel.n_workers`).

    journals: where each running cell journals its trials (dropped once the
    cell is stored). parameters: the blocks the cells read
    (core.grid.parameter_blocks). Returns
    every cell's record, sorted by key; a failed cell's record is not stored,
    so a rerun tries it again.
    """
    settings = parse_settings(benchmark)
    frames = load_datasets(raw_datasets, settings.datasets)
    cells = grid_cells(settings, frames, data_processing, parameters)
    finished, pending = resume(cells, cell_store)
    parallel = ParallelSettings.from_block(parameters["parallel"])
    on_dask = parallel.backend == "dask"
    logger.info(
        "benchmark: %d cells, %d to run %s",
        len(cells),
        len(pending),
        f"on Dask ({scheduler_address(parallel) or 'a LocalCluster'})"
        if on_dask
        else f"with n_jobs={settings.n_jobs}",
    )
    for key, record in sorted(finished.items()):
        # a kill between storing a cell and dropping its journal leaves one behind
        journals.journal(key).discard()
        announce_cell(record, reused=True)
    ended = run_cells(
        pending,
        run_cell,
        cell_store,
        frames=frames,
        arguments=(data_processing, journals),
        jobs=settings.n_jobs,
        cluster=parallel if on_dask else None,
    )
    failed = {}
    for cell, record in ended:
        if record["status"] == "failed":
            failed[cell.key] = record
        else:
            journals.journal(cell.key).discard()
        announce_cell(record, reused=False)
    return sorted(
        (failed.get(cell.key) or cell_store.get(cell.key) for cell in cells),
        key=lambda record: record["key"],
    )
