"""Multi-fidelity SEGOR vs full-fidelity SEGOR vs Optuna Hyperband + Caruana.

Every cell is one (dataset, space, repetition r, tool, time budget T): the
project's own test split of repetition r (the benchmark pipeline's
`split_dataset` with seed repetition_seed(0, r), test_size from conf), the
tool fitted on the training part with T seconds of search, then scored on the
test part: MSE of the target standardized by the training part's mean and std
(SEGOR s.4). Spaces: the slow ones, `mlp_regressor` and `svr`. Tools:

- segor: full-fidelity SEGOR, `EnsembleSearch(method="segor", model=space,
  budget=10000, time_budget=T, cv=5, random_state=r)`, `fidelity.scheduler: none`;
- segor_sh, segor_hyperband, segor_bohb: the same with `segor.fidelity`
  successive_halving / hyperband / bohb on the CV folds (min_resource 1, eta 3);
- segor_hyperband_rows: Hyperband on each fold's training rows (1/9 to 1, eta 3);
- optuna_hb: Optuna's TPESampler(seed=r, multivariate=True) with its
  HyperbandPruner(min_resource=1, max_resource=5, reduction_factor=3) in the
  same space (our model factory, our folds: fold i's running CV MSE reported
  at step i), `study.optimize(timeout=T)`; then Caruana's greedy selection
  with replacement (the project's `greedy_selection_with_replacement`, with
  the `posthoc` block's defaults) over the complete trials' out-of-fold
  predictions, and the selected members refit on the training part.

Both sides see the same folds: those `EnsembleSearch(cv=5, random_state=r)`
assigns (`assign_folds` with derive_seed(r, "cv folds")). The refit (and for
Optuna the selection) is not counted in T, as for ours. Everything runs
single-threaded. Optuna is a project dependency; no extra install:

    .venv/bin/python benchmarks/multi_fidelity.py --jobs 2          # full grid, ~2 h
    .venv/bin/python benchmarks/multi_fidelity.py --report          # tables only
    .venv/bin/python benchmarks/multi_fidelity.py --datasets concrete --spaces svr \\
        --repetitions 1 --time-budgets 10 --output /tmp/mf_smoke.jsonl   # smoke run

Each finished cell is appended as one JSON line to
benchmarks/results/multi_fidelity.jsonl; a rerun skips the cells already
there (failed cells are run again), so a killed run resumes. Cells run by
budget, the smallest T first. The report goes to multi_fidelity.md next to
the JSON lines (and is printed).
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# Single-threaded for every tool (our evaluation worker processes inherit this),
# so that equal wall time means equal CPU.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd

from ensemble_bo.api import EnsembleSearch, default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.benchmarking.store import CellLines
from ensemble_bo.core.encoding import categorical_columns
from ensemble_bo.core.estimator import build_ensemble_model
from ensemble_bo.core.evaluation import out_of_fold_predictions
from ensemble_bo.core.grid import (
    ToolCell,
    dataset_task,
    repetition_seed,
    run_tool_cell,
)
from ensemble_bo.core.losses import objective as loss_objective
from ensemble_bo.core.preparation import assign_folds, make_model_input
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.selection.greedy import greedy_selection_with_replacement
from ensemble_bo.core.space import CategoricalParameter, ConstantParameter, SearchSpace
from ensemble_bo.core.tpe import optuna_distributions
from ensemble_bo.core.zoo import make_model, quiet_iteration_caps

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "multi_fidelity.jsonl"

DEFAULT_DATASETS = ["concrete", "wage", "boston", "diabetes"]
DEFAULT_SPACES = ["mlp_regressor", "svr"]
# A large budget of configurations: the time budget is what ends our searches.
DEFAULT_BUDGET = 10_000
N_FOLDS = 5
ETA = 3

# Our tools: the `segor.fidelity` block each runs with.
FIDELITY_BLOCKS: dict[str, dict[str, Any]] = {
    "segor": {"scheduler": "none"},
    "segor_sh": {
        "scheduler": "successive_halving",
        "resource": "folds",
        "min_resource": 1,
        "max_resource": None,  # the number of CV folds
        "eta": ETA,
    },
    "segor_hyperband": {
        "scheduler": "hyperband",
        "resource": "folds",
        "min_resource": 1,
        "max_resource": None,
        "eta": ETA,
    },
    "segor_bohb": {
        "scheduler": "bohb",
        "resource": "folds",
        "min_resource": 1,
        "max_resource": None,
        "eta": ETA,
    },
    "segor_hyperband_rows": {
        "scheduler": "hyperband",
        "resource": "rows",
        "min_resource": 1 / 9,
        "max_resource": 1.0,
        "eta": ETA,
    },
}
TOOLS = (*FIDELITY_BLOCKS, "optuna_hb")
MULTI_FIDELITY = ("segor_sh", "segor_hyperband", "segor_bohb", "segor_hyperband_rows")
TOOL_LABELS = {
    "segor": "SEGOR, full fidelity",
    "segor_sh": "SEGOR + successive halving (folds)",
    "segor_hyperband": "SEGOR + Hyperband (folds)",
    "segor_bohb": "SEGOR + BOHB (folds)",
    "segor_hyperband_rows": "SEGOR + Hyperband (rows)",
    "optuna_hb": "Optuna TPE + Hyperband pruner + Caruana",
}
# Whose versions every record names.
PACKAGES = ("optuna", "scikit-learn", "numpy", "scipy", "pandas", "ensemble-bo")


# --------------------------------------------------------------------------- cells


def tool_setup(tool: str, args: argparse.Namespace, posthoc: dict) -> dict[str, Any]:
    """What a tool runs with (checked against the stored cells on resume)."""
    if tool == "optuna_hb":
        return {
            "sampler": "TPESampler(seed=r, multivariate=True)",
            "pruner": {
                "min_resource": 1,
                "max_resource": N_FOLDS,
                "reduction_factor": ETA,
            },
            "n_folds": N_FOLDS,
            "selection": {
                "loss": posthoc["loss"],
                "max_size": posthoc["max_size"],
                "warm_start": posthoc["warm_start"],
            },
        }
    return {
        "method": "segor",
        "budget": args.budget,
        "cv": N_FOLDS,
        "fidelity": FIDELITY_BLOCKS[tool],
    }


# --------------------------------------------------------------------------- tools


def fit_segor(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series
) -> tuple[Any, dict[str, Any]]:
    setup = dict(cell.setup)
    fidelity = dict(setup["fidelity"])
    search = EnsembleSearch(
        method="segor",
        model=cell.space,
        budget=setup["budget"],
        time_budget=cell.time_budget,
        cv=setup["cv"],
        # no conformal fold models: the peers compared make none
        params={"segor": {"fidelity": fidelity}, "conformal": False},
        random_state=cell.seed,
    )
    start = time.perf_counter()
    search.fit(X, y)
    fit_seconds = time.perf_counter() - start
    result = search.result_
    history = result.history
    metrics = result.search_metrics
    return search, {
        "fit_wall_seconds": fit_seconds,
        "search_seconds": float(result.search_seconds),
        "refit_seconds": float(search.refit_seconds_),
        "n_trials": len(result.pool),  # configurations that reached the pool
        "trials_failed": int((~result.pool.ok).sum()),
        "fidelity_full_equivalents": metrics.get("fidelity_full_equivalents"),
        "fidelity_configurations": metrics.get("fidelity_configurations"),
        "fidelity_brackets": metrics.get("fidelity_brackets"),
        "stopped_by": result.stopped_by,
        "ensemble_size": int(history[-1].ensemble_size)
        if history
        else len(result.members),
        "ensemble_members_distinct": len(search.members_),
        "cv_loss": float(search.cv_loss_),
    }


class _CaruanaEnsemble:
    """The refit Caruana ensemble: predict() like EnsembleSearch's."""

    def __init__(self, model: Any):
        self.model = model

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.model.predict(X)


