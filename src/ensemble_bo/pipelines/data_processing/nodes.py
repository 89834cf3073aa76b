"""Nodes: validate the raw table, hold out the test split, build the model input
and the search's sample of it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ensemble_bo.core.preparation import (
    ModelInput,
    fold_model_input,
    search_input,
    split_dataset,
)


def validate_and_split(
    raw_dataset: pd.DataFrame, dataset: str, options: dict[str, Any], seed: int
) -> dict[str, Any]:
    """Check the table and hold out a seeded test split (stratified for classes).

    Returns the dataset's description and the features and target of both parts.
    """
    split = split_dataset(raw_dataset, dataset, options, seed)
    return {
        "dataset_info": split.info,
        "train_features": split.train_features,
        "train_target": split.train_target,
        "test_features": split.test_features,
        "test_target": split.test_target,
    }


def make_model_input(
    train_features: pd.DataFrame,
    train_target: pd.Series,
    dataset_info: dict[str, Any],
    options: dict[str, Any],
    seed: int,
) -> ModelInput:
    """Encode the features, standardize a regression target, assign the CV folds."""
    return fold_model_input(
        train_features, train_target, dataset_info, options["n_folds"], seed
    )


def sample_search_input(
    model_input: ModelInput, max_search_rows: int | None, seed: int
) -> ModelInput:
    """The rows the search trains on: all of them, or a seeded sample of at
    most `max_search_rows` (each fold and class in its share)."""
    return search_input(model_input, max_search_rows, seed)
