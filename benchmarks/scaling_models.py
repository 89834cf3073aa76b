"""Parallel trials of real models: search wall time at 1, 2 and 4 workers, and
two searches side by side (the `models` part of benchmarks/scaling.py).

Histogram gradient boosting (OpenMP threads) and random forests (one thread a
fit) in their regression spaces on a bundled dataset: a SEGOR search of
`budget` trials whose every configuration comes from the seed's Sobol design
(n_initial = budget), so that each worker count trains the same configurations
and the wall times compare the trials, not the proposals. More than one worker
runs in each mode (sync: a worker that finishes gets the next trial, proposed
from the results taken in ticket order, so the same seed gives the same
search; async: the next trial, proposed from every result in). Trials train in
worker processes under the default time limit, as a search's do, each worker
with its share of the cores (core.threads). Every search runs in a process of
its own whose environment holds no OMP_NUM_THREADS, OPENBLAS_NUM_THREADS or
MKL_NUM_THREADS, as a user's shell would; two searches side by side are two
such processes started together, with their cores counted as every search
counts them, or each with LOKY_MAX_CPU_COUNT = cores / 2 (its part).

Run through scaling.py (`--parts models`); this script runs one search when
called with `--search`, and prints its record as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking.scripts import quiet_learners, raw_datasets
from ensemble_bo.benchmarking.tables import fmt, markdown_table
from ensemble_bo.core.evaluation import CrossValidation
from ensemble_bo.core.methods import METHODS
from ensemble_bo.core.optimizer_kinds import make_optimizer
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.runners import trial_runner
from ensemble_bo.core.search import Search
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.settings import ParallelSettings
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import Segor
from ensemble_bo.core.threads import data_cells, trial_threads, usable_cores
from ensemble_bo.core.workers import WorkerEvaluator

PROJECT = Path(__file__).resolve().parents[1]
# What a search's process must not inherit from the benchmark (scaling.py sets
# them to 1 for its sleeping model): its threads are what it gives itself.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Families measured: name -> regression space.
FAMILIES = {
    "hist_gradient_boosting": "hist_gradient_boosting_regressor",
    "random_forest": "random_forest_regressor",
}
# The two-searches cases: each search's LOKY_MAX_CPU_COUNT, as a fraction of
# the cores (None: unset, every search counts every core).
SIDE_BY_SIDE = {"each counts every core": None, "each given half the cores": 0.5}


# --------------------------------------------------------------------------- one search


def _wait_for_each_other(barrier: str | None, parties: int) -> None:
    """Wait until `parties` searches are ready (a file each in `barrier`), so
    that searches side by side start their trials together."""
    if barrier is None:
        return
    folder = Path(barrier)
    (folder / str(os.getpid())).touch()
    while len(list(folder.iterdir())) < parties:
        time.sleep(0.01)


def search_once(
    dataset: str,
    space: str,
    workers: int,
    budget: int,
    seed: int,
    barrier: str | None = None,
    parties: int = 1,
    mode: str = "sync",
) -> dict[str, Any]:
    """A budget-`budget` SEGOR search of `space` on `workers` local workers in
    `mode`, timed from when its workers are up (and the other searches' too)."""

    quiet_learners()
    parameters = default_parameters()
    raw = raw_datasets([dataset], PROJECT)[dataset]
    data = prepare(raw, dataset, parameters["data_processing"], seed)[1]
    options = METHODS["segor"].optimizer_options(parameters["segor"]["optimizer"])
    optimizer = make_optimizer(
        SearchSpace.from_dict(parameters["models"][space]),
        derive_seed(seed, "optimizer"),
        **{**options, "n_initial": budget},
    )
    evaluator = WorkerEvaluator(
        CrossValidation(
            space,
            data.features,
            data.target,
            data.fold_ids,
            random_state=derive_seed(seed, "models"),
        ),
        time_limit=parameters["segor"]["time_limit"],
    )
    settings = ParallelSettings.from_block(
        {"backend": "local", "n_workers": workers, "address": None, "mode": mode}
    )
    with trial_runner(settings, evaluator) as runner:
        # The workers' start-up (a fresh interpreter importing scikit-learn)
        # apart: started here through the evaluators' `_ready_worker` (private).
        evaluators = getattr(runner, "_evaluators", None) or [runner.evaluate]
        with ThreadPoolExecutor(len(evaluators)) as threads:
            list(threads.map(lambda each: each._ready_worker(), evaluators))
        _wait_for_each_other(barrier, parties)
        started = time.perf_counter()
        strategy = Segor(data.target, data.fold_ids, ensemble_size=12)
        result = Search(strategy, optimizer, evaluator).run(
            budget, runner=runner, mode=mode
        )
        wall = time.perf_counter() - started
    trial_seconds = [record.fit_seconds for record in result.history]
    return {
        "dataset": dataset,
        "space": space,
        "workers": workers,
        "mode": mode,
        "budget": budget,
        "rows": int(len(data.target)),
        "features": int(data.features.shape[1]),
        "cores": usable_cores(),
        "threads_per_worker": trial_threads(workers, data_cells(data.features)),
        "wall_seconds": wall,
        "trial_seconds_sum": float(sum(trial_seconds)),
        "failed_trials": int(sum(not ok for ok in result.pool.ok)),
        "configs": [dict(config) for config in result.pool.configs],
    }


# --------------------------------------------------------------------------- cases


def _search_process(
    args: argparse.Namespace,
    space: str,
    workers: int,
    cores: int | None = None,
    barrier: str | None = None,
    parties: int = 1,
    mode: str = "sync",
) -> subprocess.Popen:
    """A search in a process of its own, its thread variables unset."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    if cores is not None:
        env["LOKY_MAX_CPU_COUNT"] = str(cores)
    search = [args.model_dataset, space, workers, args.model_budget, args.seed]
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--search",
        json.dumps([*search, barrier, parties, mode]),
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def _record(
    process: subprocess.Popen, timeout: float | None, **known: Any
) -> dict[str, Any]:
    """The search's record (with `known`); one past `timeout` seconds (start-up
    included) is killed, its wall recorded as the timeout, a lower bound."""
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {**known, "wall_seconds": timeout, "timed_out": True}
    if process.returncode != 0:
        sys.exit(f"a search process failed (exit {process.returncode})")
    return {**known, **json.loads(out.splitlines()[-1]), "timed_out": False}


def models_part(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    """Every family at each worker count (above 1: in each of `args.model_modes`),
    then two 1-worker searches side by side."""
    start = time.perf_counter()
    runs = []
    machine_cores = len(os.sched_getaffinity(0))
    for repeat in range(args.repeats):
        for family, space in FAMILIES.items():
            for workers in args.model_workers:
                # one worker trains one trial at a time in either mode
                for mode in args.model_modes if workers > 1 else ["sync"]:
                    run = _record(
                        _search_process(args, space, workers, mode=mode),
                        args.model_timeout,
                        family=family,
                        case="alone",
                        repeat=repeat,
                        workers=workers,
                        mode=mode,
                        budget=args.model_budget,
                    )
                    runs.append(run)
                    log(
                        f"  {family} q={workers} {mode}: wall "
                        f"{run['wall_seconds']:.2f} s"
                        + (" (timed out)" if run["timed_out"] else "")
                    )
            for case, share in SIDE_BY_SIDE.items():
                cores = None if share is None else max(1, int(machine_cores * share))
                with tempfile.TemporaryDirectory() as barrier:
                    pair = [
                        _search_process(args, space, 1, cores, barrier, parties=2)
                        for _ in range(2)
                    ]
                    both = [
                        _record(
                            process,
                            args.model_timeout,
                            family=family,
                            case=case,
                            repeat=repeat,
                            workers=1,
                            budget=args.model_budget,
                        )
                        for process in pair
                    ]
                runs.extend(both)
                log(
                    f"  {family} two searches, {case}: walls "
                    + ", ".join(f"{run['wall_seconds']:.2f}" for run in both)
                    + " s"
                )
    return {
        "dataset": args.model_dataset,
        "budget": args.model_budget,
        "seed": args.seed,
        "runs": runs,
        "part_seconds": time.perf_counter() - start,
    }


# --------------------------------------------------------------------------- report


def _mode(run: dict[str, Any]) -> str | None:
    """A run's mode where it has more than one worker (records written before
    async was measured are sync); None where trials run one at a time."""
    return run.get("mode", "sync") if run["workers"] > 1 else None


def models_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family, case and mode: median wall and speed-up over one search with
    1 worker.

    Two searches side by side trained 2 x budget trials in the wall time of
    the slower one: their speed-up is 2 x (1 worker's wall) / that wall. A
    search that timed out gives its wall as a lower bound (">").
    """
    rows = []
    for family in dict.fromkeys(run["family"] for run in runs):
        mine = [run for run in runs if run["family"] == family]
        groups: dict[tuple[str, int, str | None], list[dict[str, Any]]] = {}
        for run in mine:
            if run["case"] == "alone":
                key = ("alone", run["workers"], _mode(run))
                groups.setdefault(key, []).append(run)
        for repeat in {run["repeat"] for run in mine}:
            for case in SIDE_BY_SIDE:
                pair = [r for r in mine if r["case"] == case and r["repeat"] == repeat]
                if pair:  # the slower search, the pair's trials
                    slower = max(pair, key=lambda run: run["wall_seconds"])
                    finished = [run for run in pair if not run["timed_out"]]
                    groups.setdefault((case, 2, None), []).append(
                        {
                            **(finished or pair)[0],
                            **slower,
                            "timed_out": any(run["timed_out"] for run in pair),
                            "wall_seconds": slower["wall_seconds"],
                        }
                    )
        medians = {
            key: sorted(group, key=lambda run: run["wall_seconds"])[
                (len(group) - 1) // 2
            ]
            for key, group in groups.items()
        }
        base = medians.get(("alone", 1, None))
        for (case, workers, mode), run in medians.items():
            walls = sorted(r["wall_seconds"] for r in groups[case, workers, mode])
            trials = run["budget"] * (1 if case == "alone" else 2)
            speedup = None
            if base is not None:
                speedup = (
                    base["wall_seconds"] * trials / run["budget"] / run["wall_seconds"]
                )
            finished = [
                r for r in groups[case, workers, mode] if "trial_seconds_sum" in r
            ]
            rows.append(
                {
                    "family": family,
                    "case": case,
                    "workers": workers,
                    "mode": mode,
                    "threads_per_worker": finished[0]["threads_per_worker"]
                    if finished
                    else None,
                    "trials": trials,
                    "wall_seconds": run["wall_seconds"],
                    "timed_out": run["timed_out"],
                    "base_timed_out": base is not None and base["timed_out"],
                    "wall_range": (walls[0], walls[-1]),
                    "repeats": len(walls),
                    "trial_seconds_mean": finished[0]["trial_seconds_sum"]
                    / finished[0]["budget"]
                    if finished
                    else None,
                    "speedup": speedup,
                }
            )
    return rows