def _optuna_input(cell: ToolCell, X: pd.DataFrame, y: pd.Series) -> dict[str, Any]:
    """The data exactly as EnsembleSearch.fit prepares them: the same encoded
    features, standardized target and folds (cv=5, random_state=r)."""
    features = X.rename(columns=str).reset_index(drop=True)
    target = y.reset_index(drop=True).rename("target")
    dataset = {
        "name": "X",
        "task": "regression",
        "target": "target",
        "categorical_columns": categorical_columns(features),
    }
    fold_ids = assign_folds(
        target,
        "regression",
        dict(cell.setup)["n_folds"],
        derive_seed(cell.seed, "cv folds"),
    )
    return {
        "features": features,
        "target": target,
        "data": make_model_input(features, target, dataset, fold_ids),
        "model_seed": derive_seed(cell.seed, "models"),
    }


def _suggest(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Our configuration of `space` (its active parameters) from the trial's
    suggestions, in the distributions `optuna_distributions` gives (categorical
    parameters as choice indices), as our `tpe` optimizer decodes them."""
    distributions = optuna_distributions(space)
    config: dict[str, Any] = {}
    for parameter in space.parameters:
        if not space.is_active(parameter, config):
            continue
        if isinstance(parameter, ConstantParameter):
            config[parameter.name] = parameter.value
            continue
        distribution = distributions[parameter.name]
        if isinstance(parameter, CategoricalParameter):
            index = trial.suggest_categorical(parameter.name, distribution.choices)
            config[parameter.name] = parameter.choices[index]
        elif isinstance(distribution, optuna.distributions.IntDistribution):
            config[parameter.name] = trial.suggest_int(
                parameter.name,
                distribution.low,
                distribution.high,
                log=distribution.log,
            )
        else:
            config[parameter.name] = trial.suggest_float(
                parameter.name,
                distribution.low,
                distribution.high,
                log=distribution.log,
            )
    return config


class _PrunedCV:
    """Optuna's objective: fold by fold CV of our model, the running CV MSE
    reported at step i (folds done), pruned where the pruner says so. Keeps
    every trial's configuration, the complete trials' out-of-fold predictions
    and the failed trials' errors."""

    def __init__(self, algorithm: str, space: SearchSpace, data: Any, model_seed: int):
        self.model_name, self.space, self.data = algorithm, space, data
        self.model_seed = model_seed
        self.folds = np.unique(data.fold_ids)
        self.configs: dict[int, dict[str, Any]] = {}
        self.predictions: dict[int, np.ndarray] = {}
        self.errors: dict[int, str] = {}

    def _fold(self, config: dict[str, Any], fold: int) -> np.ndarray:
        """Fold `fold`'s predictions (its rows; the others NaN), fitted on the rest."""
        model = make_model(
            self.model_name,
            config,
            self.model_seed,
            self.data.encoding.categorical_features,
        )
        with quiet_iteration_caps():
            part, _ = out_of_fold_predictions(
                model,
                self.data.features,
                self.data.target,
                self.data.fold_ids,
                folds=[fold],
                random_state=self.model_seed,
            )
        if not np.all(np.isfinite(part[self.data.fold_ids == fold])):
            raise ValueError("the model predicted NaN or infinite values")
        return part

    def __call__(self, trial: optuna.Trial) -> float:
        config = _suggest(trial, self.space)
        self.configs[trial.number] = config
        target, fold_ids = self.data.target, self.data.fold_ids
        predictions = np.full(len(target), np.nan)
        predicted = np.zeros(len(target), dtype=bool)
        running = math.nan
        for step, fold in enumerate(self.folds, 1):
            try:
                part = self._fold(config, int(fold))
            except Exception as error:  # noqa: BLE001 - a failed trial; the study goes on
                self.errors[trial.number] = f"{type(error).__name__}: {error}"
                return math.nan  # Optuna records a NaN value as FAIL
            rows = fold_ids == fold
            predictions[rows] = part[rows]
            predicted |= rows
            running = float(
                np.mean(np.square(predictions[predicted] - target[predicted]))
            )
            trial.report(running, step)
            if step < len(self.folds) and trial.should_prune():
                raise optuna.TrialPruned
        self.predictions[trial.number] = predictions
        return running


def _caruana_refit(
    objective: _PrunedCV, complete: list[int], prepared: dict[str, Any], chosen: dict
) -> tuple[Any, dict[str, Any]]:
    """Caruana's selection over the complete trials (the project's greedy
    selection with replacement, the posthoc block's settings), the selected
    members refit on the training part with their counts as weights."""
    data = prepared["data"]
    start = time.perf_counter()
    selection = greedy_selection_with_replacement(
        np.stack([objective.predictions[number] for number in complete]),
        data.target,
        data.fold_ids,
        loss_objective("regression", chosen["loss"]).per_sample_loss,
        max_size=chosen["max_size"],
        warm_start=min(chosen["warm_start"], len(complete)),
    )
    counts = Counter(int(index) for index in selection.members)
    selection_seconds = time.perf_counter() - start
    start = time.perf_counter()
    members = sorted(counts)
    model = build_ensemble_model(
        "regression",
        [
            make_model(
                objective.model_name,
                objective.configs[complete[i]],
                prepared["model_seed"],
                prepared["data"].encoding.categorical_features,
            )
            for i in members
        ],
        [counts[i] / selection.size for i in members],
        prepared["data"].encoding,
    )
    with quiet_iteration_caps():
        model.fit(prepared["features"], prepared["target"])
    return model, {
        "selection_seconds": selection_seconds,
        "refit_seconds": time.perf_counter() - start,
        "ensemble_size": int(selection.size),
        "ensemble_members_distinct": len(members),
        "cv_loss": selection.loss,
    }


def fit_optuna_hb(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series
) -> tuple[Any, dict[str, Any]]:
    """Optuna TPE + Hyperband pruning on our folds and models, then Caruana + refit."""
    setup = dict(cell.setup)
    total_start = time.perf_counter()
    prepared = _optuna_input(cell, X, y)
    space = SearchSpace.from_dict(default_parameters()["models"][cell.space])
    objective = _PrunedCV(cell.space, space, prepared["data"], prepared["model_seed"])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="minimize",
        # The pruner assigns trials to brackets by a hash of the study's name.
        study_name=f"multi_fidelity/{cell.key}",
        sampler=optuna.samplers.TPESampler(seed=cell.seed, multivariate=True),
        pruner=optuna.pruners.HyperbandPruner(**setup["pruner"]),
    )
    start = time.perf_counter()
    study.optimize(objective, timeout=cell.time_budget)
    search_seconds = time.perf_counter() - start

    states = Counter(trial.state.name for trial in study.trials)
    complete = [
        trial.number
        for trial in study.trials
        if trial.state.name == "COMPLETE" and trial.number in objective.predictions
    ]
    # Folds trained, in full-fidelity equivalents (a failing fold counts).
    folds_trained = sum(
        len(trial.intermediate_values) + (trial.number in objective.errors)
        for trial in study.trials
    )
    info: dict[str, Any] = {
        "search_seconds": search_seconds,
        "optuna_complete": states.get("COMPLETE", 0),
        "optuna_pruned": states.get("PRUNED", 0),
        "optuna_failed": states.get("FAIL", 0),
        "n_trials": len(complete),
        "trials_failed": states.get("FAIL", 0),
        "fidelity_full_equivalents": folds_trained / len(objective.folds),
        "fidelity_configurations": len(study.trials),
        "stopped_by": "time_budget",
        "best_value": float(study.best_value) if complete else None,
    }
    if not complete:
        shown = "; ".join(sorted(set(objective.errors.values()))[:3])
        raise RuntimeError(
            f"no complete Optuna trial in {search_seconds:.1f} s "
            f"({dict(states)}){': ' + shown if shown else ''}"
        )
    model, refit = _caruana_refit(objective, complete, prepared, setup["selection"])
    info.update(refit, fit_wall_seconds=time.perf_counter() - total_start)
    return _CaruanaEnsemble(model), info


