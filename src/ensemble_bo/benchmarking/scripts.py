"""What the benchmark scripts share around their cells: options, data, provenance.

A script in benchmarks/ builds its cells (core.grid.ToolCell) and a
module-level function that runs one (usually core.grid.run_tool_cell with the
tool's fit); `run_grid` resumes from the script's store, runs the rest
`--jobs` at a time with a progress line per cell, and the script then writes
its report from the store's records.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from ensemble_bo.benchmarking.runner import CellRun, resume, run_cells
from ensemble_bo.benchmarking.store import CellLines
from ensemble_bo.core.grid import Cell, ToolCell, dataset_task, repetition_seed
from ensemble_bo.core.methods import TASK_METHODS, run_method
from ensemble_bo.core.preparation import DatasetSplit, ModelInput, prepare
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.validation import load_raw_dataset

# The bundled datasets the scripts run by default: all but the two largest,
# adult (32,561 rows) and letter (20,000), as the project's results grid
# (conf/results/parameters_benchmark.yml); --datasets may name them.
BUNDLED_REGRESSION = [
    "auto_mpg", "boston", "carseats", "concrete", "cpu_performance", "diabetes",
    "hitters", "wage",
]  # fmt: skip
BUNDLED_CLASSIFICATION = [
    "breast_cancer", "car_good", "digits", "german_credit", "pima", "spambase",
    "titanic", "wine",
]  # fmt: skip


def log(message: str) -> None:
    """A progress line on stderr (the report itself goes to stdout)."""
    print(message, file=sys.stderr, flush=True)  # noqa: T201 - progress


def package_versions(packages: Sequence[str]) -> dict[str, str]:
    """Python's version, then each package's (or "not installed")."""
    versions = {"python": platform.python_version()}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def git_state(project: Path) -> dict[str, Any]:
    """The commit, whether the tree differs from it, and a digest of the sources."""
    state: dict[str, Any] = {}
    try:
        state["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        state["git_dirty"] = bool(status.strip())
        state["git_dirty_paths"] = [line[3:] for line in status.splitlines()][:20]
    except (OSError, subprocess.CalledProcessError) as error:
        state["git_commit"] = f"unknown ({error})"
    # The tree may be dirty: the sources measured, whatever the commit says.
    digest = hashlib.sha256()
    for path in sorted((project / "src" / "ensemble_bo").rglob("*.py")):
        digest.update(str(path.relative_to(project)).encode())
        digest.update(path.read_bytes())
    state["sources_sha256"] = digest.hexdigest()[:16]
    return state


def provenance(packages: Sequence[str], project: Path | None = None) -> dict[str, Any]:
    """What every record of a run names: package versions, cores, and with
    `project` its git state."""
    stamp = {"versions": package_versions(packages), "nproc": os.cpu_count()}
    return {**stamp, **(git_state(project) if project is not None else {})}


def project_copy(project: Path, root: Path, datasets: Sequence[str] = ()) -> Path:
    """A project in the folder `root` to `kedro run` in: `project`'s
    pyproject.toml, .telemetry (its telemetry answer) and conf (its local
    settings left out), an empty conf/local, and the bundled raw `datasets`;
    Kedro wants a source folder, and the package is the installed one.
    Returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(project / "pyproject.toml", root)
    if (project / ".telemetry").exists():
        shutil.copy(project / ".telemetry", root)
    shutil.copytree(project / "conf" / "base", root / "conf" / "base")
    for extra in (project / "conf").glob("*.yml"):
        shutil.copy(extra, root / "conf")
    (root / "conf" / "local").mkdir()
    (root / "src").mkdir()
    (root / "data" / "01_raw").mkdir(parents=True)
    for name in datasets:
        shutil.copy(
            project / "data" / "01_raw" / f"{name}.csv", root / "data" / "01_raw"
        )
    return root


def shown(path: Path, project: Path) -> str:
    """The path relative to the project where it lies inside it."""
    try:
        return str(path.resolve().relative_to(project))
    except ValueError:
        return str(path)


def add_run_arguments(
    parser: argparse.ArgumentParser, default_output: Path | None
) -> None:
    """The options every cell-grid script ends with: --jobs, --output, --report
    (default_output None: the script chooses one after parsing)."""
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells run at once (at most the cores)"
    )
    parser.add_argument("--output", type=Path, default=default_output)
    parser.add_argument(
        "--report", action="store_true", help="only re-read the results and report"
    )


def add_search_grid_arguments(
    parser: argparse.ArgumentParser,
    default_output: Path,
    repetitions: int,
    budget: int = 20,
) -> None:
    """The options of a script of one default search per (dataset,
    repetition): --datasets (the bundled ones), --repetitions, --budget
    (configurations per search), then add_run_arguments'."""
    parser.add_argument(
        "--datasets", nargs="+", default=BUNDLED_REGRESSION + BUNDLED_CLASSIFICATION
    )
    parser.add_argument("--repetitions", type=int, default=repetitions)
    parser.add_argument("--budget", type=int, default=budget)
    add_run_arguments(parser, default_output)