def models_table(runs: list[dict[str, Any]]) -> str:
    header = [
        "family",
        "case",
        "trials at once",
        "mode",
        "threads a worker",
        "trials",
        "wall s (range)",
        "trial s (measured, mean)",
        "speed-up over 1 worker",
    ]
    rows = []
    for row in models_rows(runs):
        rng = row["wall_range"]
        # a timed-out wall is a lower bound, and so is a speed-up over it
        speedup = fmt(row["speedup"], 2)
        if row["timed_out"] and not row["base_timed_out"]:
            speedup = "< " + speedup
        elif row["base_timed_out"] and not row["timed_out"]:
            speedup = "> " + speedup
        rows.append(
            [
                row["family"],
                "one search"
                if row["case"] == "alone"
                else f"two searches, {row['case']}",
                str(row["workers"]),
                row["mode"] or "-",
                "-"
                if row["threads_per_worker"] is None
                else str(row["threads_per_worker"]),
                str(row["trials"]),
                (">" if row["timed_out"] else "")
                + f"{row['wall_seconds']:.2f}"
                + (f" ({rng[0]:.1f}-{rng[1]:.1f})" if row["repeats"] > 1 else ""),
                fmt(row["trial_seconds_mean"], 2),
                speedup,
            ]
        )
    return markdown_table(header, rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--search", required=True, help="JSON: search_once's arguments, in order"
    )
    record = search_once(*json.loads(parser.parse_args().search))
    print(json.dumps(record))  # noqa: T201 - read by the benchmark's process