def run_cell(
    cell: ToolCell, raw: pd.DataFrame, data_processing: dict[str, Any]
) -> dict[str, Any]:
    """Split, fit, score one cell, in a worker process: its JSON record."""
    scripts.quiet_learners()
    fitter = fit_optuna_hb if cell.tool == "optuna_hb" else fit_segor
    return run_tool_cell(cell, raw, data_processing, fitter)


# --------------------------------------------------------------------------- report


PAIR_INDEX = ["dataset", "space", "repetition"]


def _wide(frame: pd.DataFrame) -> pd.DataFrame:
    """Test losses by (dataset, space, repetition), columns (tool, T)."""
    return frame.pivot_table(
        index=PAIR_INDEX, columns=["tool", "time_budget"], values="test_loss"
    )


def _loss_by_budget_table(
    part: pd.DataFrame, tools: list[str], budgets: list[float], index: list[str]
) -> list[list[str]]:
    """Rows `index` + tool, a column per T: mean test loss (cells)."""
    means = part.groupby([*index, "tool", "time_budget"])["test_loss"].agg(
        ["mean", "count"]
    )
    rows = []
    keys = part[index].drop_duplicates().sort_values(index).itertuples(index=False)
    for key in keys:
        for tool in tools:
            cells = []
            for budget in budgets:
                at = (*key, tool, budget)
                if at in means.index:
                    mean, count = means.loc[at]
                    cells.append(f"{mean:.4f} ({int(count)})")
                else:
                    cells.append("-")
            if any(cell != "-" for cell in cells):
                rows.append([*map(str, key), TOOL_LABELS[tool], *cells])
    return rows


