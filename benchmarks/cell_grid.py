"""A benchmark's grid of cells: run in worker processes, stored, resumed, reported.

What multi_fidelity.py and flaml_comparison.py (and, for the report helpers,
scaling.py) share. A cell is the script's own frozen dataclass with `dataset`,
`seed`, `time_budget`, `setup` (sorted (name, value) pairs), a `key` and
`coordinates()` (what names it in its record); the script says how a cell's
tool is fitted. Here: one cell's run (the project's split, fit, test loss) in a
worker process, the JSON lines store (one record a finished cell, the latest
per key wins, so a killed run resumes), the loop over the cells, provenance
(package versions, git state) and the report's Markdown and statistics.

The scripts import it as a sibling (`from cell_grid import ...`): a script run
as `python benchmarks/<script>.py` has benchmarks/ as sys.path[0], and the
"spawn" worker processes get the parent's sys.path, so they import it too.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import multiprocessing
import os
import platform
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ensemble_bo.core.preparation import split_dataset
from ensemble_bo.validation import load_raw_dataset

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
RAW_DATA = PROJECT / "data" / "01_raw"

# A tool's fit of a cell on the training part: the fitted model (its predict
# gives the test predictions) and what the record says about the fit.
Fitter = Callable[[Any, pd.DataFrame, pd.Series], tuple[Any, dict[str, Any]]]


# --------------------------------------------------------------------------- cells


def dataset_task(name: str, data_processing: dict[str, Any]) -> str:
    """A dataset's task, decided as the pipelines decide it (task auto)."""
    raw = load_raw_dataset(name, RAW_DATA, project_path=PROJECT)
    # A split with any seed validates the table and resolves the task.
    return split_dataset(raw, name, data_processing, 0).info["task"]


def test_loss(
    predictions: Any, test_target: pd.Series, task: str, train_std: float
) -> float:
    """MSE of the target standardized by train_std (regression), error rate."""
    predicted, actual = np.asarray(predictions), np.asarray(test_target)
    if predicted.shape != actual.shape:
        raise ValueError(f"predictions {predicted.shape} vs targets {actual.shape}")
    if task == "classification":
        return float(np.mean(predicted != actual))
    residuals = (predicted.astype(float) - actual.astype(float)) / train_std
    return float(np.mean(np.square(residuals)))


def cell_record(
    cell: Any,
    task: str,
    data_processing: dict[str, Any],
    fit: Fitter,
    packages: Sequence[str],
) -> dict[str, Any]:
    """Split, fit, score one cell, in a worker process: its JSON record.

    A failed cell is a record too (status failed, its error and traceback);
    `packages`: those whose versions the record names.
    """
    # Learners' convergence chatter is not a result; PYTHONWARNINGS reaches our
    # evaluation worker processes too.
    warnings.filterwarnings("ignore")
    os.environ["PYTHONWARNINGS"] = "ignore"
    record = cell.coordinates()
    start = time.perf_counter()
    try:
        raw = load_raw_dataset(cell.dataset, RAW_DATA, project_path=PROJECT)
        # The benchmark pipeline's split of repetition r (prepare -> split_dataset).
        split = split_dataset(raw, cell.dataset, data_processing, cell.seed)
        if split.info["task"] != task:
            raise ValueError(f"{cell.dataset} is not a {task} dataset")
        model, info = fit(cell, split.train_features, split.train_target)
        train_std = (
            float(split.train_target.astype(float).std(ddof=0))
            if task == "regression"
            else 1.0
        )
        predictions = model.predict(split.test_features)
        record.update(
            status="ok",
            test_loss=test_loss(predictions, split.test_target, task, train_std),
            train_rows=len(split.train_target),
            test_rows=len(split.test_target),
            **info,
        )
    except Exception as error:  # noqa: BLE001 - a failed cell is a result to report
        record.update(
            status="failed",
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(limit=-6),
        )
    record["cell_wall_seconds"] = time.perf_counter() - start
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    record["versions"] = package_versions(packages)
    record["nproc"] = os.cpu_count()
    return record


def plain(value: Any) -> Any:
    """A setup as JSON gives it back (tuples as lists), so that stored and new compare."""
    return json.loads(json.dumps(value))


def check_resumable(cells: Sequence[Any], stored: dict[str, dict[str, Any]]) -> None:
    """Stop if a stored cell ran with another setup (another space or budget)."""
    for cell in cells:
        record = stored.get(cell.key)
        expected = plain(dict(cell.setup))
        if record and record.get("setup") not in (None, expected):
            sys.exit(
                f"{cell.key} is stored with setup {record['setup']}, this run would "
                f"use {expected}; choose another --output for other settings"
            )


