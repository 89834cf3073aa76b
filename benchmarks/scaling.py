"""Parallel trials inside a search: wall-time scaling with workers, and quality.

Three parts (`--parts`, all by default):

- scaling: a budget-64 SEGOR search (f-m, m = 12, the default GP) in the
  decision_tree_regressor space on concrete, whose model sleeps `--sleep`
  seconds in every fit (0.1 s; 5-fold CV fits it 5 times, so one trial sleeps
  0.5 s) and then fits the configuration's decision tree (a real loss surface
  for the GP, negligible compute), at 1, 2, 4 and 8 workers, backends local and
  dask, modes sync and async (1 worker is the serial baseline, run once per
  backend). The CPU is idle while a trial sleeps, so 2 cores can host 8 workers.
  Reported: wall time of `search.run` only, the start-up of the workers
  (cluster, data, imports) apart, the speedup over the backend's 1 worker, its
  ratio to the workers against the target (0.8, both modes), the overhead
  per trial (wall - 64 x trial sleep / workers) / 64, and the search process's
  own time: in the GP's `ask` and in the rest of the loop (labels, pool,
  ensemble), i.e. the time it was not waiting for a trial.
- quality: SEGOR (decision_tree_regressor) on concrete and boston, SEGO
  (decision_tree_classifier) on pima and wine, budget 50, seeds 0-4: sequential
  vs sync and async with 4 local workers, through `EnsembleSearch` on the
  project's seeded split (33% test, 5 folds). Test loss: MSE of the
  standardized target, error rate for classification. A parallel mode passes
  when |mean(parallel) - mean(sequential)| <= the seed-to-seed std of the
  sequential runs.
- models: real models whose fits use threads (benchmarks/scaling_models.py):
  histogram gradient boosting and random forests on wage, a fixed number of
  trials (`--model-budget`, 16) at 1, 2 and 4 workers (sync and async), and
  two 1-worker searches side by side, each search in a process of its own
  with none of the thread variables this script sets.

    .venv/bin/python benchmarks/scaling.py --parts scaling --repeats 3  # ~8 min a repeat
    nice -n 10 .venv/bin/python benchmarks/scaling.py --parts quality   # ~13 min on 2 cores
    nice -n 10 .venv/bin/python benchmarks/scaling.py --parts models --model-budget 8
    .venv/bin/python benchmarks/scaling.py --report                     # tables from the JSON
    .venv/bin/python benchmarks/scaling.py --quick --output /tmp/scaling  # smoke run, ~2 min

Results go to benchmarks/results/scaling.md and .json (`--output` sets the path
without its suffix; `--quick` writes scaling_quick.*). Running one part keeps
the other parts' results already in the JSON file.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# One BLAS thread everywhere (workers inherit it): 2 cores host up to 8 workers
# and the GP; oversubscribed BLAS threads would only add noise. The models
# part's searches run in processes without them.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scaling_models import models_part, models_report
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.api import EnsembleSearch, default_parameters
from ensemble_bo.benchmarking.runner import run_cells
from ensemble_bo.benchmarking.scripts import (
    log,
    package_versions,
    quiet_learners,
    raw_datasets,
)
from ensemble_bo.benchmarking.store import json_default
from ensemble_bo.benchmarking.tables import fmt, markdown_table, wins
from ensemble_bo.core.evaluation import CrossValidation
from ensemble_bo.core.grid import ToolCell, dataset_task, run_tool_cell
from ensemble_bo.core.methods import METHODS
from ensemble_bo.core.optimizer_kinds import make_optimizer
from ensemble_bo.core.preparation import ModelInput, prepare
from ensemble_bo.core.runners import trial_runner
from ensemble_bo.core.search import Search
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.settings import MODES, ParallelSettings
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import Segor
from ensemble_bo.core.trials import TrialRequest, TrialResult
from ensemble_bo.core.workers import WorkerEvaluator

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
DEFAULT_OUTPUT = RESULTS / "scaling"

N_FOLDS = 5
# Speed-up over one worker, per worker, both modes: sync's was 0.7 while it
# waited for whole batches (it reached 0.69 locally at 8 workers), and
# reached 0.88-0.98 once a free worker got the next proposal.
TARGET_RATIO = 0.8
SCALING_SPACE = "decision_tree_regressor"
# Quality: each task's method and tree space.
QUALITY_SETUP = {
    "regression": ("segor", "decision_tree_regressor"),
    "classification": ("sego", "decision_tree_classifier"),
}
QUALITY_MODES = ("sequential", "sync", "async")
# Whose versions the results name.
PACKAGES = ("ensemble-bo", "scikit-learn", "numpy", "scipy", "dask", "distributed")


# --------------------------------------------------------------------------- model


class SleepyTreeRegressor(RegressorMixin, BaseEstimator):
    """A decision tree whose `fit` first sleeps `sleep` seconds (the CPU idle).

    The tree is the configuration's (deterministic for a random_state), so the
    GP sees a real loss surface; its compute is negligible next to the sleep.
    """

    fits = 0  # fits in this process, to count the fits per trial

    def __init__(
        self,
        max_depth: int | None = None,
        max_features: float = 1.0,
        min_samples_split: int = 2,
        min_samples_leaf: int = 1,
        random_state: int | None = None,
        sleep: float = 0.1,
    ) -> None:
        self.max_depth = max_depth
        self.max_features = max_features
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.sleep = sleep

    def fit(self, X: np.ndarray, y: np.ndarray) -> SleepyTreeRegressor:
        time.sleep(self.sleep)
        type(self).fits += 1
        self.tree_ = DecisionTreeRegressor(
            max_depth=self.max_depth,
            max_features=self.max_features,
            min_samples_split=self.min_samples_split,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        ).fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.tree_.predict(X)


def sleepy_factory(sleep: float) -> Callable[[str, dict[str, Any], int], Any]:
    """The evaluator's model_factory: the configuration's sleepy tree."""

    def build(algorithm: str, params: dict[str, Any], random_state: int) -> Any:
        return SleepyTreeRegressor(**params, random_state=random_state, sleep=sleep)

    return build


def _warm_imports() -> bool:
    """What a Dask worker imports for its first trial, done at start-up."""
    import sklearn.model_selection  # noqa: F401, PLC0415
    import sklearn.tree  # noqa: F401, PLC0415

    import ensemble_bo.core.evaluation  # noqa: F401, PLC0415

    return True


# --------------------------------------------------------------------------- timing


class TimedRunner:
    """A TrialRunner that counts the seconds the search waits for finished trials."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.n_workers = runner.n_workers
        self.waiting = 0.0

    def submit(self, request: TrialRequest) -> None:
        self.runner.submit(request)

    def next_finished(self) -> tuple[int, TrialResult]:
        start = time.perf_counter()
        try:
            return self.runner.next_finished()
        finally:
            self.waiting += time.perf_counter() - start

    def recorded_trials(self) -> list[tuple[TrialRequest, TrialResult]]:
        return self.runner.recorded_trials()