TARGET1_COLUMNS = [
    "comparison",
    "paired cells",
    "mean loss (MF / full)",
    "share <=",
    "mean ratio",
    "median ratio",
    "p better",
    "p worse",
    "verdict",
]
TARGET2_COLUMNS = [
    "tool vs Optuna HB + Caruana",
    "paired cells",
    "win rate",
    "mean loss (tool / Optuna)",
    "Wilcoxon p",
    "target 0.65",
]


def _target1_rows(
    wide: pd.DataFrame, tools: list[str], budgets: list[float]
) -> list[list[str]]:
    """Each multi-fidelity tool at T vs full SEGOR at 2T, for every such pair of T."""
    rows = []
    pairs = [(b, 2 * b) for b in budgets if 2 * b in budgets]
    # T_max / 2 vs T_max first: the target.
    pairs.sort(key=lambda pair: -pair[1])
    for half, full in pairs:
        if ("segor", full) not in wide:
            continue
        for tool in tools:
            if tool not in MULTI_FIDELITY or (tool, half) not in wide:
                continue
            paired = wide[[(tool, half), ("segor", full)]].dropna()
            if paired.empty:
                continue
            x, y = paired.iloc[:, 0].to_numpy(), paired.iloc[:, 1].to_numpy()
            share = float(np.mean(x <= y))
            met = "met" if x.mean() <= y.mean() else "**missed**"
            rows.append(
                [
                    f"{TOOL_LABELS[tool]} at {half:g} s vs full SEGOR at {full:g} s",
                    str(len(paired)),
                    f"{x.mean():.4f} / {y.mean():.4f}",
                    f"{share:.2f} ({int(np.sum(x <= y))}/{len(paired)})",
                    tables.fmt(float(np.mean(x / y)), 3),
                    tables.fmt(float(np.median(x / y)), 3),
                    tables.fmt(tables.wilcoxon_p(x, y, "less"), 3),
                    tables.fmt(tables.wilcoxon_p(x, y, "greater"), 3),
                    met + ("" if full == max(budgets) else " (not T_max)"),
                ]
            )
    return rows


