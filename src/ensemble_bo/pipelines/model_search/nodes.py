"""Nodes of the model search pipelines: search, refit and score, report.

The search and selection nodes are made per method from the registry
(core/methods.py); each only wires parameters to `run_method` and a progress
bar, and publishes the iterations for the tracking hook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from sklearn.base import BaseEstimator

import ensemble_bo
from ensemble_bo.core import refit
from ensemble_bo.core.explanations import feature_importance
from ensemble_bo.core.journal import JournalFolder, journal_key
from ensemble_bo.core.methods import Method, Selection, inference_budget, run_method
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.row_capped import large_data_refit
from ensemble_bo.core.validation import multi_fidelity
from ensemble_bo.core.workers import stop_parked_worker
from ensemble_bo.events import SearchResumable, publish, publish_iteration
from ensemble_bo.pipelines.progress import progress_bar
from ensemble_bo.reporting import (
    feature_importance_plot,
    search_reports,
    uncertainty_plot,
)


def display_name_blocks(method: Method) -> tuple[str, ...]:
    """The parameter blocks whose `display_name`s name the method: its search's,
    its selection's."""
    selection = method.selection
    if selection is None or selection.params == method.search_params:
        return (method.search_params,)
    return (method.search_params, selection.params)


def _display_name(blocks: Mapping[str, Any], names: tuple[str, ...]) -> str:
    return " + ".join(blocks[name]["display_name"] for name in names)


def search_node(method: Method) -> Callable[..., EnsembleSearchResult]:
    """The node function running `method`: model input and parameter blocks in.

    Its trials are journaled in `journals`, keyed by everything that
    makes the search, so rerunning a stopped run resumes it; `resume=False`
    drops the journal and starts afresh. A time budget keeps back the time
    of the final model the refit node will fit: `final_model` and the
    conformal parameters, as refit_and_score takes them, over all training
    rows (`training_input`).
    """

    def search(
        model_input: ModelInput,
        training_input: ModelInput,
        seed: int,
        journals: JournalFolder,
        resume: bool,
        final_model: str,
        conformal: bool,
        conformal_rows: int | None,
        split_conformal_above: int | None,
        **settings: Any,
    ) -> EnsembleSearchResult:
        key = journal_key(
            method.name, settings, seed, model_input, ensemble_bo.__version__
        )
        journal = journals.journal(key)
        if not resume:
            journal.discard()
        publish(SearchResumable(str(journal.directory), len(journal.entries())))
        title = f"{_display_name(settings, display_name_blocks(method))} on {model_input.name}"
        with progress_bar(
            settings["budget"],
            title,
            settings["time_budget"],
            multi_fidelity=multi_fidelity(method, settings),
        ) as on_iteration:
            try:
                return run_method(
                    method,
                    model_input,
                    settings,
                    seed,
                    [on_iteration, publish_iteration],
                    journal,
                    refit.final_fit_factor(
                        final_model,
                        model_input,
                        refit.conformal_plan(
                            conformal,
                            training_input,
                            conformal_rows,
                            split_conformal_above,
                        ),
                    ),
                )
            finally:
                # its memory goes before the refit; a later search of the run
                # starts a worker of its own (seconds)
                stop_parked_worker()

    search.__name__ = search.__qualname__ = f"search_{method.name}"
    return search


def selection_node(selection: Selection) -> Callable[..., EnsembleSearchResult]:
    """The node function running `selection` over an earlier run's saved pool."""

    def select(
        source: EnsembleSearchResult,
        model_input: ModelInput,
        source_name: str,
        block: Mapping[str, Any],
        seed: int,
        inference: Mapping[str, float | None],
    ) -> EnsembleSearchResult:
        try:
            settings = selection.settings.parse(
                selection.params, block, (model_input.task,)
            )
            budget = inference_budget(inference, model_input, source.model_name)
            result = selection.select(source, model_input, settings, seed, budget)
        except ValueError as error:
            raise ValueError(
                f"{selection.name}_source={source_name!r}: {error}"
            ) from error
        # The selection curve, step by step, as a search logs its iterations.
        with progress_bar(
            len(result.history), f"{block['display_name']} from {source_name}"
        ) as on_step:
            for record in result.history:
                on_step(record)
                publish_iteration(record)
        return result

    select.__name__ = select.__qualname__ = f"select_{selection.name}"
    return select


def refit_and_score(
    search_result: EnsembleSearchResult,
    search_input: ModelInput,
    model_input: ModelInput,
    train_features: pd.DataFrame,
    train_target: pd.Series,
    test_features: pd.DataFrame,
    test_target: pd.Series,
    voting: str,
    seed: int,
    final_model: str,
    stacking: bool,
    conformal: bool,
    conformal_rows: int | None,
    split_conformal_above: int | None,
    max_search_rows: int | None,
) -> tuple[BaseEstimator, dict[str, float]]:
    """Refit the ensemble and the single best model on all non-test data (or
    bag them over the search's folds) and score both.

    search_input: the rows the search trained on (its pool's rows, which a
    level-2 model learns from); model_input: all training rows. Members
    whose cost grows faster than their rows fit at most `max_search_rows`
    of them, and histogram boosting boosts for more rounds
    (core.row_capped.large_data_refit).
    Regression scores the MSE of the standardized target (SEGOR s.4), classification
    the error rate. `voting` is the classifiers' combiner; `final_model`:
    refit or bagged; `stacking`: whether a level-2 model may combine the
    members; `conformal`: whether the model gives intervals or sets (CV+),
    its fold models fitted on samples of at most `conformal_rows` rows (None:
    all).
    """
    model, metrics, _ = refit.refit_and_score(
        search_result,
        train_features,
        train_target,
        test_features,
        test_target,
        model_input.encoding,
        model_input.target_scaling,
        voting,
        seed,
        refit.bagging_folds(final_model, model_input),
        refit.search_stack(stacking, search_result, search_input, voting),
        refit.conformal_plan(
            conformal, model_input, conformal_rows, split_conformal_above
        ),
        large_data_refit(
            max_search_rows, train_target, search_result.task == "classification"
        ),
    )
    return model, metrics


def uncertainty_report(
    model: BaseEstimator,
    model_input: ModelInput,
    test_features: pd.DataFrame,
    test_target: pd.Series,
) -> Figure:
    """The final model's 90% intervals against the test targets (regression),
    or its reliability diagram and sets (classification)."""
    return uncertainty_plot(
        model,
        test_features,
        test_target,
        model_input.task,
        f"Final model on the test split of {model_input.name}",
    )


def importance_report(
    model: BaseEstimator,
    model_input: ModelInput,
    test_features: pd.DataFrame,
    test_target: pd.Series,
    seed: int,
) -> tuple[pd.DataFrame, Figure]:
    """The final model's permutation feature importance on the test split
    (core.explanations), as a table and a figure."""
    importance = feature_importance(
        model, test_features, test_target, model_input.task, seed
    )
    measure = (
        "rise of the test MSE (target units squared)"
        if model_input.task == "regression"
        else "drop of the test accuracy"
    )
    title = f"Permutation importance on the test split of {model_input.name}"
    return importance, feature_importance_plot(importance, title, measure)


def report_node(names: tuple[str, ...]) -> Callable[..., dict[str, Any]]:
    """The node function reporting a search; the parameter blocks `names` give its title."""

    def report_search(
        search_result: EnsembleSearchResult, model_input: ModelInput, **blocks: Any
    ) -> dict[str, Any]:
        """Every declared report of the search (reporting.SEARCH_REPORTS), by name."""
        title = f"{_display_name(blocks, names)} on {model_input.name}"
        return search_reports(search_result, title)

    return report_search