def time_asks(optimizer: Any) -> list[float]:
    """Seconds of every `optimizer.ask` from now on (the GP's proposals)."""
    seconds: list[float] = []
    ask = optimizer.ask

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return ask(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    optimizer.ask = timed
    return seconds


def _start_workers(runner: Any) -> None:
    """Start a runner's workers now, so that their start-up is timed apart.

    Local: the evaluators start their worker processes lazily, on their first
    trial (inside `run`); they are started here through the evaluators'
    `_ready_worker` (private). Dask: every worker imports what a trial needs.
    """
    evaluators = getattr(runner, "_evaluators", None)
    if evaluators:
        with ThreadPoolExecutor(len(evaluators)) as threads:
            list(threads.map(lambda each: each._ready_worker(), evaluators))
    client = getattr(runner, "client", None)
    if client is not None:
        client.run(_warm_imports)


# --------------------------------------------------------------------------- scaling


def scaling_data(seed: int) -> ModelInput:
    parameters = default_parameters()
    raw = raw_datasets(["concrete"], PROJECT)["concrete"]
    return prepare(raw, "concrete", parameters["data_processing"], seed)[1]


def count_fits_per_trial(data: ModelInput, sleep: float) -> int:
    """Fits of one trial (one configuration's whole k-fold evaluation), in-process."""
    evaluator = CrossValidation(
        SCALING_SPACE,
        data.features,
        data.target,
        data.fold_ids,
        model_factory=sleepy_factory(sleep),
    )
    before = SleepyTreeRegressor.fits
    result = evaluator(TrialRequest(0, {"max_depth": 3}))
    if not result.ok:
        raise RuntimeError(f"the sleepy model failed: {result.error}")
    return SleepyTreeRegressor.fits - before


def scaling_run(
    data: ModelInput,
    backend: str,
    workers: int,
    mode: str,
    budget: int,
    sleep: float,
    seed: int,
) -> dict[str, Any]:
    """One budget-`budget` SEGOR search; its timings and trials."""
    parameters = default_parameters()
    options = METHODS["segor"].optimizer_options(parameters["segor"]["optimizer"])
    optimizer = make_optimizer(
        SearchSpace.from_dict(parameters["models"][SCALING_SPACE]),
        derive_seed(seed, "optimizer"),
        **options,
    )
    asks = time_asks(optimizer)
    evaluator = WorkerEvaluator(
        CrossValidation(
            SCALING_SPACE,
            data.features,
            data.target,
            data.fold_ids,
            random_state=derive_seed(seed, "models"),
            model_factory=sleepy_factory(sleep),
        ),
        time_limit=None,
    )
    settings = ParallelSettings.from_block(
        {"backend": backend, "n_workers": workers, "address": None, "mode": mode}
    )
    opened = time.perf_counter()
    with trial_runner(settings, evaluator) as runner:
        _start_workers(runner)
        started = time.perf_counter()
        timed = TimedRunner(runner)
        search = Search(
            Segor(data.target, data.fold_ids, ensemble_size=12), optimizer, evaluator
        )
        result = search.run(budget, runner=timed, mode=mode)
        ended = time.perf_counter()
    closed = time.perf_counter()
    wall = ended - started
    trial_seconds = [record.fit_seconds for record in result.history]
    return {
        "backend": backend,
        "workers": workers,
        "mode": mode,
        "budget": budget,
        "startup_seconds": started - opened,
        "shutdown_seconds": closed - ended,
        "wall_seconds": wall,
        "search_seconds": result.search_seconds,
        "waiting_seconds": timed.waiting,
        "driver_seconds": wall - timed.waiting,
        "ask_seconds": float(sum(asks)),
        "asks": len(asks),
        "ask_max_seconds": float(max(asks)),
        "trial_seconds_mean": float(np.mean(trial_seconds)),
        "trial_seconds_sum": float(np.sum(trial_seconds)),
        "failed_trials": int(np.sum(~result.pool.ok)),
        "final_cv_loss": float(result.history[-1].ensemble_loss),
        "configs": [dict(config) for config in result.pool.configs],
    }


def scaling_part(args: argparse.Namespace) -> dict[str, Any]:
    data = scaling_data(args.seed)
    fits = count_fits_per_trial(data, args.sleep)
    trial_sleep = fits * args.sleep
    log(
        f"scaling: {fits} fits per trial x {args.sleep:g} s = {trial_sleep:g} s "
        f"of sleep per trial, budget {args.budget}"
    )
    cases = []
    for backend in args.backends:
        for workers in args.workers:
            for mode in ("sync",) if workers == 1 else MODES:
                cases.append((backend, workers, mode))
    runs = []
    start = time.perf_counter()
    for repeat in range(args.repeats):
        for backend, workers, mode in cases:
            run = scaling_run(
                data, backend, workers, mode, args.budget, args.sleep, args.seed
            )
            run["repeat"] = repeat
            runs.append(run)
            log(
                f"  {backend} {mode} q={workers}: wall {run['wall_seconds']:.2f} s, "
                f"start-up {run['startup_seconds']:.2f} s, asks "
                f"{run['ask_seconds']:.2f} s ({time.perf_counter() - start:.0f} s "
                "elapsed)"
            )
    return {
        "dataset": "concrete",
        "space": SCALING_SPACE,
        "seed": args.seed,
        "budget": args.budget,
        "sleep_per_fit": args.sleep,
        "fits_per_trial": fits,
        "trial_sleep": trial_sleep,
        "rows": int(len(data.target)),
        "runs": runs,
        "part_seconds": time.perf_counter() - start,
        **_environment(),
    }


def _median_runs(runs: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The run of median wall time of every (backend, workers, mode)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["backend"], run["workers"], run["mode"]), []).append(run)
    chosen = {}
    for key, group in groups.items():
        ordered = sorted(group, key=lambda run: run["wall_seconds"])
        chosen[key] = {
            **ordered[(len(ordered) - 1) // 2],
            "wall_range": (ordered[0]["wall_seconds"], ordered[-1]["wall_seconds"]),
            "repeats": len(ordered),
        }
    return chosen


def scaling_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (backend, workers, mode): speedups, targets, overheads."""
    runs = _median_runs(part["runs"])
    serial = runs.get(("local", 1, "sync"))
    budget, trial_sleep = part["budget"], part["trial_sleep"]
    rows = []
    for (backend, workers, mode), run in runs.items():
        baseline = runs.get((backend, 1, "sync"))
        ideal = budget * trial_sleep / workers
        speedup = baseline["wall_seconds"] / run["wall_seconds"] if baseline else None
        row = {
            "backend": backend,
            "workers": workers,
            "mode": mode,
            "startup_seconds": run["startup_seconds"],
            "wall_seconds": run["wall_seconds"],
            "wall_range": run["wall_range"],
            "repeats": run["repeats"],
            "ideal_seconds": ideal,
            "speedup": speedup,
            "speedup_vs_serial": serial["wall_seconds"] / run["wall_seconds"]
            if serial
            else None,
            "ratio": None if speedup is None else speedup / workers,
            "target": None if workers == 1 else TARGET_RATIO,
            "overhead_ms_per_trial": 1000 * (run["wall_seconds"] - ideal) / budget,
            # beyond the trials' own measured seconds (sleep, fits, predictions)
            "scheduler_ms_per_trial": 1000
            * (run["wall_seconds"] - run["trial_seconds_sum"] / workers)
            / budget,
            "ask_ms": 1000 * run["ask_seconds"] / max(run["asks"], 1),
            "ask_seconds": run["ask_seconds"],
            "driver_seconds": run["driver_seconds"],
            "trial_seconds_mean": run["trial_seconds_mean"],
            "failed_trials": run["failed_trials"],
            "same_as_local": None,
        }
        if row["target"] is not None:
            row["met"] = row["ratio"] >= row["target"]
        if backend != "local" and mode == "sync":
            local = runs.get(("local", workers, "sync"))
            if local is not None:
                row["same_as_local"] = local["configs"] == run["configs"]
        rows.append(row)
    order = {"local": 0, "dask": 1, "sync": 0, "async": 1}
    rows.sort(
        key=lambda r: (order.get(r["backend"], 9), r["workers"], order[r["mode"]])
    )
    return rows


def scaling_table(part: dict[str, Any]) -> str:
    header = [
        "backend",
        "mode",
        "workers",
        "start-up s",
        "search wall s (range)",
        "ideal s",
        "speedup",
        "speedup / workers",
        "target",
        "overhead ms/trial",
        "beyond measured trials ms/trial",
        "GP ask ms (total s)",
        "search process busy s",
        "trial s (measured)",
    ]
    rows = []
    for row in scaling_rows(part):
        if row["target"] is None:
            verdict = "baseline"
        else:
            verdict = f"{row['target']:g}: {'met' if row['met'] else '**missed**'}"
        mode = "serial" if row["workers"] == 1 else row["mode"]
        same = row["same_as_local"]
        if same is not None:
            mode += " (= local)" if same else " (**differs from local**)"
        rows.append(
            [
                row["backend"],
                mode,
                str(row["workers"]),
                f"{row['startup_seconds']:.2f}",
                f"{row['wall_seconds']:.2f}"
                + (
                    f" ({row['wall_range'][0]:.1f}-{row['wall_range'][1]:.1f})"
                    if row["repeats"] > 1
                    else ""
                ),
                f"{row['ideal_seconds']:.1f}",
                fmt(row["speedup"], 2),
                fmt(row["ratio"], 2),
                verdict,
                f"{row['overhead_ms_per_trial']:.0f}",
                f"{row['scheduler_ms_per_trial']:.0f}",
                f"{row['ask_ms']:.0f} ({row['ask_seconds']:.1f})",
                f"{row['driver_seconds']:.1f}",
                f"{row['trial_seconds_mean']:.3f}",
            ]
        )
    return markdown_table(header, rows)


# --------------------------------------------------------------------------- quality


def fit_quality(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series
) -> tuple[Any, dict[str, Any]]:
    """The cell's search, sequential or with its workers in its mode (`tool`)."""
    setup = dict(cell.setup)
    mode = cell.tool
    workers = 1 if mode == "sequential" else setup["workers"]
    params = None
    if mode != "sequential":
        params = {
            "parallel": {
                "backend": "local",
                "n_workers": workers,
                "address": None,
                "mode": mode,
            }
        }
    search = EnsembleSearch(
        method=setup["method"],
        model=setup["model"],
        budget=setup["budget"],
        cv=N_FOLDS,
        random_state=cell.seed,
        # no conformal fold models: the search's scaling is measured
        params={**(params or {}), "conformal": False},
    )
    start = time.perf_counter()
    search.fit(X, y)
    fit_seconds = time.perf_counter() - start
    result = search.result_
    return search, {
        "method": setup["method"],
        "model": setup["model"],
        "mode": mode,
        "workers": workers,
        "budget": setup["budget"],
        "cv_loss": float(search.cv_loss_),
        "trials": len(result.pool),
        "failed_trials": int(np.sum(~result.pool.ok)),
        "search_seconds": float(result.search_seconds),
        "fit_seconds": fit_seconds,
    }


def quality_cell(
    cell: ToolCell, raw: pd.DataFrame, data_processing: dict[str, Any]
) -> dict[str, Any]:
    """One search on the dataset's split of the cell's seed; its test loss."""
    quiet_learners()
    return run_tool_cell(cell, raw, data_processing, fit_quality)


def quality_part(args: argparse.Namespace) -> dict[str, Any]:
    data_processing = default_parameters()["data_processing"]
    frames = raw_datasets(args.datasets, PROJECT)
    cells = []
    for dataset, frame in frames.items():
        task = dataset_task(frame, dataset, data_processing)
        method, model = QUALITY_SETUP[task]
        setup = {"budget": args.quality_budget, "method": method, "model": model}
        for seed in args.seeds:
            for mode in QUALITY_MODES:
                workers = {"workers": 4} if mode != "sequential" else {}
                cells.append(
                    ToolCell(
                        dataset,
                        seed,
                        seed,
                        mode,
                        tuple(sorted({**setup, **workers}.items())),
                        task=task,
                    )
                )
    records = []
    start = time.perf_counter()
    # One after the other, in this process: each search's workers get the cores.
    ended = run_cells(
        cells, quality_cell, frames=frames, arguments=(data_processing,), jobs=1
    )
    for cell, record in ended:
        if record["status"] != "ok":
            sys.exit(f"{cell.key}: {record['error']}\n{record.get('traceback', '')}")
        records.append(record)
        log(
            f"[{len(records)}/{len(cells)}] {cell.key}: test loss "
            f"{record['test_loss']:.4f}, search {record['search_seconds']:.1f} s "
            f"({time.perf_counter() - start:.0f} s elapsed)"
        )
    return {
        "datasets": list(args.datasets),
        "seeds": list(args.seeds),
        "budget": args.quality_budget,
        "workers": 4,
        "backend": "local",
        "cells": records,
        "part_seconds": time.perf_counter() - start,
        **_environment(),
    }


def quality_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    """Per dataset: each mode's mean test loss; the parallel modes against the
    sequential mean and its seed-to-seed std."""
    rows = []
    for dataset in part["datasets"]:
        cells = [c for c in part["cells"] if c["dataset"] == dataset]
        if not cells:
            continue
        by_mode = {
            mode: [c["test_loss"] for c in cells if c["mode"] == mode]
            for mode in QUALITY_MODES
        }
        sequential = by_mode["sequential"]
        spread = statistics.stdev(sequential) if len(sequential) > 1 else math.nan
        row = {
            "dataset": dataset,
            "task": cells[0]["task"],
            "method": cells[0]["method"],
            "seeds": len(sequential),
            "sequential_std": spread,
        }
        for mode, losses in by_mode.items():
            row[f"{mode}_mean"] = float(np.mean(losses)) if losses else math.nan
            row[f"{mode}_search_seconds"] = float(
                np.mean([c["search_seconds"] for c in cells if c["mode"] == mode])
            )
        for mode in MODES:
            difference = row[f"{mode}_mean"] - row["sequential_mean"]
            row[f"{mode}_difference"] = difference
            if not math.isfinite(spread):
                verdict = "-"
            elif abs(difference) <= spread:
                verdict = "within"
            elif difference > 0:
                verdict = "worse by more"
            else:
                verdict = "better by more"
            row[f"{mode}_verdict"] = verdict
            pairs = [
                (a["test_loss"], b["test_loss"])
                for a in cells
                if a["mode"] == mode
                for b in cells
                if b["mode"] == "sequential" and b["seed"] == a["seed"]
            ]
            row[f"{mode}_wins"] = wins([a for a, _ in pairs], [b for _, b in pairs])
        rows.append(row)
    return rows


def quality_table(part: dict[str, Any]) -> str:
    header = [
        "dataset",
        "method",
        "sequential",
        "seed std (sequential)",
        "sync q=4",
        "sync - seq.",
        "async q=4",
        "async - seq.",
        "search s seq. / sync / async",
    ]
    rows = []
    for row in quality_rows(part):
        n = row["seeds"]
        rows.append(
            [
                row["dataset"],
                row["method"],
                f"{row['sequential_mean']:.4f}",
                f"{row['sequential_std']:.4f}",
                f"{row['sync_mean']:.4f}",
                f"{row['sync_difference']:+.4f} ({row['sync_verdict']}; "
                f"wins {row['sync_wins']:g}/{n})",
                f"{row['async_mean']:.4f}",
                f"{row['async_difference']:+.4f} ({row['async_verdict']}; "
                f"wins {row['async_wins']:g}/{n})",
                f"{row['sequential_search_seconds']:.1f} / "
                f"{row['sync_search_seconds']:.1f} / {row['async_search_seconds']:.1f}",
            ]
        )
    return markdown_table(header, rows)


# --------------------------------------------------------------------------- report


def _environment() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "versions": package_versions(PACKAGES),
        "nproc": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "niceness": os.nice(0),
        "machine": platform.machine(),
    }


