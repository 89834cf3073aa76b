"""Build the default spaces' portfolios from scratch, and check them on held-out data.

For each default space (segor_sklearn on the bundled regression datasets,
sego_sklearn on the classification ones, each under 2,000 rows), each family
at scikit-learn's defaults (FAMILY_DEFAULTS) and a seeded, scrambled Sobol
sample of the space give the candidate configurations (floats rounded to 3
significant digits, duplicates dropped). Each candidate is
evaluated by the project's 5-fold CV on the training part of each dataset
(the benchmark's split of repetition 0: the test part is never fitted nor
scored): MSE of the standardized target for regression, log-loss of the
out-of-fold probabilities for classification (a model without probabilities
counts its labels as certain). Greedy portfolio construction
(core.portfolio.greedy_portfolio) then picks `--size` candidates among those
whose evaluation took at most `--max-seconds` on every dataset.

Leave-one-dataset-out: the portfolio built without dataset d, scored on d
(the best normalized loss among its first k configurations), against k
candidates drawn at random from the whole sample (what a random or Sobol start
gets, expected over draws) and against the portfolio built on every dataset.

    nice -n 10 .venv/bin/python benchmarks/build_portfolio.py   # ~20 min, one core
    .venv/bin/python benchmarks/build_portfolio.py --choose-only  # from the saved losses

It writes conf/base/parameters_portfolios.yml (the portfolios the searches
start from), benchmarks/results/portfolio.json (every candidate's loss and
seconds, and the provenance) and benchmarks/results/portfolio.md (the report).
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# One core: the seconds a candidate takes are those of a single-threaded trial.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.stats import qmc
from sklearn.metrics import log_loss

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.evaluation import CrossValidation
from ensemble_bo.core.grid import repetition_seed
from ensemble_bo.core.optimizer import initial_suggestion
from ensemble_bo.core.portfolio import (
    best_of_first,
    greedy_portfolio,
    normalized_losses,
)
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.trials import TrialRequest
from ensemble_bo.core.workers import WorkerEvaluator

PROJECT = Path(__file__).resolve().parents[1]
PORTFOLIOS_FILE = PROJECT / "conf" / "base" / "parameters_portfolios.yml"
RESULTS = PROJECT / "benchmarks" / "results" / "portfolio.json"
# The bundled datasets under 2,000 rows, by the space built on them.
DATASETS = {
    "segor_sklearn": [
        "auto_mpg",
        "boston",
        "carseats",
        "concrete",
        "cpu_performance",
        "diabetes",
        "hitters",
    ],
    "sego_sklearn": [
        "breast_cancer",
        "car_good",
        "digits",
        "german_credit",
        "pima",
        "wine",
    ],
}
# Each family at scikit-learn's defaults, where a default lies outside the
# space the nearest value inside (a depth of None: the highest; an l2 or qda
# regularization of 0: the lowest; SVMs' gamma="scale", about 1 / features on
# standardized features: 0.1): the configurations AutoGluon and FLAML also start
# from, and candidates beside the Sobol sample. The space's constants are filled in.
FAMILY_DEFAULTS = {
    "segor_sklearn": [
        {
            "regressor": "hist_gradient_boosting",
            "learning_rate": 0.1,
            "max_features": 1.0,
            "max_leaf_nodes": 31,
            "hist_gradient_boosting__min_samples_leaf": 20,
            "l2_regularization": 0.001,
        },
        {"regressor": "random_forest", "max_features": 1.0, "bootstrap": True},
        {"regressor": "extra_trees", "max_features": 1.0, "bootstrap": False},
        {
            "regressor": "gradient_boosting",
            "learning_rate": 0.1,
            "gradient_boosting__max_depth": 3,
            "loss": "squared_error",
        },
        {"regressor": "svr", "C": 1.0, "gamma": 0.1, "epsilon": 0.1},
        {"regressor": "knn", "n_neighbors": 5},
        {
            "regressor": "elastic_net",
            "elastic_net__alpha": 1.0,
            "l1_ratio": 0.5,
            "elastic_net__max_iter": 1000,
        },
        {
            "regressor": "mlp",
            "learning_rate_init": 0.001,
            "activation": "relu",
            "n_hidden_layers": 1,
            "units_1": 100,
        },
        {
            "regressor": "decision_tree",
            "decision_tree__max_depth": 30,
            "decision_tree__max_features": 1.0,
            "min_samples_split": 2,
            "decision_tree__min_samples_leaf": 1,
        },
    ],
    "sego_sklearn": [
        {"classifier": "knn", "n_neighbors": 5},
        {"classifier": "rbf_svm", "C": 1.0, "gamma": 0.1},
        {"classifier": "linear_svm", "C": 1.0},
        {
            "classifier": "decision_tree",
            "max_depth": 10,
            "min_samples_split": 2,
            "min_samples_leaf": 2,
        },
        {
            "classifier": "random_forest",
            "max_depth": 10,
            "min_samples_split": 2,
            "min_samples_leaf": 2,
            "n_estimators": 30,
        },
        {"classifier": "adaboost", "n_estimators": 30},
        {"classifier": "gaussian_nb"},
        {"classifier": "lda"},
        {"classifier": "qda", "reg_param": 0.001},
        {
            "classifier": "hist_gradient_boosting",
            "learning_rate": 0.1,
            "max_features": 1.0,
            "max_leaf_nodes": 31,
            "hist_gradient_boosting__min_samples_leaf": 20,
            "l2_regularization": 0.001,
        },
    ],
}
# Spaces that extend a default space by a family or a range start from its
# portfolio: each of its configurations is a point of them too.
EXTENDED_SPACES = {
    "segor_sklearn_catboost": "segor_sklearn",
    "segor_sklearn_rounds": "segor_sklearn",
    "sego_sklearn_catboost": "sego_sklearn",
}
PACKAGES = ("scikit-learn", "numpy", "ensemble-bo")
# Random draws of k candidates that estimate a random start's expected loss.
RANDOM_STARTS = 2000


def candidates(
    space_name: str, space: SearchSpace, count: int, seed: int
) -> list[dict[str, Any]]:
    """The space's FAMILY_DEFAULTS, then `count` scrambled Sobol points of the
    space, decoded, floats to 3 significant digits, duplicates dropped (e.g.
    every lda point is one)."""
    defaults = [
        initial_suggestion(space, config, index).config
        for index, config in enumerate(FAMILY_DEFAULTS[space_name])
    ]
    sobol = qmc.Sobol(space.dim, scramble=True, rng=np.random.default_rng(seed))
    points = sobol.random_base2(math.ceil(math.log2(count)))[:count]
    unique: list[dict[str, Any]] = defaults
    for point in points:
        config = {
            name: float(f"{value:.3g}") if isinstance(value, float) else value
            for name, value in space.decode(point).items()
        }
        if config not in unique:
            unique.append(config)
    return unique


def cv_loss(task: str, target: np.ndarray, result: Any) -> float:
    """MSE of the standardized target, or log-loss of the OOF probabilities."""
    if not result.ok:
        return math.nan
    if task == "regression":
        return float(np.mean((result.oof_predictions - target) ** 2))
    probabilities = result.oof_probabilities
    if probabilities is None:
        classes = int(target.max()) + 1
        probabilities = np.eye(classes)[result.oof_predictions.astype(int)]
    return float(log_loss(target, probabilities, labels=range(probabilities.shape[1])))


def evaluate(
    space_name: str, configs: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    """Every candidate's CV loss and seconds on every dataset of the space."""
    parameters = default_parameters()
    seed = repetition_seed(int(parameters["benchmark"]["seed"]), 0)
    frames = scripts.raw_datasets(DATASETS[space_name], PROJECT)
    losses, seconds = {}, {}
    for dataset, raw in frames.items():
        _, data = prepare(raw, dataset, parameters["data_processing"], seed)
        evaluator = WorkerEvaluator(
            CrossValidation(
                space_name,
                data.features,
                data.target,
                data.fold_ids,
                random_state=derive_seed(seed, "models"),
            ),
            time_limit=args.time_limit,
        )
        losses[dataset], seconds[dataset] = [], []
        for ticket, config in enumerate(configs):
            result = evaluator(TrialRequest(ticket, config))
            losses[dataset].append(cv_loss(data.task, data.target, result))
            seconds[dataset].append(float(result.fit_seconds))
        evaluator.close()
        scripts.log(
            f"{space_name} {dataset}: {len(configs)} candidates, "
            f"{sum(seconds[dataset]):.0f} s, "
            f"{sum(map(math.isnan, losses[dataset]))} failed"
        )
    return {"candidates": configs, "losses": losses, "seconds": seconds}