def _target2_rows(
    wide: pd.DataFrame, tools: list[str], budgets: list[float]
) -> list[list[str]]:
    """Each SEGOR tool vs optuna_hb at equal T: win rate (ties half), two-sided p."""
    rows = []
    for tool in tools:
        if tool == "optuna_hb":
            continue
        xs, ys = [], []
        for budget in budgets:
            if (tool, budget) not in wide or ("optuna_hb", budget) not in wide:
                continue
            paired = wide[[(tool, budget), ("optuna_hb", budget)]].dropna()
            if paired.empty:
                continue
            x, y = paired.iloc[:, 0].to_numpy(), paired.iloc[:, 1].to_numpy()
            xs.append(x)
            ys.append(y)
            rows.append(_win_row(f"{TOOL_LABELS[tool]}, T = {budget:g} s", x, y))
        if len(xs) > 1:
            x, y = np.concatenate(xs), np.concatenate(ys)
            rows.append(_win_row(f"{TOOL_LABELS[tool]}, every T", x, y, overall=True))
    return rows


def _win_row(label: str, x: np.ndarray, y: np.ndarray, overall=False) -> list[str]:
    won = tables.wins(x, y)
    rate = won / len(x)
    verdict = "met" if rate >= 0.65 else "**missed**"
    return [
        f"**{label}**" if overall else label,
        str(len(x)),
        f"{rate:.2f} ({won:g}/{len(x)})",
        f"{x.mean():.4f} / {y.mean():.4f}",
        tables.fmt(tables.wilcoxon_p(x, y, "two-sided"), 3),
        verdict,
    ]