def run_pending(
    cells: Sequence[Any],
    worker: Callable[[Any, dict[str, Any]], dict[str, Any]],
    data_processing: dict[str, Any],
    output: Path,
    jobs: int,
    *,
    stamp: Callable[[], dict[str, Any]] | None = None,
    cell_seconds: bool = False,
) -> None:
    """Run the cells `output` holds no finished record of, `jobs` at a time.

    worker(cell, data_processing): the script's module-level cell runner (it
    must pickle by name). stamp(): added to every new record (e.g. git_state),
    computed once; cell_seconds: the progress lines name the cell's seconds.
    """
    stored = read_records(output)
    check_resumable(cells, stored)
    todo = [c for c in cells if stored.get(c.key, {}).get("status") != "ok"]
    log(
        f"{len(cells)} cells, {len(cells) - len(todo)} already in "
        f"{shown(output)}, {len(todo)} to run with {jobs} job(s)"
    )
    if not todo:
        return
    extra = stamp() if stamp is not None else {}
    start = time.perf_counter()
    # "spawn" processes set the thread limits on import (they import the script),
    # and serve every cell: a fresh one per cell would pay the imports (5-8 s
    # here) each time, and every cell's own fit is timed inside it, so the
    # imports never count. No max_tasks_per_child: Python 3.11's executor hangs
    # replacing such workers.
    with ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        futures = {pool.submit(worker, cell, data_processing): cell for cell in todo}
        for done, future in enumerate(as_completed(futures), 1):
            cell = futures[future]
            try:
                record = future.result()
            except Exception as error:  # noqa: BLE001 - e.g. a worker killed for memory
                record = {
                    **cell.coordinates(),
                    "status": "failed",
                    "error": f"{type(error).__name__}: {error}",
                }
            record.update(extra)
            append_record(output, record)
            if record["status"] == "ok":
                outcome = (
                    f"test loss {record['test_loss']:.4f}, fit "
                    f"{record['fit_wall_seconds']:.1f} s"
                )
                if cell_seconds:
                    outcome += f", cell {record['cell_wall_seconds']:.1f} s"
            else:
                outcome = record["error"]
            log(
                f"[{done}/{len(todo)}] {cell.key}: {outcome} "
                f"({time.perf_counter() - start:.0f} s elapsed)"
            )


def add_run_arguments(parser: argparse.ArgumentParser, default_output: Path) -> None:
    """The options every cell-grid script ends with: --jobs, --output, --report."""
    parser.add_argument(
        "--jobs", type=int, default=1, help="cells run at once (at most the cores)"
    )
    parser.add_argument("--output", type=Path, default=default_output)
    parser.add_argument(
        "--report", action="store_true", help="only re-read the results and report"
    )


# --------------------------------------------------------------------------- storage


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """The latest record of every cell key in the JSON lines file."""
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: that cell reruns
            log(f"{path.name}:{number}: unreadable line skipped")
            continue
        records[record["key"]] = record
    return records


def append_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as stream:
        stream.write(json.dumps(record, default=json_default) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


# --------------------------------------------------------------------------- provenance


def log(message: str) -> None:
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


def git_state() -> dict[str, Any]:
    """The commit, whether the tree differs from it, and a digest of the sources."""
    state: dict[str, Any] = {}
    try:
        state["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=PROJECT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT,
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
    for path in sorted((PROJECT / "src" / "ensemble_bo").rglob("*.py")):
        digest.update(str(path.relative_to(PROJECT)).encode())
        digest.update(path.read_bytes())
    state["sources_sha256"] = digest.hexdigest()[:16]
    return state


def shown(path: Path) -> str:
    """The path relative to the project where it lies inside it."""
    try:
        return str(path.resolve().relative_to(PROJECT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- report


def split_records(
    records: dict[str, dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The finished records and the failed ones."""
    ok = [r for r in records.values() if r.get("status") == "ok"]
    failed = [r for r in records.values() if r.get("status") != "ok"]
    return ok, failed


def report_head(
    title: str,
    path: Path,
    ok: list[dict[str, Any]],
    failed: list[dict[str, Any]],
    description: str,
) -> list[str]:
    """The report's title, source, date, description and the cells' versions."""
    lines = [
        f"# {title}",
        "",
        f"From `{shown(path)}` ({len(ok)} finished cells, {len(failed)} failed), "
        f"reported {datetime.datetime.now().isoformat(timespec='seconds')}.",
        description,
    ]
    versions = {json.dumps(r.get("versions", {}), sort_keys=True) for r in ok}
    for version in sorted(versions):
        items = json.loads(version).items()
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in items) + ".")
    return lines


def failed_lines(failed: list[dict[str, Any]]) -> list[str]:
    """The report's section on failed cells; none without them."""
    if not failed:
        return []
    return [
        "",
        "## Failed cells",
        "",
        *(f"- {r['key']}: `{r.get('error', '?')}`" for r in failed),
    ]


def tool_setups(frame: pd.DataFrame, tool: str) -> list[str]:
    """The distinct setups `tool`'s cells ran with, as JSON (sorted keys), sorted."""
    return sorted(
        {
            json.dumps(setup, sort_keys=True)
            for setup in frame.loc[frame["tool"] == tool, "setup"]
        }
    )


def write_report(text: str, path: Path) -> None:
    """Write the report to `path` and print it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)  # noqa: T201 - a benchmark prints its tables
    log(f"wrote {shown(path)}")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def mean_of(values: pd.Series) -> float | None:
    """The mean of the numeric values; None without any."""
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def wins(x: Any, y: Any) -> float:
    """Paired cells where x's loss is lower than y's, ties counting half."""
    return float(np.sum(x < y) + 0.5 * np.sum(x == y))


def wilcoxon_p(a: np.ndarray, b: np.ndarray, alternative: str = "two-sided") -> float:
    """Wilcoxon signed-rank p of paired losses a vs b (zero differences dropped).

    alternative "less": a's losses tend to be lower; "two-sided": they differ.
    """
    if len(a) == 0:
        return math.nan
    if np.all(a == b):
        return 1.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(stats.wilcoxon(a, b, alternative=alternative).pvalue)
    except ValueError:
        return math.nan