def parse_search_grid(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """`parser`'s arguments (add_search_grid_arguments), or exit naming a
    count below 1."""
    args = parser.parse_args()
    if args.repetitions < 1 or args.budget < 1:
        sys.exit("--repetitions and --budget must be at least 1")
    return args


def default_search_cells(
    datasets: Sequence[str],
    tasks: Mapping[str, str],
    repetitions: int,
    tool: str,
    setup: Sequence[tuple[str, Any]] = (),
) -> list[ToolCell]:
    """One cell per (dataset, repetition), datasets first within each
    repetition, of the task's default method (TASK_METHODS) with `setup`,
    e.g. (("budget", 20),), on the split of repetition_seed(0, r)."""
    return [
        ToolCell(
            dataset,
            repetition,
            repetition_seed(0, repetition),
            tool,
            tuple(sorted((*setup, ("method", TASK_METHODS[tasks[dataset]])))),
            task=tasks[dataset],
        )
        for repetition in range(repetitions)
        for dataset in datasets
    ]


def default_search(
    cell: ToolCell, raw: pd.DataFrame, parameters: Mapping[str, Any]
) -> tuple[DatasetSplit, ModelInput, EnsembleSearchResult]:
    """A default_search_cells cell's split of `raw`, its model input and its
    search: the cell's method with its `budget` configurations and
    `parameters`, seeded by the cell."""
    setup = dict(cell.setup)
    split, data = prepare(raw, cell.dataset, parameters["data_processing"], cell.seed)
    settings = {**parameters, "budget": setup["budget"]}
    return split, data, run_method(setup["method"], data, settings, cell.seed)


def quiet_learners() -> None:
    """Learners' convergence chatter is not a result; PYTHONWARNINGS reaches the
    evaluation worker processes too."""
    warnings.filterwarnings("ignore")
    os.environ["PYTHONWARNINGS"] = "ignore"


def raw_datasets(
    names: Iterable[str], project: Path, folder: Path | None = None
) -> dict[str, pd.DataFrame]:
    """folder/<name>.csv (default: the project's data/01_raw) as the pipelines
    load it, by name; a manifest.json in folder is checked as data/01_raw's."""
    raw = project / "data" / "01_raw" if folder is None else folder
    return {name: load_raw_dataset(name, raw, project_path=project) for name in names}


def run_grid(
    cells: Sequence[Cell],
    run: CellRun,
    store: CellLines,
    project: Path,
    *,
    frames: Mapping[str, pd.DataFrame],
    arguments: tuple = (),
    jobs: int = 1,
    stamp: Mapping[str, Any] | None = None,
) -> None:
    """Run the cells `store` holds no finished record of, `jobs` at a time.

    run(cell, frames[cell.dataset], *arguments): the script's module-level
    cell run. stamp: added to every new record (e.g. `provenance`).
    """
    try:
        finished, pending = resume(cells, store)
    except ValueError as error:  # the store holds another grid: say so, no traceback
        sys.exit(str(error))
    log(
        f"{len(cells)} cells, {len(finished)} already in "
        f"{shown(store.path, project)}, {len(pending)} to run with {jobs} job(s)"
    )
    start = time.perf_counter()
    ended = run_cells(
        pending,
        run,
        store,
        frames=frames,
        arguments=arguments,
        jobs=jobs,
        stamp=stamp,
    )
    for done, (cell, record) in enumerate(ended, 1):
        if record["status"] == "ok":
            outcome = f"test loss {record['test_loss']:.4f}"
            if "fit_wall_seconds" in record:
                outcome += f", fit {record['fit_wall_seconds']:.1f} s"
            outcome += f", cell {record['cell_wall_seconds']:.1f} s"
        else:
            outcome = record["error"]
        log(
            f"[{done}/{len(pending)}] {cell.key}: {outcome} "
            f"({time.perf_counter() - start:.0f} s elapsed)"
        )


def search_grid_main(
    args: argparse.Namespace,
    project: Path,
    parameters: Mapping[str, Any],
    build_cells: Callable[[Mapping[str, str]], Sequence[Cell]],
    run: CellRun,
    report: Callable[[dict[str, dict[str, Any]], Path], str],
    packages: Sequence[str],
) -> None:
    """What a script of one default search per (dataset, repetition) does
    after parsing its options (`--datasets`, add_run_arguments'): unless
    `--report`, run the cells build_cells(tasks by dataset) gives, with
    `parameters` as run's argument; then write `report(records, output)` to
    the output's .md."""
    output = args.output.resolve()
    if not args.report:
        quiet_learners()
        frames = raw_datasets(args.datasets, project)
        tasks = {
            name: dataset_task(frame, name, parameters["data_processing"])
            for name, frame in frames.items()
        }
        run_grid(
            build_cells(tasks),
            run,
            CellLines(output),
            project,
            frames=frames,
            arguments=(parameters,),
            jobs=args.jobs,
            stamp=provenance(packages, project),
        )
    # tables imports this module's log
    from ensemble_bo.benchmarking.tables import write_report  # noqa: PLC0415

    write_report(report(CellLines(output).records(), output), output.with_suffix(".md"))
