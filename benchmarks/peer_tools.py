"""The tools of peer_comparison.py: what each runs with, and how each is fitted.

Every fit takes a cell, its training part and its test features, and returns a
fitted model (predict, and predict_proba with classes_ for classes) and what it
records. The test features are only used to time prediction: the harness
scores every tool alike on the model it returns (core.grid.run_tool_cell).
AutoGluon runs in a venv of its own (autogluon_runner.py in a subprocess),
fitting and predicting there; its answers come back as a HeldPredictions
(HeldClassifier for classes).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from autogluon_runner import predict_seconds_per_1000

from ensemble_bo.api import EnsembleSearch
from ensemble_bo.core.grid import ToolCell
from ensemble_bo.core.zoo import model_task

BENCHMARKS = Path(__file__).resolve().parent
AUTOGLUON_PYTHON = BENCHMARKS / ".venv-autogluon" / "bin" / "python"
AUTOGLUON_RUNNER = BENCHMARKS / "autogluon_runner.py"
N_FOLDS = 5
# SEGO's objectives (sego.loss), each with the final ensemble combined as the
# objective scores it (voting auto): the candidates for the classification default.
SEGO_OBJECTIVES = ("squared_margin", "error", "log_loss", "brier")
# AutoGluon's presets: medium_quality is its default; best_quality bags every
# model over folds and stacks, starting from its zero-shot portfolio.
AUTOGLUON_PRESETS = {
    "autogluon_medium": "medium_quality",
    "autogluon_best": "best_quality",
}
# best_quality's dynamic stacking (DyStack) first spends a quarter of the
# budget on a holdout fit to decide whether to stack. Without ray it runs in
# the same process, and where that fit trains nothing (short budgets: a 2.5 s
# quarter of 10 s) AutoGluon 1.6.3 then stops with "Learner is already fit".
# Off, best_quality always stacks and every cell has a result.
AUTOGLUON_FIT = {"autogluon_medium": {}, "autogluon_best": {"dynamic_stacking": False}}
PEERS = ("flaml", *AUTOGLUON_PRESETS)
TOOLS = (
    *PEERS,
    "ours",
    "segor_paper",
    *(f"ours:{loss}" for loss in SEGO_OBJECTIVES),
)
TOOL_LABELS = {
    "flaml": "FLAML",
    "autogluon_medium": "AutoGluon medium",
    "autogluon_best": "AutoGluon best",
    "ours": "ours",
    "segor_paper": "segor, paper space",
    **{f"ours:{loss}": f"ours, sego {loss}" for loss in SEGO_OBJECTIVES},
}
# A tool's name may end in "+name=value" settings of our parameters (a dotted
# name sets a nested one, values are YAML), e.g. ours+max_trial_share=0.1.
SETTING_SEPARATOR = "+"
# The column of EnsembleSearch.members_ that names a member's family, by space.
FAMILY_COLUMNS = ("regressor", "classifier")
# The label column of the table AutoGluon is given: no feature is named so.
LABEL = "__target__"


def parse_tool(tool: str) -> tuple[str, dict[str, Any]]:
    """`"ours:log_loss+max_trial_share=0.1"` -> ("ours:log_loss", {"max_trial_share":
    0.1}): a tool of TOOLS and the parameters it overrides; raises naming a bad one."""
    name, *settings = tool.split(SETTING_SEPARATOR)
    if name not in TOOLS:
        raise argparse.ArgumentTypeError(f"unknown tool {name!r}; known: {list(TOOLS)}")
    params: dict[str, Any] = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not (key and equals) or name in PEERS:
            raise argparse.ArgumentTypeError(
                f"{tool!r}: only our tools take settings, as +name=value "
                f"(e.g. ours+max_trial_share=0.1), got {setting!r}"
            )
        *path, last = key.split(".")
        block = params
        for part in path:
            block = block.setdefault(part, {})
        block[last] = yaml.safe_load(value)
    return name, params


def tool_name(tool: str) -> str:
    """`tool`, checked (argparse's type for --tools)."""
    parse_tool(tool)
    return tool


def label(tool: str) -> str:
    """A tool's name in the report."""
    name, _ = parse_tool(tool)
    settings = tool.removeprefix(name).removeprefix(SETTING_SEPARATOR)
    return TOOL_LABELS[name] + (f" ({settings})" if settings else "")


def tool_setup(tool: str, task: str, options: Any) -> dict[str, Any]:
    """What a tool runs with on a task (method, space, budget, the parameters it
    overrides); {}: not for the task.

    options: the script's arguments (budget, regression_space, classification_space).
    """
    tool, params = parse_tool(tool)
    # `model=NAME` picks our model or space (for the task it serves) instead of
    # the default space: a parameter of the search, not of the parameter files.
    model_setting = params.pop("model", None)
    # `cv=K` cross-validates our search on K folds instead of N_FOLDS (the
    # peers keep theirs): also a parameter of the search.
    folds_setting = params.pop("cv", None)
    if tool == "flaml":
        return {"estimator_list": "auto", "eval_method": "cv", "n_splits": N_FOLDS}
    if tool in AUTOGLUON_PRESETS:
        return {
            "presets": AUTOGLUON_PRESETS[tool],
            "num_cpus": 1,
            **AUTOGLUON_FIT[tool],
        }
    if tool == "segor_paper":
        method, model = "segor", "decision_tree_regressor"
    elif tool.startswith("ours:"):
        method, model = (
            f"sego:{tool.removeprefix('ours:')}",
            options.classification_space,
        )
    elif task == "regression":
        method, model = "segor", options.regression_space
    else:
        method, model = "sego", options.classification_space
    model = model_setting or model
    if model_task(model) != task:  # e.g. a classification objective on regression
        return {}
    setup = {"method": method, "model": model, "budget": options.budget}
    if folds_setting is not None:
        setup["cv"] = int(folds_setting)
    return setup | ({"params": json.dumps(params, sort_keys=True)} if params else {})


# --------------------------------------------------------------------------- measures


def deployment(
    model: Any, served: Any, test_features: pd.DataFrame, task: str
) -> dict[str, Any]:
    """What serving a fitted model costs: the pickle's size of what predicts
    (`served`; the whole fitted `model`'s as fitted_bytes), and the fastest of a
    few predictions of the test part (probabilities for classes) per 1,000 rows."""
    predict = model.predict_proba if task == "classification" else model.predict
    return {
        "model_bytes": len(pickle.dumps(served)),
        "fitted_bytes": len(pickle.dumps(model)),
        "predict_seconds_per_1000": predict_seconds_per_1000(
            lambda: predict(test_features), len(test_features)
        ),
    }


# --------------------------------------------------------------------------- fits


def fit_flaml(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series, test_features: pd.DataFrame
) -> tuple[Any, dict[str, Any]]:
    from flaml import AutoML  # noqa: PLC0415 - a dev-only dependency

    automl = AutoML()
    start = time.perf_counter()
    automl.fit(
        X,
        y,
        task=cell.task,
        time_budget=cell.time_budget,
        metric="mse" if cell.task == "regression" else "accuracy",
        eval_method="cv",
        n_splits=N_FOLDS,
        seed=cell.seed,
        n_jobs=1,
        verbose=0,
        mlflow_logging=False,
    )
    fit_seconds = time.perf_counter() - start
    # FLAML's clock after its search, before it retrains the best configuration
    # on all of X (with eval_method="cv" it always does, outside its budget).
    search_seconds = getattr(getattr(automl, "_state", None), "time_from_start", None)
    return automl, {
        "fit_wall_seconds": fit_seconds,
        "search_seconds": None if search_seconds is None else float(search_seconds),
        "n_trials": getattr(automl, "modelcount", None),
        "stopped_by": "time_budget",
        "best_estimator": automl.best_estimator,
        "best_config": automl.best_config,
        "cv_loss": float(automl.best_loss),
        "n_families": 1,
        # automl.model: the best configuration's fitted estimator, what predicts
        **deployment(automl, automl.model, test_features, cell.task),
    }


def fit_ours(
    cell: ToolCell, X: pd.DataFrame, y: pd.Series, test_features: pd.DataFrame
) -> tuple[Any, dict[str, Any]]:
    setup = dict(cell.setup)
    kwargs: dict[str, Any] = {
        "method": setup["method"],
        "model": setup["model"],
        "budget": setup["budget"],
        "cv": setup.get("cv", N_FOLDS),
        "random_state": cell.seed,
        "time_budget": cell.time_budget,
        # point predictions against the peers': no conformal fold models,
        # which would add fits after the search that the peers do not make
        "params": {"conformal": False, **json.loads(setup.get("params", "{}"))},
    }
    search = EnsembleSearch(**kwargs)
    start = time.perf_counter()
    search.fit(X, y)
    fit_seconds = time.perf_counter() - start
    result = search.result_
    members = search.members_
    family_column = next((c for c in FAMILY_COLUMNS if c in members.columns), None)
    if family_column is None:  # a single-family space: the space is the family
        families = {setup["model"]: float(members["weight"].sum())}
    else:
        families = {
            str(family): float(weight)
            for family, weight in members.groupby(family_column)["weight"].sum().items()
        }
    history = getattr(result, "history", [])
    return search, {
        "fit_wall_seconds": fit_seconds,
        "search_seconds": getattr(result, "search_seconds", None),
        "refit_seconds": getattr(search, "refit_seconds_", None),
        # the search's estimate of the final fit, kept back from its budget
        "final_fit_seconds_kept": result.search_metrics.get("final_fit_seconds_kept"),
        "n_trials": len(result.pool),
        "stopped_by": getattr(result, "stopped_by", None),
        "ensemble_size": int(history[-1].ensemble_size)
        if history
        else len(result.members),
        "ensemble_members_distinct": len(members),
        "n_families": len(families),
        "families": families,  # family -> summed weight of its members
        "cv_loss": float(search.cv_loss_),
        # with stacking: whether CV chose the stack over the weighted mean
        "stacking_chosen": None if search.stack_ is None else search.stack_.chosen,
        # ensemble_: the fitted ensemble; the search also keeps its record (result_)
        **deployment(search, search.ensemble_, test_features, cell.task),
    }


class HeldPredictions:
    """A regressor fitted elsewhere, as its answers on the one table it predicted.

    predict returns them for that table only: any other table is an error, not
    a silent wrong answer.
    """

    def __init__(self, features: pd.DataFrame, predictions: np.ndarray) -> None:
        self._index = features.index
        self._predictions = predictions

    def _check(self, features: pd.DataFrame) -> None:
        if not features.index.equals(self._index):
            raise ValueError(
                f"these predictions are of {len(self._index)} given rows; asked for "
                f"{len(features)} other rows: predict the table the peer was given"
            )

    def predict(self, features: pd.DataFrame) -> np.ndarray:
        self._check(features)
        return self._predictions


class HeldClassifier(HeldPredictions):
    """A classifier's held answers: labels, and probabilities by classes_."""

    def __init__(
        self,
        features: pd.DataFrame,
        predictions: np.ndarray,
        probabilities: np.ndarray,
        classes: np.ndarray,
    ) -> None:
        super().__init__(features, predictions)
        self._probabilities = probabilities
        self.classes_ = classes

    def predict_proba(self, features: pd.DataFrame) -> np.ndarray:
        self._check(features)
        return self._probabilities


# A peer's process, as ours: one thread for BLAS and OpenMP.
PEER_THREADS = dict.fromkeys(
    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1"
)


def write_peer_folder(
    path: Path,
    request: dict[str, Any],
    train: pd.DataFrame,
    test_features: pd.DataFrame,
) -> Path:
    """`path` holding what autogluon_runner.py reads: request.json,
    train.parquet (features and the label column) and test.parquet."""
    (path / "request.json").write_text(json.dumps(request))
    train.to_parquet(path / "train.parquet")
    test_features.to_parquet(path / "test.parquet")
    return path


def run_peer(
    request: dict[str, Any],
    train: pd.DataFrame,
    test_features: pd.DataFrame,
    python: Path = AUTOGLUON_PYTHON,
    runner: Path = AUTOGLUON_RUNNER,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run `runner` with `python` on a folder holding request.json, train.parquet
    and test.parquet; its result.json, with "runner_seconds" (the subprocess's
    wall time, start-up and prediction included). One thread for BLAS/OpenMP."""
    with tempfile.TemporaryDirectory(prefix="peer-") as folder:
        path = write_peer_folder(Path(folder), request, train, test_features)
        start = time.perf_counter()
        done = subprocess.run(
            [str(python), str(runner), folder],
            env={**os.environ, **PEER_THREADS},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{runner.name} exited with {done.returncode}: "
                f"{done.stderr.strip()[-2000:]}"
            )
        result = json.loads((path / "result.json").read_text())
    result["runner_seconds"] = time.perf_counter() - start
    return result


def fit_autogluon(
    cell: ToolCell,
    X: pd.DataFrame,
    y: pd.Series,
    test_features: pd.DataFrame,
    python: Path = AUTOGLUON_PYTHON,
    runner: Path = AUTOGLUON_RUNNER,
) -> tuple[HeldPredictions, dict[str, Any]]:
    """AutoGluon's TabularPredictor with the cell's presets, in its own venv.

    Classes go to it as integer codes (the order of np.unique), so that its
    probability columns come back in the order of classes_.
    """
    train = X.copy()
    classes = None
    if cell.task == "classification":
        classes, codes = np.unique(np.asarray(y), return_inverse=True)
        train[LABEL] = codes
        problem_type = "binary" if len(classes) == 2 else "multiclass"
    else:
        train[LABEL] = np.asarray(y, dtype=float)
        problem_type = "regression"
    request = {
        "label": LABEL,
        "problem_type": problem_type,
        "time_limit": cell.time_budget,
        **{k: v for k, v in cell.setup if k != "num_cpus"},
    }
    # Ample room for AutoGluon's overrun and the start-up; a hung fit still ends.
    timeout = 3 * cell.time_budget + 300
    result = run_peer(request, train, test_features, python, runner, timeout)
    predictions = np.asarray(result["predictions"])
    if classes is None:
        model = HeldPredictions(test_features, predictions.astype(float))
    else:
        model = HeldClassifier(
            test_features,
            classes[predictions.astype(int)],
            np.asarray(result["probabilities"], dtype=float),
            classes,
        )
    fit_seconds = result["fit_seconds"]
    return model, {
        "fit_wall_seconds": fit_seconds,
        # its time_limit bounds the whole fit: no refit after it
        "search_seconds": fit_seconds,
        "refit_seconds": 0.0,
        "runner_seconds": result["runner_seconds"],
        "n_trials": result["n_models"],
        "stopped_by": "time_limit",
        "best_model": result["best_model"],
        "n_families": len(result["families"]),
        "families": result["families"],
        "model_bytes": result["model_bytes"],
        "fitted_bytes": result["fitted_bytes"],
        "predict_seconds_per_1000": result["predict_seconds_per_1000"],
        "peer_versions": result["versions"],
    }


FITTERS = {tool: fit_ours for tool in TOOLS} | {
    "flaml": fit_flaml,
    **dict.fromkeys(AUTOGLUON_PRESETS, fit_autogluon),
}
