"""Nodes of the model search pipelines: search, refit and score, report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.compose import TransformedTargetRegressor
from sklearn.pipeline import Pipeline

from ensemble_bo.core.estimator import build_ensemble_model
from ensemble_bo.core.evaluation import CrossValidationEvaluator
from ensemble_bo.core.losses import zero_one_loss
from ensemble_bo.core.optimizer import Optimizer, make_optimizer
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import (
    EnsembleSearchResult,
    EsmboSearch,
    PoolSearch,
    SearchInterrupted,
    SegorSearch,
    SegoSearch,
    SingleBestSearch,
    agnostic_bayes_selection,
    posthoc_selection,
    segor_variant,
)
from ensemble_bo.core.zoo import make_model, model_task
from ensemble_bo.pipelines.progress import search_feedback
from ensemble_bo.reporting import (
    convergence_plot,
    diversity_heatmap,
    ensemble_composition,
    ensemble_diversity,
    trial_history,
)

# Methods that only make sense for one task, and the method for the other task.
TASK_OF_METHOD = {"segor": ("regression", "sego"), "sego": ("classification", "segor")}


def _check_task(dataset_info: dict[str, Any], method_name: str) -> None:
    task, other = TASK_OF_METHOD.get(method_name, (dataset_info["task"], None))
    if dataset_info["task"] != task:
        raise ValueError(
            f"dataset {dataset_info['name']!r} is a {dataset_info['task']} task and "
            f"{method_name} builds {task} ensembles: run `kedro run --pipeline={other}`"
        )


def resolve_model(
    method: dict[str, Any],
    dataset_info: dict[str, Any],
    models: dict[str, Any],
    default_models: dict[str, str],
) -> str:
    """The method's model space: its `model`, or the task's default for `auto`."""
    task = dataset_info["task"]
    model = default_models[task] if method["model"] == "auto" else method["model"]
    if model not in models:
        raise ValueError(
            f"{method['label']}: model={model!r} has no search space under "
            f"`models` (conf/base/parameters_models.yml); available: {sorted(models)}"
        )
    if model_task(model) != task:
        fitting = sorted(name for name in models if model_task(name) == task)
        raise ValueError(
            f"{method['label']}: model={model!r} is a {model_task(model)} model space "
            f"but dataset {dataset_info['name']!r} is a {task} task; choose one of "
            f"{fitting}"
        )
    return model


def _search(
    method_name: str,
    make_search: Callable[[Optimizer, CrossValidationEvaluator, str], PoolSearch],
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    default_models: dict[str, str],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """Check the task, build the optimizer and evaluator, run the strategy with feedback.

    `make_search(optimizer, evaluate, task)` builds the strategy.
    """
    _check_task(dataset_info, method_name)
    model = resolve_model(method, dataset_info, models, default_models)
    space = SearchSpace.from_dict(models[model])
    optimizer = make_optimizer(
        space, derive_seed(seed, "optimizer"), **method["optimizer"]
    )
    evaluate = CrossValidationEvaluator(
        model,
        features,
        target,
        cv_folds,
        random_state=derive_seed(seed, "models"),
        time_limit=method["time_limit"],
    )
    search = make_search(optimizer, evaluate, dataset_info["task"])
    label = f"{method['label']} on {dataset_info['name']}"
    with search_feedback(budget, label) as on_iteration:
        try:
            result = search.run(budget, callbacks=[on_iteration])
        except SearchInterrupted as interrupted:
            interrupted.result.algorithm = model
            raise
    result.algorithm = model
    return result


def search_segor(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    default_models: dict[str, str],
    ensemble: dict[str, Any],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """SEGOR on the out-of-fold predictions of the training part (regression)."""
    sizing, loss = segor_variant(ensemble["variant"])

    def segor(optimizer: Optimizer, evaluate: CrossValidationEvaluator, task: str):
        return SegorSearch(
            optimizer,
            evaluate,
            target,
            cv_folds,
            ensemble_size=ensemble["size"],
            loss=loss,
            sizing=sizing,
        )

    return _search(
        "segor",
        segor,
        features,
        target,
        cv_folds,
        dataset_info,
        method,
        models,
        default_models,
        budget,
        seed,
    )


def search_sego(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    default_models: dict[str, str],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """SEGO on the out-of-fold class predictions of the training part (classification)."""

    def sego(optimizer: Optimizer, evaluate: CrossValidationEvaluator, task: str):
        return SegoSearch(
            optimizer,
            evaluate,
            target,
            cv_folds,
            ensemble_size=method["ensemble_size"],
            loss=method["loss"],
        )

    return _search(
        "sego",
        sego,
        features,
        target,
        cv_folds,
        dataset_info,
        method,
        models,
        default_models,
        budget,
        seed,
    )


def search_esmbo(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    default_models: dict[str, str],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """ESMBO: round-robin SMBO over bootstrap replicas of the validation losses."""

    def esmbo(optimizer: Optimizer, evaluate: CrossValidationEvaluator, task: str):
        return EsmboSearch(
            optimizer,
            evaluate,
            target,
            cv_folds,
            n_replicas=method["n_replicas"],
            loss=method["loss"],
            seed=derive_seed(seed, "bootstrap replicas"),
            task=task,
        )

    return _search(
        "esmbo",
        esmbo,
        features,
        target,
        cv_folds,
        dataset_info,
        method,
        models,
        default_models,
        budget,
        seed,
    )


def search_single_best(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    default_models: dict[str, str],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """SMBO or random search for the single model with the lowest CV loss."""

    def single_best(
        optimizer: Optimizer, evaluate: CrossValidationEvaluator, task: str
    ):
        return SingleBestSearch(
            optimizer, evaluate, target, cv_folds, loss=method["loss"], task=task
        )

    return _search(
        "single_best",
        single_best,
        features,
        target,
        cv_folds,
        dataset_info,
        method,
        models,
        default_models,
        budget,
        seed,
    )


def select_posthoc(
    source: EnsembleSearchResult,
    target: np.ndarray,
    cv_folds: np.ndarray,
    source_name: str,
    posthoc: dict[str, Any],
) -> EnsembleSearchResult:
    """Greedy selection with replacement over the pool saved by `source_name`'s run."""
    try:
        result = posthoc_selection(
            source,
            target,
            cv_folds,
            loss=posthoc["loss"],
            max_size=posthoc["max_size"],
            warm_start=posthoc["warm_start"],
            weighting=posthoc["weighting"],
        )
    except ValueError as error:
        raise ValueError(f"posthoc_source={source_name!r}: {error}") from error
    # The selection curve, step by step, as a search logs its iterations.
    with search_feedback(
        len(result.history), f"{posthoc['label']} from {source_name}"
    ) as on_step:
        for record in result.history:
            on_step(record)
    return result