def matrices(record: dict[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Datasets, and (candidates, datasets) losses and seconds."""
    datasets = list(record["losses"])
    losses = np.array([record["losses"][d] for d in datasets], dtype=float).T
    seconds = np.array([record["seconds"][d] for d in datasets], dtype=float).T
    return datasets, losses, seconds


def leave_one_out(
    losses: np.ndarray, seconds: np.ndarray, args: argparse.Namespace, seed: int
) -> dict[str, np.ndarray]:
    """(size, datasets) best normalized loss among the first k configurations,
    for the portfolio built without the dataset, the one built on all, and a
    random start (mean over draws); and the seconds the held-out portfolio's
    first k configurations took."""
    normalized = normalized_losses(losses)
    n_candidates, n_datasets = losses.shape
    size = args.size
    held_out = np.zeros((size, n_datasets))
    held_out_seconds = np.zeros((size, n_datasets))
    random_start = np.zeros((size, n_datasets))
    random_seconds = np.zeros((size, n_datasets))
    everywhere = best_of_first(
        normalized,
        greedy_portfolio(normalized, size, seconds, args.max_seconds),
    )
    rng = np.random.default_rng(seed)
    for d in range(n_datasets):
        others = [i for i in range(n_datasets) if i != d]
        chosen = greedy_portfolio(
            normalized_losses(losses[:, others]),
            size,
            seconds[:, others],
            args.max_seconds,
        )
        held_out[:, d] = best_of_first(normalized[:, [d]], chosen)[:, 0]
        held_out_seconds[:, d] = np.cumsum(seconds[chosen, d])
        draws = np.array(
            [rng.permutation(n_candidates)[:size] for _ in range(RANDOM_STARTS)]
        )
        random_start[:, d] = np.minimum.accumulate(normalized[draws, d], axis=1).mean(
            axis=0
        )
        random_seconds[:, d] = np.cumsum(seconds[draws, d], axis=1).mean(axis=0)
    return {
        "held_out": held_out,
        "held_out_seconds": held_out_seconds,
        "everywhere": everywhere,
        "random": random_start,
        "random_seconds": random_seconds,
    }


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# Portfolios of the default spaces",
        "",
        f"Built by `benchmarks/build_portfolio.py` (results: "
        f"{scripts.shown(RESULTS, PROJECT)}): {args.size} configurations per space, "
        "greedy over each family at scikit-learn's defaults and a scrambled Sobol "
        "sample of the space, among the candidates "
        f"whose 5-fold CV took at most {args.max_seconds:g} s on every dataset (one "
        "core). Normalized loss: per dataset, 0 for the best candidate, 1 for the "
        "median or worse (failed: 1). Leave-one-dataset-out: the portfolio built "
        "without the dataset, scored on it; random: k candidates drawn from the "
        "whole sample (mean of "
        f"{RANDOM_STARTS} draws), what a start without a portfolio gets.",
    ]
    for space_name, record in results["spaces"].items():
        datasets, losses, seconds = matrices(record)
        loo = leave_one_out(losses, seconds, args, int(results["seed"]))
        within = np.all(seconds <= args.max_seconds, axis=1).sum()
        lines += [
            "",
            f"## {space_name}",
            "",
            f"{len(record['candidates'])} candidates ({within} within the cap), "
            f"{len(datasets)} datasets: {', '.join(datasets)}.",
            "",
            "Mean normalized loss of the best of the first k configurations "
            "(lower is better), and their summed CV seconds:",
            "",
        ]
        rows = []
        for k in range(args.size):
            rows.append(
                [
                    str(k + 1),
                    tables.fmt(loo["held_out"][k].mean(), 3),
                    tables.fmt(loo["random"][k].mean(), 3),
                    tables.fmt(loo["everywhere"][k].mean(), 3),
                    tables.fmt(loo["held_out_seconds"][k].mean(), 1),
                    tables.fmt(loo["random_seconds"][k].mean(), 1),
                ]
            )
        lines.append(
            tables.markdown_table(
                [
                    "k",
                    "portfolio, held-out dataset",
                    "random start",
                    "portfolio, in-sample",
                    "portfolio s (held-out)",
                    "random s",
                ],
                rows,
            )
        )
        k = min(4, args.size) - 1
        won = int(np.sum(loo["held_out"][k] < loo["random"][k]))
        lines += [
            "",
            f"At k = {k + 1}, the held-out portfolio beats the random start on "
            f"{won} of {len(datasets)} datasets; per dataset (held-out portfolio / "
            "random): "
            + ", ".join(
                f"{d} {loo['held_out'][k][i]:.2f}/{loo['random'][k][i]:.2f}"
                for i, d in enumerate(datasets)
            )
            + ".",
        ]
    return "\n".join([*lines, ""])


def portfolio_file(results: dict[str, Any], args: argparse.Namespace) -> str:
    """conf/base/parameters_portfolios.yml: the header and every portfolio."""
    portfolios = {}
    for space_name, record in results["spaces"].items():
        _, losses, seconds = matrices(record)
        chosen = greedy_portfolio(
            normalized_losses(losses), args.size, seconds, args.max_seconds
        )
        portfolios[space_name] = [record["candidates"][i] for i in chosen]
    header = f"""\
# The configurations a search evaluates first, in order, by search space: they
# replace the first points of the optimizer's initial design (n_initial; the rest
# stay Sobol points), then the optimizer takes over. Each list was chosen by
# greedy portfolio construction (core/portfolio.py) over each family at
# scikit-learn's defaults and a scrambled Sobol sample of {args.candidates}
# configurations of the space, evaluated by 5-fold CV
# on the training part of the bundled datasets under 2,000 rows (the test part is
# never used): repeatedly the candidate that most lowers the mean over datasets of
# the best normalized CV loss among those chosen, among candidates whose CV took
# at most {args.max_seconds:g} s on every dataset (one core). Rebuilt from scratch by
#   nice -n 10 .venv/bin/python benchmarks/build_portfolio.py
# which also writes every candidate's losses (benchmarks/results/portfolio.json)
# and the leave-one-dataset-out check (benchmarks/results/portfolio.md). A search
# uses its space's portfolio when its optimizer block says `portfolio: true`
# (parameters_segor.yml); a space without a portfolio starts from Sobol points.
# A configuration must be a point of its space (checked before a run): after
# changing a space's ranges, rebuild its portfolio.
"""
    body = yaml.safe_dump(
        {"portfolios": portfolios}, sort_keys=False, default_flow_style=None, width=88
    )
    extended = [
        (name, base) for name, base in EXTENDED_SPACES.items() if base in portfolios
    ]
    for base in dict.fromkeys(base for _, base in extended):
        body = body.replace(f"\n  {base}:\n", f"\n  {base}: &{base}_portfolio\n", 1)
    if extended:
        body += (
            "  # The CatBoost and rounds spaces start as the spaces they extend: each "
            "configuration\n  # above is a point of them too.\n"
            + "".join(f"  {name}: *{base}_portfolio\n" for name, base in extended)
        )
    return header + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=64)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=2.0)
    parser.add_argument(
        "--time-limit", type=float, default=6.0, help="seconds per CV evaluation"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--spaces", nargs="+", choices=list(DATASETS), default=list(DATASETS)
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--portfolios", type=Path, default=PORTFOLIOS_FILE)
    parser.add_argument(
        "--choose-only",
        action="store_true",
        help="choose the portfolios and report from the saved losses (no training)",
    )
    args = parser.parse_args()
    output = args.output.resolve()
    if args.choose_only:
        results = json.loads(output.read_text())
        # The candidates and their evaluation are the saved ones.
        args.candidates = results["settings"]["candidates"]
        args.time_limit = results["settings"]["time_limit"]
        results["settings"] |= {"size": args.size, "max_seconds": args.max_seconds}
    else:
        scripts.quiet_learners()
        models = default_parameters()["models"]
        results = {
            "seed": args.seed,
            "settings": {
                "candidates": args.candidates,
                "size": args.size,
                "max_seconds": args.max_seconds,
                "time_limit": args.time_limit,
            },
            "provenance": scripts.provenance(PACKAGES, PROJECT),
            "spaces": {},
        }
        for space_name in args.spaces:
            space = SearchSpace.from_dict(models[space_name])
            configs = candidates(space_name, space, args.candidates, args.seed)
            results["spaces"][space_name] = evaluate(space_name, configs, args)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1))
    args.portfolios.write_text(portfolio_file(results, args))
    tables.write_report(report(results, args), output.with_suffix(".md"))


if __name__ == "__main__":
    main()
