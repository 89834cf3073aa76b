"""Our optimizers (GP-EI, TPE, random forest) vs Optuna and scikit-optimize on Branin and Hartmann6.

Table 1: simple regret (best value so far - global minimum), median and 25/75%
quantiles over seeds, after 1/3, 2/3 and all of the evaluation budget.
Table 2: seconds for one proposal on Hartmann6 with n observations, ours vs
Optuna's GPSampler: the first proposal of a fresh optimizer, and a proposal
inside a running loop (where both reuse their previous GP fit).

Competitors are dev-only dependencies (benchmarks/requirements-bo.txt):

    .venv/bin/python -m pip install -r benchmarks/requirements-bo.txt
    .venv/bin/python benchmarks/bo_functions.py --quick   # smoke run, about a minute
    .venv/bin/python benchmarks/bo_functions.py           # full run, see README

Writes benchmarks/results/bo_functions.{md,json} (bo_functions_quick.* with
--quick, <name>.* with --name). `--merge` adds the methods run now to the existing results, e.g. to
fill in one row after the rest was measured; `--timing-only --merge` redoes
only Table 2.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# Every method runs single-threaded so that proposal times compare algorithms,
# not how well each library uses the machine's cores.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import datetime
import functools
import hashlib
import json
import math
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ensemble_bo.benchmarking.runner import run_cells
from ensemble_bo.benchmarking.scripts import log, package_versions
from ensemble_bo.benchmarking.tables import markdown_table
from ensemble_bo.core import optimizer as ours
from ensemble_bo.core.grid import ToolCell
from ensemble_bo.core.optimizer_kinds import make_optimizer
from ensemble_bo.core.space import SearchSpace

# Competitors: main() stops with an install hint if a chosen method needs one
# that is missing.
try:
    import torch  # for Optuna's GPSampler

    torch.set_num_threads(1)
except ImportError:
    torch = None
try:
    import optuna
except ImportError:
    optuna = None
try:
    import skopt
except ImportError:
    skopt = None

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    name: str
    bounds: tuple[tuple[float, float], ...]
    f: Callable[[np.ndarray], float]
    f_min: float
    argmin: tuple[float, ...]  # one global minimizer, to check the constants

    @property
    def names(self) -> list[str]:
        return [f"x{i}" for i in range(len(self.bounds))]

    @property
    def space(self) -> SearchSpace:
        return SearchSpace.from_dict(
            {
                name: {"type": "float", "low": low, "high": high}
                for name, (low, high) in zip(self.names, self.bounds, strict=True)
            }
        )

    def at(self, config: dict[str, float]) -> float:
        return float(self.f(np.array([config[name] for name in self.names])))


def branin(x: np.ndarray) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (
        (x[1] - b * x[0] ** 2 + c * x[0] - 6) ** 2 + 10 * (1 - t) * math.cos(x[0]) + 10
    )


_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H6_A = np.array(
    [
        [10, 3, 17, 3.5, 1.7, 8],
        [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8],
        [17, 8, 0.05, 10, 0.1, 14],
    ]
)
_H6_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)


def hartmann6(x: np.ndarray) -> float:
    return -float(_H6_ALPHA @ np.exp(-np.sum(_H6_A * (x - _H6_P) ** 2, axis=1)))


PROBLEMS = {
    "branin": Problem(
        "branin", ((-5.0, 10.0), (0.0, 15.0)), branin, 0.397887, (math.pi, 2.275)
    ),
    "hartmann6": Problem(
        "hartmann6",
        ((0.0, 1.0),) * 6,
        hartmann6,
        -3.32237,
        (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573),
    ),
}


# --------------------------------------------------------------------------- methods
# A runner takes (problem, seed, budget) and returns the objective values in the
# order they were evaluated.


def _make_ours(space: SearchSpace, seed: int, kind: str = "gp", **options):
    """Our optimizer `kind` with 10 initial points (TPE: Optuna's 10 startup trials)."""
    return make_optimizer(space, seed, kind=kind, n_initial=10, **options)


def _ask_tell(optimizer, problem: Problem, budget: int) -> list[float]:
    values = []
    for _ in range(budget):
        suggestion = optimizer.ask()
        value = problem.at(suggestion.config)
        optimizer.tell(suggestion, value)
        values.append(value)
    return values


def run_ours(problem: Problem, seed: int, budget: int, **options) -> list[float]:
    return _ask_tell(_make_ours(problem.space, seed, **options), problem, budget)


def run_random(problem: Problem, seed: int, budget: int) -> list[float]:
    return _ask_tell(ours.RandomSearch(problem.space, seed=seed), problem, budget)


def _optuna_study(sampler, problem: Problem, budget: int) -> list[float]:
    def objective(trial) -> float:
        x = [
            trial.suggest_float(name, low, high)
            for name, (low, high) in zip(problem.names, problem.bounds, strict=True)
        ]
        return float(problem.f(np.array(x)))

    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.optimize(objective, n_trials=budget)
    return [trial.value for trial in study.trials]


def run_optuna_tpe(problem: Problem, seed: int, budget: int) -> list[float]:
    return _optuna_study(optuna.samplers.TPESampler(seed=seed), problem, budget)


def run_optuna_gp(problem: Problem, seed: int, budget: int) -> list[float]:
    return _optuna_study(optuna.samplers.GPSampler(seed=seed), problem, budget)


def run_skopt(problem: Problem, seed: int, budget: int) -> list[float]:
    result = skopt.gp_minimize(
        lambda x: float(problem.f(np.array(x))),
        list(problem.bounds),
        n_calls=budget,
        n_initial_points=10,
        random_state=seed,
    )
    return [float(v) for v in result.func_vals]


def run_skopt_forest(problem: Problem, seed: int, budget: int) -> list[float]:
    result = skopt.forest_minimize(
        lambda x: float(problem.f(np.array(x))),
        list(problem.bounds),
        base_estimator="RF",
        n_calls=budget,
        n_initial_points=10,
        random_state=seed,
    )
    return [float(v) for v in result.func_vals]


@dataclass(frozen=True)
class Method:
    label: str
    run: Callable[[Problem, int, int], list[float]]
    needs: tuple[str, ...] = ()  # competitor packages it imports


METHODS: dict[str, Method] = {
    "random": Method("random search (ours)", run_random),
    "optuna_tpe": Method("Optuna TPE", run_optuna_tpe, ("optuna",)),
    "optuna_gp": Method("Optuna GPSampler", run_optuna_gp, ("optuna", "torch")),
    "skopt_gp": Method("skopt gp_minimize", run_skopt, ("skopt",)),
    "skopt_rf": Method("skopt forest_minimize (RF)", run_skopt_forest, ("skopt",)),
    "ours_tpe": Method(
        "ours tpe (Optuna's TPE adapted)", functools.partial(run_ours, kind="tpe")
    ),
    "ours_rf": Method(
        "ours rf (SMAC-style forest)", functools.partial(run_ours, kind="rf")
    ),
    "ours_ml2": Method(
        "ours GP-EI ML-II", functools.partial(run_ours, hyperparameters="ml2")
    ),
    "ours_map": Method(
        "ours GP-EI MAP", functools.partial(run_ours, hyperparameters="map")
    ),
    "ours_slice": Method(
        "ours GP-EI slice", functools.partial(run_ours, hyperparameters="slice")
    ),
}


def _missing_packages(keys: list[str]) -> list[str]:
    installed = {"optuna": optuna, "skopt": skopt, "torch": torch}
    return sorted(
        {name for key in keys for name in METHODS[key].needs if installed[name] is None}
    )


def run_job(cell: ToolCell, budget: int) -> dict:
    """One method (`tool`) on one function (`dataset`) with one seed, in a worker
    process."""
    warnings.filterwarnings("ignore")  # skopt/optuna chatter, not results
    if optuna is not None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    problem = PROBLEMS[cell.dataset]
    start = time.perf_counter()
    try:
        values = METHODS[cell.tool].run(problem, cell.seed, budget)
    except Exception as error:  # a competitor crashing is a result to report
        return {"error": f"{type(error).__name__}: {error}"}
    wall = time.perf_counter() - start
    regret = np.minimum.accumulate(np.array(values)) - problem.f_min
    return {"values": values, "regret": regret.tolist(), "wall_s": wall}


def run_regret(regret: dict, cells: list[ToolCell], budget: int, workers: int) -> None:
    """Fill regret[function][method][seed] with the runs of run_job."""
    start = time.perf_counter()
    # Regret does not depend on timing, so these runs may share the cores (the
    # workers inherit the thread limits through the environment).
    ended = run_cells(cells, run_job, arguments=(budget,), jobs=workers)
    for done, (cell, run) in enumerate(ended, 1):
        regret[cell.dataset][cell.tool][str(cell.seed)] = run
        outcome = run.get("error") or f"{run['wall_s']:.1f} s"
        log(
            f"[{done}/{len(cells)}] {cell.key}: {outcome} "
            f"({time.perf_counter() - start:.0f} s elapsed)"
        )


# --------------------------------------------------------------------------- timing


# Each timer takes n points X (n, 6) with their values y and returns the seconds
# of one proposal at n observations, from a fresh optimizer (a fresh study):
# - in_loop=False ("first"): all n points preloaded, the proposal fits from scratch;
# - in_loop=True: n - WARM_UPS points preloaded, WARM_UPS untimed proposals
#   evaluated and told to the same optimizer, then the next proposal is timed; it
#   starts from the previous fit, as most proposals of a loop do. Two warm-ups
#   because our GP also restarts from random points on its 2nd (4th, 8th, ...)
#   fit: the timed fit (the 3rd) is an ordinary one.
WARM_UPS = 2


def time_ours(
    hyperparameters: str, X: np.ndarray, y: np.ndarray, seed: int, in_loop: bool
) -> float:
    problem = PROBLEMS["hartmann6"]
    optimizer = _make_ours(problem.space, seed, hyperparameters=hyperparameters)
    m = len(y) - WARM_UPS if in_loop else len(y)
    # tell_many: preloaded points count as the initial design, so ask() fits the GP.
    optimizer.tell_many([problem.space.decode(x) for x in X[:m]], y[:m].tolist())
    for _ in range(WARM_UPS if in_loop else 0):
        warm_up = optimizer.ask()
        optimizer.tell(warm_up, problem.at(warm_up.config))
    start = time.perf_counter()
    suggestion = optimizer.ask()
    seconds = time.perf_counter() - start
    if math.isnan(suggestion.acquisition_value):
        raise RuntimeError(f"ours ({hyperparameters}) did not use the GP at n={len(y)}")
    return seconds


def time_optuna_gp(X: np.ndarray, y: np.ndarray, seed: int, in_loop: bool) -> float:
    problem = PROBLEMS["hartmann6"]
    distributions = {
        name: optuna.distributions.FloatDistribution(0.0, 1.0) for name in problem.names
    }
    # One study, so one GPSampler, which keeps its last kernel parameters.
    study = optuna.create_study(
        direction="minimize", sampler=optuna.samplers.GPSampler(seed=seed)
    )
    m = len(y) - WARM_UPS if in_loop else len(y)
    study.add_trials(
        optuna.trial.create_trial(
            params=dict(zip(problem.names, map(float, x), strict=True)),
            distributions=distributions,
            value=float(value),
        )
        for x, value in zip(X[:m], y[:m], strict=True)
    )
    # Trial parameters are sampled lazily: passing the distributions makes ask()
    # run the GP fit and acquisition optimization, as study.optimize would.
    for _ in range(WARM_UPS if in_loop else 0):
        trial = study.ask(fixed_distributions=distributions)
        study.tell(trial, problem.at(trial.params))
    start = time.perf_counter()
    study.ask(fixed_distributions=distributions)
    return time.perf_counter() - start


TIMERS: dict[str, Callable[[np.ndarray, np.ndarray, int, bool], float]] = {
    "ours_ml2": functools.partial(time_ours, "ml2"),
    "ours_map": functools.partial(time_ours, "map"),
    "optuna_gp": time_optuna_gp,
    "ours_slice": functools.partial(time_ours, "slice"),
}
TIMING_KINDS = {"first": False, "in_loop": True}  # kind -> in_loop
SLICE_TIMING_MAX_N = 200  # and slice only in the loop


def run_timing(keys: list[str], sizes: list[int], repeats: int = 3) -> dict:
    """Seconds of one proposal per kind, method and n; sequential, nothing else runs."""
    warnings.filterwarnings("ignore")
    if optuna is not None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    f = PROBLEMS["hartmann6"].f
    rng = np.random.default_rng(20261122)
    timings: dict = {kind: {key: {} for key in keys} for kind in TIMING_KINDS}
    for key in keys:  # untimed first proposal: imports, torch start-up
        X = rng.random((20, 6))
        TIMERS[key](X, np.array([f(x) for x in X]), 0, True)
    for n in sizes:
        X = rng.random((n, 6))  # the same points for every method
        y = np.array([f(x) for x in X])
        for kind, in_loop in TIMING_KINDS.items():
            for key in keys:
                if key == "ours_slice" and (not in_loop or n > SLICE_TIMING_MAX_N):
                    continue
                # A fresh optimizer per repeat: a second proposal from the same
                # one would start from the first one's fit.
                times = [TIMERS[key](X, y, seed, in_loop) for seed in range(repeats)]
                timings[kind][key][str(n)] = times
                log(f"timing {kind} n={n} {key}: median {np.median(times):.3f} s")
    return timings


# --------------------------------------------------------------------------- report


def _machine() -> dict[str, str]:
    # GNU nproc honours OMP_NUM_THREADS, which this script sets to 1.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    try:
        nproc = subprocess.run(
            ["nproc"], capture_output=True, text=True, check=True, env=env
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        nproc = str(os.cpu_count())
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": nproc, "cpu": cpu, "platform": platform.platform()}


def _source_digest() -> str:
    """Which version of our optimizer was measured (the core changes often)."""
    digest = hashlib.sha256()
    for name in (
        "optimizer.py",
        "gp_model.py",
        "gaussian_process.py",
        "sampled_gaussian_process.py",
        "acquisition.py",
        "tpe.py",
        "random_forest.py",
    ):
        path = Path(ours.__file__).with_name(name)
        if path.exists():
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def regret_table(results: dict) -> str:
    budget = results["meta"]["budget"]
    checkpoints = [budget // 3, 2 * budget // 3, budget]
    header = ["function", "method", "runs"]
    header += [f"regret @{c}: median [q25, q75]" for c in checkpoints]
    header += ["wall s/run"]
    rows, notes = [], []
    for problem, by_method in results["regret"].items():
        for key, by_seed in by_method.items():
            info = results["methods"][key]
            runs = [run for run in by_seed.values() if "regret" in run]
            errors = {run["error"] for run in by_seed.values() if "error" in run}
            for error in sorted(errors):
                notes.append(f"- {info['label']} on {problem} failed: `{error}`")
            if not runs:
                rows.append([problem, info["label"], "0", *["failed"] * 4])
                continue
            curves = np.array([run["regret"] for run in runs])
            cells = []
            for c in checkpoints:
                q25, median, q75 = np.quantile(curves[:, c - 1], [0.25, 0.5, 0.75])
                cells.append(f"{_fmt(median)} [{_fmt(q25)}, {_fmt(q75)}]")
            wall = np.mean([run["wall_s"] for run in runs])
            rows.append(
                [problem, info["label"], f"{len(runs)}/{len(by_seed)}", *cells]
                + [f"{wall:.1f}"]
            )
    text = markdown_table(header, rows)
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def timing_table(results: dict) -> str:
    timing = results["timing"]

    def median(kind: str, key: str, n: int) -> float | None:
        times = timing.get(kind, {}).get(key, {}).get(str(n))
        return float(np.median(times)) if times else None

    def seconds(t: float | None) -> str:
        return f"{t:.3f}" if t is not None else "-"

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}" if a is not None and b is not None else "-"

    sizes = sorted(
        {int(n) for by_key in timing.values() for t in by_key.values() for n in t}
    )

    def cell(kind: str, key: str, n: int) -> str:
        ours, optuna_ = median(kind, key, n), median(kind, "optuna_gp", n)
        return f"{seconds(ours)} ({ratio(ours, optuna_)})" if ours is not None else "-"

    columns = [
        ("first", "ours_ml2", "ML-II"),
        ("first", "ours_map", "MAP"),
        ("in_loop", "ours_ml2", "ML-II"),
        ("in_loop", "ours_map", "MAP"),
        ("in_loop", "ours_slice", "slice"),
    ]
    header = ["n observed", "Optuna first s", "Optuna in-loop s"]
    header += [
        f"ours {label} {kind.replace('_', '-')} s (ratio to Optuna)"
        for kind, _, label in columns
    ]
    rows = [
        [
            str(n),
            seconds(median("first", "optuna_gp", n)),
            seconds(median("in_loop", "optuna_gp", n)),
            *(cell(kind, key, n) for kind, key, _ in columns),
        ]
        for n in sizes
    ]
    return markdown_table(header, rows)


def report(results: dict) -> str:
    meta = results["meta"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    machine = meta["machine"]
    runs = [meta, *meta.get("merged", [])]
    merged = [
        f"Rows added on {m['date']} (sources {m['ours_digest']}) with `{m['command']}`."
        for m in runs[1:]
    ]
    notes = []
    if "optuna_gp" in results["methods"] and any(
        m["versions"].get("greenlet") == "not installed" for m in runs
    ):
        notes.append(
            "- greenlet was not installed for (part of) these results (it is in "
            "benchmarks/requirements-bo.txt): Optuna's GPSampler then maximizes its "
            "acquisition with sequential instead of batched L-BFGS-B: slower "
            "proposals, same method."
        )
    lines = [
        "# Our GP-EI vs Optuna and scikit-optimize on synthetic functions",
        "",
        f"Date: {meta['date']}. Command: `{meta['command']}`.",
        f"Machine: nproc = {machine['nproc']} ({machine['cpu']}), "
        "every method single-threaded (OMP/OpenBLAS/MKL and torch threads = 1).",
        f"Versions: {versions}. Our optimizer sources: sha256 {meta['ours_digest']}.",
        *merged,
    ]
    if results["regret"]:
        lines += [
            "",
            f"## Simple regret after n evaluations ({meta['budget']} evaluations, "
            f"seeds {meta['seeds']}, 10 initial points for every model-based method)",
            "",
            "Simple regret = best value found so far - global minimum (Branin "
            f"{PROBLEMS['branin'].f_min}, Hartmann6 {PROBLEMS['hartmann6'].f_min}); "
            "median over seeds with the 25% and 75% quantiles. Wall time per run is "
            "with 2 runs in parallel and includes the function evaluations.",
            "",
            regret_table(results),
        ]
    if notes:
        lines += ["", "Notes:", *notes]
    if results.get("timing"):
        lines += [
            "",
            "## Seconds per proposal on Hartmann6 with n observations",
            "",
            "First: a fresh optimizer (Optuna: a fresh study) is given n uniformly "
            "random points (`tell_many`; `study.add_trials`) and proposes once, "
            "fitting its GP from scratch. In-loop: it is given the first n - 2 of "
            "them, makes two untimed proposals that are evaluated and told back, and "
            "the next proposal, at n observations, is timed: like most proposals in a "
            "running loop, its fit starts from the previous one (Optuna reuses its "
            "cached kernel parameters; ours warm-starts and adds random restarts only "
            "on fits 1, 2, 4, 8, ..., so O(log t) cold fits over t iterations).",
            "",
            "The same points for every method, median of 3 repeats with a fresh "
            "optimizer each, run alone; Optuna asks with `study.ask(distributions)`; "
            f"slice only in the loop and up to n = {SLICE_TIMING_MAX_N}.",
            "",
            timing_table(results),
        ]
    return "\n".join([*lines, ""])


# --------------------------------------------------------------------------- main


def _check_problems() -> None:
    for problem in PROBLEMS.values():
        value = problem.f(np.array(problem.argmin))
        assert abs(value - problem.f_min) < 1e-4, (problem.name, value)


def _add_timing(results: dict, timing: dict) -> None:
    """Put new timings into results, keeping the stored n a rerun did not cover."""
    stored = results.get("timing", {})  # older results may have another layout
    results["timing"] = {kind: stored.get(kind, {}) for kind in TIMING_KINDS}
    for kind, by_key in timing.items():
        for key, by_n in by_key.items():
            results["timing"][kind].setdefault(key, {}).update(by_n)


def _merge(old: dict, new: dict) -> dict:
    if new["regret"] and old["meta"]["budget"] != new["meta"]["budget"]:
        sys.exit(
            f"--merge: budget {new['meta']['budget']} differs from the stored "
            f"{old['meta']['budget']}; rerun everything instead"
        )
    old["methods"].update(new["methods"])
    for problem, by_method in new["regret"].items():
        for key, by_seed in by_method.items():
            old["regret"].setdefault(problem, {}).setdefault(key, {}).update(by_seed)
    old["meta"].setdefault("merged", []).append(new["meta"])
    return old


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 30 evals")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS))
    parser.add_argument("--functions", nargs="+", choices=list(PROBLEMS))
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--workers", type=int, default=2, help="for the regret runs")
    parser.add_argument(
        "--name", help="results file stem (default bo_functions, _quick with --quick)"
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--no-timing", action="store_true", help="skip Table 2")
    only.add_argument(
        "--timing-only", action="store_true", help="skip Table 1 (the regret runs)"
    )
    parser.add_argument(
        "--merge", action="store_true", help="add to the stored results"
    )
    args = parser.parse_args()
    _check_problems()

    budget = 30 if args.quick else 60
    seeds = args.seeds or (list(range(3)) if args.quick else list(range(10)))
    sizes = [50, 100] if args.quick else [50, 100, 200, 400, 1000]
    keys = args.methods or list(METHODS)
    if args.timing_only:
        keys = [key for key in keys if key in TIMERS]
    problems = [] if args.timing_only else args.functions or list(PROBLEMS)
    stem = args.name or ("bo_functions_quick" if args.quick else "bo_functions")
    missing = _missing_packages(keys)
    if missing:
        sys.exit(
            f"not installed: {', '.join(missing)}. Install the competitors with "
            "`.venv/bin/python -m pip install -r benchmarks/requirements-bo.txt`, "
            "or choose other --methods."
        )

    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "budget": budget,
        "seeds": seeds,
        "versions": package_versions(
            ("numpy", "scipy", "optuna", "scikit-optimize", "torch", "greenlet")
        ),
        "machine": _machine(),
        "ours_digest": _source_digest(),
    }
    results: dict = {
        "meta": meta,
        "methods": {key: {"label": METHODS[key].label} for key in keys},
        "regret": {p: {key: {} for key in keys} for p in problems},
    }

    cells = [
        ToolCell(problem, seed, seed, key)
        for problem in problems
        for key in keys
        for seed in seeds
    ]
    if cells:
        start = time.perf_counter()
        run_regret(results["regret"], cells, budget, args.workers)
        meta["regret_wall_s"] = time.perf_counter() - start

    path_json, path_md = RESULTS / f"{stem}.json", RESULTS / f"{stem}.md"
    if args.merge and path_json.exists():
        results = _merge(json.loads(path_json.read_text()), results)

    def save() -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path_json.write_text(json.dumps(results, indent=1))
        path_md.write_text(report(results))

    save()  # keep the regret runs even if the timing part fails
    timed = [key for key in TIMERS if key in keys]
    if timed and not args.no_timing:
        start = time.perf_counter()
        _add_timing(results, run_timing(timed, sizes))
        meta["timing_wall_s"] = time.perf_counter() - start
        save()
    print(report(results))  # noqa: T201 - a benchmark prints its tables
    log(f"wrote {path_md} and {path_json.name}")


if __name__ == "__main__":
    main()
