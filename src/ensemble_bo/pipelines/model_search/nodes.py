"""Nodes of the model search pipelines: search, refit and score, report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.compose import TransformedTargetRegressor

from ensemble_bo.core.estimator import build_regression_ensemble
from ensemble_bo.core.evaluation import CrossValidationEvaluator
from ensemble_bo.core.optimizer import Optimizer, make_optimizer
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import (
    EnsembleSearchResult,
    EsmboSearch,
    PoolSearch,
    SegorSearch,
    SingleBestSearch,
    agnostic_bayes_selection,
    posthoc_selection,
)
from ensemble_bo.core.zoo import make_model
from ensemble_bo.pipelines.progress import search_feedback
from ensemble_bo.reporting import (
    convergence_plot,
    diversity_heatmap,
    ensemble_composition,
    ensemble_diversity,
    trial_history,
)


def _check_regression(dataset_info: dict[str, Any], method: dict[str, Any]) -> None:
    if dataset_info["task"] != "regression":
        raise ValueError(
            f"dataset {dataset_info['name']!r} is a {dataset_info['task']} task; the "
            f"{method['label']} pipeline builds regression models (SEGO, for "
            "classification, is a separate pipeline)"
        )


def _search(
    make_search: Callable[[Optimizer, CrossValidationEvaluator], PoolSearch],
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """Check the task, build the optimizer and evaluator, run the strategy with feedback."""
    _check_regression(dataset_info, method)
    if method["model"] not in models:
        raise ValueError(
            f"{method['label']}: model={method['model']!r} has no search space under "
            f"`models` (conf/base/parameters_models.yml); available: {sorted(models)}"
        )
    space = SearchSpace.from_dict(models[method["model"]])
    optimizer = make_optimizer(
        space, derive_seed(seed, "optimizer"), **method["optimizer"]
    )
    evaluate = CrossValidationEvaluator(
        method["model"],
        features,
        target,
        cv_folds,
        random_state=derive_seed(seed, "models"),
    )
    search = make_search(optimizer, evaluate)
    label = f"{method['label']} on {dataset_info['name']}"
    with search_feedback(budget, label) as on_iteration:
        return search.run(budget, callbacks=[on_iteration])


def search_ensemble(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    ensemble: dict[str, Any],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """SEGOR on the out-of-fold predictions of the training part."""

    def segor(optimizer: Optimizer, evaluate: CrossValidationEvaluator) -> PoolSearch:
        return SegorSearch(
            optimizer,
            evaluate,
            target,
            cv_folds,
            ensemble_size=ensemble["size"],
            loss=ensemble["loss"],
            sizing=ensemble["size_method"],
        )

    return _search(
        segor, features, target, cv_folds, dataset_info, method, models, budget, seed
    )


def search_esmbo(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """ESMBO: round-robin SMBO over bootstrap replicas of the validation losses."""

    def esmbo(optimizer: Optimizer, evaluate: CrossValidationEvaluator) -> PoolSearch:
        return EsmboSearch(
            optimizer,
            evaluate,
            target,
            cv_folds,
            n_replicas=method["n_replicas"],
            loss=method["loss"],
            seed=derive_seed(seed, "bootstrap replicas"),
        )

    return _search(
        esmbo, features, target, cv_folds, dataset_info, method, models, budget, seed
    )


def search_single_best(
    features: np.ndarray,
    target: np.ndarray,
    cv_folds: np.ndarray,
    dataset_info: dict[str, Any],
    method: dict[str, Any],
    models: dict[str, Any],
    budget: int,
    seed: int,
) -> EnsembleSearchResult:
    """SMBO or random search for the single model with the lowest CV loss."""

    def single_best(
        optimizer: Optimizer, evaluate: CrossValidationEvaluator
    ) -> PoolSearch:
        return SingleBestSearch(
            optimizer, evaluate, target, cv_folds, loss=method["loss"]
        )

    return _search(
        single_best,
        features,
        target,
        cv_folds,
        dataset_info,
        method,
        models,
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


def refit_and_score(
    search_result: EnsembleSearchResult,
    train_features: pd.DataFrame,
    train_target: pd.Series,
    test_features: pd.DataFrame,
    test_target: pd.Series,
    dataset_info: dict[str, Any],
    target_scaling: dict[str, float],
    method: dict[str, Any],
    seed: int,
) -> tuple[TransformedTargetRegressor, dict[str, float]]:
    """Refit the ensemble and the single best model on all non-test data and score both."""
    pool = search_result.pool
    model_seed = derive_seed(seed, "models")
    weights = search_result.member_weights
    ensemble_model = build_regression_ensemble(
        [make_model(method["model"], pool.configs[i], model_seed) for i in weights],
        list(weights.values()),
        dataset_info["categorical_columns"],
    )
    best = search_result.best_single
    single_model = build_regression_ensemble(
        [make_model(method["model"], pool.configs[best], model_seed)],
        [1.0],
        dataset_info["categorical_columns"],
    )

    def standardized_test_mse(model: TransformedTargetRegressor) -> float:
        # MSE of the standardized target (SEGOR s.4), scaled by the training part's std.
        model.fit(train_features, train_target)
        residuals = model.predict(test_features) - test_target.to_numpy()
        return float(np.mean(np.square(residuals / target_scaling["std"])))

    metrics = {
        "test_mse_ensemble": standardized_test_mse(ensemble_model),
        "test_mse_single_best": standardized_test_mse(single_model),
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
