"""Running benchmark cells: in parallel, resumably, each record stored as it ends.

`resume` splits a grid's cells into those whose finished record its store holds
and those still to run. `run_cells` runs cells on local worker processes
(joblib) or as tasks of a Dask cluster, stores each record as its cell ends and
yields it, so a killed run loses only the cells that were running and a rerun
with the same cells runs only what is missing. The benchmark pipeline and every
script in benchmarks/ run their cells through these two functions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from joblib import Parallel, delayed

from ensemble_bo.benchmarking.store import CellStore
from ensemble_bo.core.dask_runner import dask_client, hold_on_cluster
from ensemble_bo.core.grid import Cell, as_json
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.workers import exit_when_parent_dies

# A cell's run: (cell, its dataset's frame when the run is given frames, the
# run's arguments) -> the cell's record. It must pickle (a module-level
# function) and return a failed record rather than raise.
CellRun = Callable[..., dict[str, Any]]


def resume(
    cells: Sequence[Cell], store: CellStore
) -> tuple[dict[str, dict[str, Any]], list[Cell]]:
    """The stored records of the finished cells by key, and the cells to run.

    A cell is finished when the store holds a record of its key with status
    "ok"; the others (no record, or a failed one) run. A stored record whose
    coordinates differ from its cell's (e.g. another setup under the same key)
    stops the run: the store belongs to another grid.
    """
    finished, pending = {}, []
    for cell in cells:
        try:
            record = store.get(cell.key)
        except KeyError:
            pending.append(cell)
            continue
        expected = as_json(cell.coordinates)
        for name, value in expected.items():
            if name in record and record[name] != value:
                raise ValueError(
                    f"{store!r} holds {cell.key} with {name} {record[name]!r}; this "
                    f"grid's cell has {value!r}: use another store for other settings"
                )
        if record.get("status") == "ok":
            finished[cell.key] = record
        else:
            pending.append(cell)
    return finished, pending


def run_cells(
    cells: Sequence[Cell],
    run: CellRun,
    store: CellStore | None = None,
    *,
    frames: Mapping[str, Any] | None = None,
    arguments: tuple = (),
    jobs: int = 1,
    cluster: ParallelSettings | None = None,
    stamp: Mapping[str, Any] | None = None,
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Run every cell; yield (cell, record) as each ends, its record stored first.

    run(cell, frames[cell.dataset], *arguments) gives a cell's record (run(cell,
    *arguments) without frames). The cells run `jobs` at a time on local worker
    processes (joblib's n_jobs: 1 runs them here, one after the other), or, with
    `cluster`, as tasks of that Dask cluster, which holds each frame once. A
    cell whose worker died is its `failed_record`. stamp: added to every
    record (e.g. provenance computed once). store: where the records go (a
    failed one where the store keeps failed cells); None: nowhere.
    """
    if cluster is None:
        finished = _on_processes(cells, run, frames, arguments, jobs)
    else:
        finished = _on_dask(cells, run, frames, arguments, cluster)
    for cell, record in finished:
        record.update(stamp or {})
        if store is not None and (record["status"] == "ok" or store.keeps_failed):
            store.put(cell.key, record)
        yield cell, record


def _cell_arguments(
    cell: Cell, frames: Mapping[str, Any] | None, arguments: tuple
) -> tuple:
    """What `run` takes after the cell: its dataset's frame (if any), the arguments."""
    return arguments if frames is None else (frames[cell.dataset], *arguments)


def _numbered(
    number: int, run: CellRun, cell: Cell, arguments: tuple
) -> tuple[int, dict[str, Any]]:
    return number, run(cell, *arguments)


def _on_processes(
    cells: Sequence[Cell],
    run: CellRun,
    frames: Mapping[str, Any] | None,
    arguments: tuple,
    jobs: int,
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """The cells on `jobs` worker processes, which serve every cell (their
    imports are paid once), each cell sent with its own frame only."""
    if not cells:
        return
    finished = Parallel(
        n_jobs=jobs,
        return_as="generator_unordered",
        # workers exit with a killed parent instead of running on unattended
        initializer=exit_when_parent_dies,
        initargs=(os.getpid(),),
    )(
        delayed(_numbered)(number, run, cell, _cell_arguments(cell, frames, arguments))
        for number, cell in enumerate(cells)
    )
    for number, record in finished:
        yield cells[number], record


def _on_dask(
    cells: Sequence[Cell],
    run: CellRun,
    frames: Mapping[str, Any] | None,
    arguments: tuple,
    cluster: ParallelSettings,
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Each cell a task of the cluster, records as they finish.

    Every frame a cell needs is sent to the cluster once. A cell whose task
    fails (its worker died past Dask's retries) is a failed cell. Cells are the
    unit of work: a cell's search trains its trials one at a time on the
    worker that runs it (core.grid.cell_settings), so the cluster's slots are
    never asked for by a cell and a search at once.
    """
    if not cells:
        return
    # distributed takes seconds to import: only Dask runs pay for it.
    from distributed import as_completed  # noqa: PLC0415

    with dask_client(cluster) as client:
        held = None
        if frames is not None:
            needed = {cell.dataset for cell in cells}
            held = {name: hold_on_cluster(client, frames[name]) for name in needed}
        futures = {
            client.submit(
                run,
                cell,
                *_cell_arguments(cell, held, arguments),
                key=f"cell-{cell.key}",
                pure=False,
            ): cell
            for cell in cells
        }
        for future in as_completed(futures):
            cell = futures[future]
            try:
                yield cell, future.result()
            except Exception as error:  # noqa: BLE001 - its worker died; the grid goes on
                yield cell, cell.failed_record(error)