def _cost_rows(frame: pd.DataFrame, tools: list[str]) -> list[list[str]]:
    rows = []
    for tool in tools:
        for budget in sorted(frame["time_budget"].unique()):
            part = frame[(frame["tool"] == tool) & (frame["time_budget"] == budget)]
            if part.empty:
                continue
            stopped = Counter(part["stopped_by"].fillna("?"))
            optuna = tool == "optuna_hb"
            rows.append(
                [
                    TOOL_LABELS[tool],
                    f"{budget:g}",
                    str(len(part)),
                    tables.fmt(tables.mean_of(part["cell_wall_seconds"]), 1),
                    tables.fmt(tables.mean_of(part["fit_wall_seconds"]), 1),
                    tables.fmt(tables.mean_of(part["search_seconds"]), 1),
                    tables.fmt(tables.mean_of(part["refit_seconds"]), 1),
                    tables.fmt(tables.mean_of(part["n_trials"]), 1),
                    tables.fmt(tables.mean_of(part["trials_failed"]), 1),
                    tables.fmt(tables.mean_of(part["fidelity_configurations"]), 1),
                    tables.fmt(tables.mean_of(part["optuna_pruned"]), 1)
                    if optuna
                    else "-",
                    tables.fmt(tables.mean_of(part["fidelity_full_equivalents"]), 1),
                    tables.fmt(tables.mean_of(part["ensemble_members_distinct"]), 1),
                    ", ".join(f"{k} {v}" for k, v in sorted(stopped.items())),
                ]
            )
    return rows