def select_agnostic_bayes(
    candidates: EnsembleSearchResult,
    target: np.ndarray,
    cv_folds: np.ndarray,
    method: dict[str, Any],
    seed: int,
) -> EnsembleSearchResult:
    """Weight a pool by the agnostic Bayes posterior of each model being the best."""
    result = agnostic_bayes_selection(
        candidates,
        target,
        cv_folds,
        loss=method["loss"],
        posterior=method["posterior"],
        n_samples=method["n_samples"],
        seed=derive_seed(seed, "agnostic bayes"),
    )
    # The search's own curve, then the weighted ensemble as its last step.
    result.history = [
        *candidates.history[:-1],
        replace(result.history[-1], iteration=len(candidates.history) - 1),
    ]
    return result


def test_sample_losses(
    model: Any,
    test_features: pd.DataFrame,
    test_target: pd.Series,
    task: str,
    target_scaling: dict[str, float],
) -> np.ndarray:
    """Per-sample test losses (n_test,) of a fitted model (design.md s.5).

    Regression: squared residuals of the standardized target (SEGOR s.4);
    classification: 0/1 errors. Their mean is the run's test metric.
    """
    predictions = model.predict(test_features)
    if task == "classification":
        return zero_one_loss(predictions, test_target.to_numpy())
    return np.square((predictions - test_target.to_numpy()) / target_scaling["std"])


def refit_and_score(
    search_result: EnsembleSearchResult,
    train_features: pd.DataFrame,
    train_target: pd.Series,
    test_features: pd.DataFrame,
    test_target: pd.Series,
    dataset_info: dict[str, Any],
    target_scaling: dict[str, float],
    voting: str,
    seed: int,
) -> tuple[Pipeline | TransformedTargetRegressor, dict[str, float]]:
    """Refit the ensemble and the single best model on all non-test data and score both.

    Regression scores the MSE of the standardized target (SEGOR s.4), classification
    the error rate (design.md s.5). `voting` is the classifiers' combiner.
    """
    pool, task = search_result.pool, dataset_info["task"]
    model_seed = derive_seed(seed, "models")

    def ensemble_of(weights: dict[int, float]):
        return build_ensemble_model(
            task,
            [
                make_model(search_result.algorithm, pool.configs[i], model_seed)
                for i in weights
            ],
            list(weights.values()),
            dataset_info["categorical_columns"],
            voting=voting,
        )

    def test_loss(model) -> float:
        model.fit(train_features, train_target)
        return float(
            test_sample_losses(
                model, test_features, test_target, task, target_scaling
            ).mean()
        )

    weights = search_result.member_weights
    ensemble_model = ensemble_of(weights)
    name = "test_error" if task == "classification" else "test_mse"
    metrics = {
        f"{name}_ensemble": test_loss(ensemble_model),
        f"{name}_single_best": test_loss(ensemble_of({search_result.best_single: 1.0})),
        "ensemble_members_distinct": float(len(weights)),
        "trials_failed": float((~pool.ok).sum()),
    }
    return ensemble_model, metrics


def report_search(
    search_result: EnsembleSearchResult,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame, plt.Figure, plt.Figure, dict[str, float]]:
    """Trial history, ensemble composition, convergence plot, diversity heatmap and MI."""
    title = f"{method['label']} on {dataset_info['name']}"
    return (
        trial_history(search_result),
        ensemble_composition(search_result),
        convergence_plot(search_result, title),
        diversity_heatmap(search_result, f"Ensemble diversity, {title}"),
        ensemble_diversity(search_result),
    )