def _environment_line(part: dict[str, Any]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in part["versions"].items())
    load = ", ".join(f"{x:.2f}" for x in part["load_average"])
    return (
        f"Run {part['date']} on {part['nproc']} cores ({part['machine']}), nice "
        f"{part['niceness']}, load average at the end {load}, "
        f"{part['part_seconds']:.0f} s; {versions}."
    )


def report(results: dict[str, Any]) -> str:
    lines = ["# Parallel trials: scaling and quality at equal budget", ""]
    scaling = results.get("scaling")
    if scaling:
        lines += [
            f"## Scaling: budget-{scaling['budget']} SEGOR search, sleeping model",
            "",
            _environment_line(scaling),
            "",
            f"SEGOR f-m (m = 12, default GP) in the {scaling['space']} space on "
            f"{scaling['dataset']} ({scaling['rows']} training rows, seed "
            f"{scaling['seed']}); every fit sleeps {scaling['sleep_per_fit']:g} s "
            f"then fits the configuration's decision tree: "
            f"{scaling['fits_per_trial']} fits per trial (5-fold cross_val_predict), "
            f"so **{scaling['trial_sleep']:g} s of sleep per trial**. Search wall: "
            "`search.run` only, the run of median wall time of "
            f"{max(r['repeat'] for r in scaling['runs']) + 1} repeat(s) (range in "
            "brackets; every other column is that run's); start-up (cluster, the data sent to it, worker processes "
            "and their imports) apart. Speedup: over the same backend's 1 worker "
            "(local: the serial runner, in the search's process; dask: one Dask "
            f"worker). Ideal: {scaling['budget']} x {scaling['trial_sleep']:g} s / "
            "workers; overhead per trial: (wall - ideal) / budget. GP ask: mean "
            "ms per proposal (total s); beyond measured trials: (wall - the trials' "
            "summed measured seconds / workers) / budget, the overhead net of the "
            "trials' own compute; search process busy: wall minus the time "
            "it waited for finished trials (asks, labels, pool and ensemble "
            "updates). Trial s: mean fit_seconds of a trial as measured where it "
            "ran. Dask sync rows say whether they trained the same configurations "
            "as local sync with the same workers.",
            "",
            scaling_table(scaling),
            "",
        ]
    quality = results.get("quality")
    if quality:
        lines += [
            f"## Quality at equal budget ({quality['budget']} trials, "
            f"{len(quality['seeds'])} seeds)",
            "",
            _environment_line(quality),
            "",
            "SEGOR (decision_tree_regressor) for regression, SEGO "
            "(decision_tree_classifier, squared margin, majority vote) for "
            "classification, default conf otherwise (time_limit 600 s, so even the "
            "sequential search trains in a worker process), through "
            "`EnsembleSearch` on the project's split of each seed (33% test, 5 "
            f"folds; seeds {', '.join(map(str, quality['seeds']))}). Sequential: one "
            f"trial at a time; sync / async: {quality['workers']} local workers. "
            "Mean test loss over the seeds: MSE of the standardized target "
            "(regression), error rate (classification). Verdict: |mean(parallel) - "
            "mean(sequential)| against the sample std of the sequential seeds; wins: "
            "seeds where the parallel mode's test loss is lower than sequential's "
            "on the same split (ties half). Search s: mean seconds of the search "
            f"(refit excluded) on {quality['nproc']} cores, where the trees train "
            "in milliseconds: nothing to gain from workers there.",
            "",
            quality_table(quality),
            "",
        ]
    models = results.get("models")
    if models:
        lines += models_report(models, _environment_line(models))
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts", nargs="+", choices=("scaling", "quality", "models"), default=None
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--budget", type=int, default=None, help="scaling: 64")
    parser.add_argument(
        "--sleep", type=float, default=0.1, help="seconds each fit sleeps"
    )
    parser.add_argument("--workers", nargs="+", type=int, default=None)
    parser.add_argument(
        "--backends", nargs="+", choices=("local", "dask"), default=["local", "dask"]
    )
    parser.add_argument("--repeats", type=int, default=1, help="median of repeats")
    parser.add_argument("--seed", type=int, default=0, help="scaling search's seed")
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--quality-budget", type=int, default=None, help="50")
    parser.add_argument("--model-dataset", default="wage", help="models: wage")
    parser.add_argument("--model-budget", type=int, default=None, help="models: 16")
    parser.add_argument("--model-workers", nargs="+", type=int, default=None)
    parser.add_argument(
        "--model-modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="models: the modes of more than one worker (sync async)",
    )
    parser.add_argument(
        "--model-timeout", type=float, default=None, help="models: s a search (none)"
    )
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--report", action="store_true", help="only re-read the JSON and report"
    )
    args = parser.parse_args()
    quick = args.quick
    args.parts = args.parts or ["scaling", "quality", "models"]
    args.budget = args.budget or (16 if quick else 64)
    args.workers = args.workers or ([1, 2, 4] if quick else [1, 2, 4, 8])
    args.datasets = args.datasets or (
        ["concrete", "pima"] if quick else ["concrete", "boston", "pima", "wine"]
    )
    args.seeds = args.seeds or ([0, 1] if quick else [0, 1, 2, 3, 4])
    args.quality_budget = args.quality_budget or (20 if quick else 50)
    args.model_budget = args.model_budget or (4 if quick else 16)
    args.model_workers = args.model_workers or ([1, 2] if quick else [1, 2, 4])
    output = args.output or (RESULTS / "scaling_quick" if quick else DEFAULT_OUTPUT)
    output = output.with_suffix("")
    json_path, md_path = output.with_suffix(".json"), output.with_suffix(".md")
    quiet_learners()

    results: dict[str, Any] = {}
    if json_path.exists():
        results = json.loads(json_path.read_text())
    parts = {
        "scaling": scaling_part,
        "quality": quality_part,
        "models": lambda args: {**models_part(args, log), **_environment()},
    }
    for part in [] if args.report else args.parts:
        results[part] = parts[part](args)
        results[part]["quick"] = quick
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=1, default=json_default))
    text = report(results)
    md_path.write_text(text)
    print(text)  # noqa: T201 - a benchmark prints its tables
    log(f"wrote {md_path} and {json_path}")


if __name__ == "__main__":
    main()