def report(records: dict[str, dict[str, Any]], path: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Multi-fidelity SEGOR vs full-fidelity SEGOR vs Optuna Hyperband + Caruana",
        scripts.shown(path, PROJECT),
        ok,
        failed,
        "Test loss: MSE of the target standardized by the training part's mean and "
        "std, on the project's test split of repetition r (split_dataset with seed "
        "repetition_seed(0, r)); every tool on the same 5 folds "
        "(EnsembleSearch(cv=5, random_state=r)'s). T: seconds of search (the "
        "refit, and Optuna's Caruana selection, come after it, uncounted). Cells "
        "in brackets.",
    )
    commits = Counter(
        f"{r.get('git_commit', '?')[:10]}"
        + (" (dirty tree)" if r.get("git_dirty") else "")
        + f", sources {r.get('sources_sha256', '?')}"
        for r in ok
    )
    lines.append(
        "Code: " + "; ".join(f"{c} ({n} cells)" for c, n in commits.items()) + "."
    )
    if not ok:
        return "\n".join([*lines, "", "No finished cells yet.", ""])
    frame = pd.DataFrame(ok)
    for column in (
        "fidelity_full_equivalents",
        "fidelity_configurations",
        "optuna_pruned",
        "trials_failed",
        "refit_seconds",
    ):
        if column not in frame:
            frame[column] = None
    tools = [tool for tool in TOOLS if tool in set(frame["tool"])]
    budgets = sorted(float(b) for b in frame["time_budget"].unique())
    budget_columns = [f"T = {b:g} s" for b in budgets]

    lines += [
        "",
        "## Mean test loss per space, tool and T (over datasets and repetitions)",
        "",
        tables.markdown_table(
            ["space", "tool", *budget_columns],
            _loss_by_budget_table(frame, tools, budgets, ["space"]),
        ),
        "",
        "## Test loss against search time, per dataset and space (mean over "
        "repetitions)",
        "",
        tables.markdown_table(
            ["dataset", "space", "tool", *budget_columns],
            _loss_by_budget_table(frame, tools, budgets, ["dataset", "space"]),
        ),
    ]
    wide = _wide(frame)
    target1 = _target1_rows(wide, tools, budgets)
    lines += [
        "",
        "## Target 1: full SEGOR's final loss in at most half its time",
        "",
        "Each multi-fidelity tool at T against full-fidelity SEGOR at 2T, over the "
        "paired (dataset, space, repetition) cells; the target is the row at "
        "T_max / 2 vs T_max. Share: cells where the multi-fidelity loss is <= full "
        "SEGOR's; ratio: multi-fidelity / full loss per cell; p better / worse: "
        "one-sided Wilcoxon signed-rank p that the multi-fidelity losses are "
        "lower / higher. Verdict: met when the mean loss at T is <= full "
        "SEGOR's mean at 2T.",
        "",
    ]
    lines.append(
        tables.markdown_table(
            TARGET1_COLUMNS,
            target1,
        )
        if target1
        else "No pairs yet (needs T and 2T among the budgets, and full SEGOR at 2T)."
    )
    target2 = _target2_rows(wide, tools, budgets)
    lines += [
        "",
        "## Target 2: beat Optuna Hyperband + Caruana at equal T on >= 65% of cells",
        "",
        "Win rate of each SEGOR tool against optuna_hb over the paired (dataset, "
        "space, repetition) cells at the same T (ties count half); p: two-sided "
        "Wilcoxon signed-rank test on those pairs.",
        "",
    ]
    lines.append(
        tables.markdown_table(
            TARGET2_COLUMNS,
            target2,
        )
        if target2
        else "No pairs yet (needs optuna_hb cells)."
    )
    lines += _by_space(frame, tools, budgets)
    lines += [
        "",
        "## Cost per tool and T (means per cell)",
        "",
        "cell: the whole cell (load, split, fit, predict); fit: the tool's whole "
        "fit; search: its search clock, which T bounds (ours includes the "
        "evaluation worker's start-up; Optuna's study.optimize finishes the trial "
        "running at T); refit: the final ensemble's fit on the training part; "
        "pool: configurations evaluated on every fold (ours: in the pool; Optuna: "
        "COMPLETE trials); configurations: every configuration started "
        "(multi-fidelity: the brackets' first rungs; Optuna: all trials); "
        "full equiv.: folds trained / 5 (full SEGOR: its pool); failed: failed "
        "trials.",
        "",
        tables.markdown_table(
            [
                "tool",
                "T",
                "cells",
                "cell s",
                "fit s",
                "search s",
                "refit s",
                "pool",
                "failed",
                "configurations",
                "pruned",
                "full equiv.",
                "distinct members",
                "stopped by",
            ],
            _cost_rows(frame, tools),
        ),
        "",
        "Tools:",
        "",
        *_setup_lines(frame, tools),
    ]
    lines += tables.failed_lines(failed)
    return "\n".join([*lines, ""])


