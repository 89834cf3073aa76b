"""Nodes of the benchmark: run the grid's cells, then the report.

The grid, its keys and a cell's run are core/grid.py's; the report is
reporting.benchmark_report. Cells are stored as they finish, so a killed
benchmark rerun with the same parameters runs only what is missing. Each
finished (or reused) cell is published as a `CellEnded` event, which the
tracking hook makes a nested MLflow run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pandas as pd
from joblib import Parallel, delayed

from ensemble_bo.core.dask_runner import dask_client, hold_on_cluster, scheduler_address
from ensemble_bo.core.grid import (
    Cell,
    failed_cell,
    grid_cells,
    parse_settings,
    run_cell,
)
from ensemble_bo.core.journal import JournalFolder
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.workers import exit_when_parent_dies
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


def _cells_on_dask(
    parallel: ParallelSettings,
    cells: list[Cell],
    frames: Mapping[str, pd.DataFrame],
    data_processing: Mapping[str, Any],
    checkpoints: JournalFolder,
) -> Iterator[dict[str, Any]]:
    """Each cell a task of the cluster `parallel` names, records as they finish.

    Every dataset is sent to the cluster once. A cell whose task fails (its
    worker died past Dask's retries) is a failed cell. Cells are the unit of work: a
    cell's search trains its trials one at a time on the worker that runs it
    (core.grid.cell_settings), so the cluster's slots are never asked for by
    a cell and a search at once.
    """
    if not cells:
        return
    # distributed takes seconds to import: only Dask runs pay for it.
    from distributed import as_completed  # noqa: PLC0415

    with dask_client(parallel) as client:
        held = {name: hold_on_cluster(client, frame) for name, frame in frames.items()}
        futures = {
            client.submit(
                run_cell,
                cell,
                held[cell.dataset],
                data_processing,
                checkpoints,
                key=f"cell-{cell.key}",
                pure=False,
            ): cell
            for cell in cells
        }
        for future in as_completed(futures):
            try:
                yield future.result()
            except Exception as error:  # noqa: BLE001 - a cell whose worker died: the grid goes on
                yield failed_cell(futures[future], error)


def run_benchmark(
    raw_datasets: Mapping[str, Callable[[], pd.DataFrame]],
    cell_store,
    checkpoints: JournalFolder,
    benchmark: Mapping[str, Any],
    data_processing: Mapping[str, Any],
    **parameters: Any,
) -> list[dict[str, Any]]:
    """Run the grid's unfinished cells (in parallel), storing each as it finishes.

    Cells run on `benchmark.n_jobs` local processes, or, with `parallel.backend:
    dask`, as tasks of that Dask cluster (its address, or a LocalCluster of
    `parallel.n_workers`).

    checkpoints: where each running cell journals its trials (dropped once the
    cell is stored). parameters: the blocks the cells read
    (core.grid.parameter_blocks). Returns
    every cell's record, sorted by key; a failed cell's record is not stored,
    so a rerun tries it again.
    """
    settings = parse_settings(benchmark)
    frames = load_datasets(raw_datasets, settings.datasets)
    cells = grid_cells(settings, frames, data_processing, parameters)
    stored = {cell.key for cell in cells if cell_store.has(cell.key)}
    pending = [cell for cell in cells if cell.key not in stored]
    parallel = ParallelSettings.from_block(parameters["parallel"])
    logger.info(
        "benchmark: %d cells, %d to run %s",
        len(cells),
        len(pending),
        f"on Dask ({scheduler_address(parallel) or 'a LocalCluster'})"
        if parallel.backend == "dask"
        else f"with n_jobs={settings.n_jobs}",
    )
    for key in sorted(stored):
        # a kill between storing a cell and dropping its journal leaves one behind
        checkpoints.journal(key).discard()
        announce_cell(cell_store.get(key), reused=True)
    if parallel.backend == "dask":
        finished = _cells_on_dask(
            parallel, pending, frames, data_processing, checkpoints
        )
    else:
        finished = Parallel(
            n_jobs=settings.n_jobs,
            return_as="generator_unordered",
            # workers exit with a killed kedro instead of running on unattended
            initializer=exit_when_parent_dies,
            initargs=(os.getpid(),),
        )(
            delayed(run_cell)(cell, frames[cell.dataset], data_processing, checkpoints)
            for cell in pending
        )
    failed = {}
    for record in finished:
        if record["status"] == "failed":
            failed[record["key"]] = record
        else:
            cell_store.put(record["key"], record)
            checkpoints.journal(record["key"]).discard()
        announce_cell(record, reused=False)
    return sorted(
        (failed.get(cell.key) or cell_store.get(cell.key) for cell in cells),
        key=lambda record: record["key"],
    )
