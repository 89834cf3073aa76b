"""Nodes: validate the raw table, hold out the test split, define the folds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.core.preparation import (
    assign_folds,
    categorical_columns,
    dataset_fingerprint,
    make_feature_encoder,
    split_train_test,
    validate_dataset,
)
from ensemble_bo.core.seeding import derive_seed


def validate_and_split(
    raw_dataset: pd.DataFrame, dataset: str, options: dict[str, Any], seed: int
) -> dict[str, Any]:
    """Check the table and hold out a seeded test split (stratified for classes).

    Returns the dataset's description and the features and target of both parts.
    """
    target = options["target"]
    task = validate_dataset(
        raw_dataset,
        target,
        options["task"],
        options["test_size"],
        options["n_folds"],
        dataset,
    )
    train_set, test_set = split_train_test(
        raw_dataset, target, task, options["test_size"], derive_seed(seed, "test split")
    )
    info = {
        "name": dataset,
        "task": task,
        "target": target,
        "rows": len(raw_dataset),
        "features": raw_dataset.shape[1] - 1,
        "categorical_columns": categorical_columns(raw_dataset.drop(columns=target)),
        "sha256": dataset_fingerprint(raw_dataset),
        "train_rows": len(train_set),
        "test_rows": len(test_set),
    }
    return {
        "dataset_info": info,
        "train_features": train_set.drop(columns=target),
        "train_target": train_set[target],
        "test_features": test_set.drop(columns=target),
        "test_target": test_set[target],
    }


def make_model_input(
    train_features: pd.DataFrame,
    train_target: pd.Series,
    dataset_info: dict[str, Any],
    options: dict[str, Any],
    seed: int,
) -> dict[str, Any]:
    """Encode the features, standardize a regression target, assign the CV folds.

    Returns the encoded matrix (n, p), the target (n,) (standardized for
    regression, SEGOR s.4; class codes 0..K-1 in sorted label order for
    classification, so out-of-fold predictions are numbers the pool can hold),
    the fold of each row (n,) and the target's scaling.
    """
    target, task = dataset_info["target"], dataset_info["task"]
    matrix = make_feature_encoder(dataset_info["categorical_columns"]).fit_transform(
        train_features
    )
    y = train_target
    scaling = {"mean": 0.0, "std": 1.0}
    if task == "regression":
        # Population std (ddof=0), the same as StandardScaler in the final model.
        scaling = {"mean": float(y.mean()), "std": float(y.std(ddof=0))}
        if scaling["std"] == 0.0:
            raise ValueError(
                f"{dataset_info['name']}: target {target!r} is constant on the training part"
            )
        y = ((y - scaling["mean"]) / scaling["std"]).to_numpy(dtype=float)
    else:
        y = np.unique(y.to_numpy(), return_inverse=True)[1]
    return {
        "model_input_features": np.asarray(matrix, dtype=float),
        "model_input_target": y,
        "cv_folds": assign_folds(
            train_target, task, options["n_folds"], derive_seed(seed, "cv folds")
        ),
        "target_scaling": scaling,
    }