def _by_space(frame: pd.DataFrame, tools: list[str], budgets: list[float]) -> list[str]:
    """Both targets' tables for each space alone: the spaces differ in what a
    configuration costs (an MLP evaluation takes seconds, many SVR ones take
    milliseconds), which is what multi-fidelity trades on."""
    lines = ["", "## Both targets, space by space"]
    for space in sorted(frame["space"].unique()):
        wide = _wide(frame[frame["space"] == space])
        lines += [
            "",
            f"### {space}",
            "",
            tables.markdown_table(
                TARGET1_COLUMNS,
                _target1_rows(wide, tools, budgets),
            ),
            "",
            tables.markdown_table(
                TARGET2_COLUMNS,
                _target2_rows(wide, tools, budgets),
            ),
        ]
    return lines


def _setup_lines(frame: pd.DataFrame, tools: list[str]) -> list[str]:
    return [
        f"- {TOOL_LABELS[tool]} (`{tool}`): "
        + "; ".join(tables.tool_setups(frame, tool))
        for tool in tools
    ]


# --------------------------------------------------------------------------- main


def build_cells(
    args: argparse.Namespace, base_seed: int, posthoc: dict
) -> list[ToolCell]:
    """Every cell, the cheap budgets first."""
    cells = []
    for budget in sorted(args.time_budgets):
        for repetition in range(args.repetitions):
            for dataset in args.datasets:
                for space in args.spaces:
                    for tool in args.tools:
                        setup = tool_setup(tool, args, posthoc)
                        cells.append(
                            ToolCell(
                                dataset,
                                repetition,
                                repetition_seed(base_seed, repetition),
                                tool,
                                tuple(sorted(setup.items())),
                                time_budget=float(budget),
                                space=space,
                            )
                        )
    return cells


def _check_datasets(
    frames: dict[str, pd.DataFrame], data_processing: dict[str, Any]
) -> None:
    """Every dataset is a regression task (as the pipelines decide it)."""
    for name, frame in frames.items():
        task = dataset_task(frame, name, data_processing)
        if task != "regression":
            sys.exit(
                f"{name} is a {task} dataset; this benchmark is SEGOR's, regression"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=DEFAULT_DATASETS,
        help="regression datasets in data/01_raw (default: %(default)s)",
    )
    parser.add_argument(
        "--spaces",
        nargs="+",
        default=DEFAULT_SPACES,
        help="models of parameters_models.yml (default: %(default)s)",
    )
    parser.add_argument(
        "--time-budgets", nargs="+", type=float, default=[10.0, 20.0, 40.0]
    )
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--tools", nargs="+", choices=TOOLS, default=list(TOOLS), help="default: all"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET,
        help="our configurations (full-fidelity equivalents) per search; the time "
        "budget ends it first",
    )
    scripts.add_run_arguments(parser, DEFAULT_OUTPUT)
    args = parser.parse_args()
    output = args.output.resolve()

    if not args.report:
        if args.jobs < 1 or args.repetitions < 1:
            sys.exit("--jobs and --repetitions must be at least 1")
        parameters = default_parameters()
        unknown = [s for s in args.spaces if s not in parameters["models"]]
        if unknown:
            sys.exit(f"unknown spaces {unknown}; see conf/base/parameters_models.yml")
        data_processing = dict(parameters["data_processing"])
        if data_processing["n_folds"] != N_FOLDS:
            scripts.log(
                f"note: the pipelines use {data_processing['n_folds']} folds, here 5"
            )
        base_seed = int(parameters["benchmark"]["seed"])
        posthoc = dict(parameters["posthoc"])
        if posthoc["weighting"] != "counts":
            sys.exit("posthoc.weighting is not counts: the Optuna peer uses counts")
        frames = scripts.raw_datasets(args.datasets, PROJECT)
        _check_datasets(frames, data_processing)
        scripts.run_grid(
            build_cells(args, base_seed, posthoc),
            run_cell,
            CellLines(output),
            PROJECT,
            frames=frames,
            arguments=(data_processing,),
            jobs=args.jobs,
            stamp=scripts.provenance(PACKAGES, PROJECT),
        )

    records = CellLines(output).records()
    tables.write_report(report(records, output), output.with_suffix(".md"))


if __name__ == "__main__":
    main()