def models_report(part: dict[str, Any], environment: str) -> list[str]:
    """The part's section of the report."""
    first = next(run for run in part["runs"] if not run["timed_out"])
    repeats = max(run["repeat"] for run in part["runs"]) + 1
    return [
        f"## Real models: budget-{part['budget']} searches on {part['dataset']}",
        "",
        environment,
        "",
        f"SEGOR in the histogram gradient boosting and random forest regression "
        f"spaces on {part['dataset']} ({first['rows']} training rows, "
        f"{first['features']} features, seed {part['seed']}), every configuration "
        f"from the seed's Sobol design (n_initial = {part['budget']}), so every "
        "case trains the same configurations; 5-fold CV, the trials in worker "
        "processes (default time limit), each with its share of the cores for "
        "OpenMP and BLAS threads (threads a worker); with more than one, in "
        "each mode, a worker that finishes gets the next trial at once: sync "
        "(proposed from the results taken in ticket order, as many trials "
        "behind as there are workers: the same seed gives the same search) and "
        "async (proposed from every result in). Each search runs in a "
        "process of its own with no OMP_NUM_THREADS in its environment. Wall: "
        "the search's trials, workers' start-up apart, median of "
        f"{repeats} repeat(s). Two searches: two 1-worker searches started "
        "together in two processes, each counting every core, or each with "
        "LOKY_MAX_CPU_COUNT set to half of them; their wall is the slower one's, "
        "for twice the trials. Speed-up: trials per second over one search with "
        "1 worker in the same run.",
        "",
        models_table(part["runs"]),
        "",
    ]
