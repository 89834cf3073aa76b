"""Dataset validation, seeded splits, feature encoding and the model input (design.md s.5)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import KFold, StratifiedKFold, train_test_split
from sklearn.preprocessing import OneHotEncoder

from ensemble_bo.core.seeding import derive_seed

TASKS = ("regression", "classification")
# A numeric target with at most this many distinct values is taken for class labels.
MAX_CLASSES_FOR_AUTO = 20


def dataset_fingerprint(data: pd.DataFrame) -> str:
    """sha256 of the table's content (values, column names and dtypes)."""
    digest = hashlib.sha256()
    digest.update(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes())
    digest.update(repr(list(zip(data.columns, data.dtypes.astype(str)))).encode())
    return digest.hexdigest()


def infer_task(target: pd.Series, task: str = "auto") -> str:
    """'regression' or 'classification': as given, or inferred from the target."""
    if task in TASKS:
        return task
    if task != "auto":
        raise ValueError(f"unknown task {task!r}; expected one of {[*TASKS, 'auto']}")
    if not is_numeric_dtype(target) or target.nunique() <= MAX_CLASSES_FOR_AUTO:
        return "classification"
    return "regression"


def validate_dataset(
    data: pd.DataFrame,
    target: str,
    task: str,
    test_size: float,
    n_folds: int,
    name: str = "dataset",
) -> str:
    """The resolved task ('auto' is inferred from the target).

    Raises ValueError naming the offending column or value if `data` can't be used.
    """
    if target not in data.columns:
        raise ValueError(
            f"{name}: target column {target!r} not found; columns are {list(data.columns)}"
        )
    if data.shape[1] < 2:
        raise ValueError(f"{name}: no feature columns besides the target {target!r}")
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")
    if int(n_folds) != n_folds or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
    y = data[target]
    task = infer_task(y, task)
    missing = y.isna().to_numpy()
    if missing.any():
        rows = np.flatnonzero(missing)
        raise ValueError(
            f"{name}: target column {target!r} has {missing.sum()} missing value(s), "
            f"first at row(s) {rows[:5].tolist()}"
        )
    if task == "regression":
        if not is_numeric_dtype(y):
            bad = y[pd.to_numeric(y, errors="coerce").isna()].iloc[0]
            raise ValueError(
                f"{name}: regression needs a numeric target, but column {target!r} has "
                f"dtype {y.dtype} (e.g. value {bad!r})"
            )
        if not np.isfinite(y.to_numpy(dtype=float)).all():
            raise ValueError(f"{name}: target column {target!r} has infinite values")
    n_train = len(data) - math.ceil(test_size * len(data))
    if n_train < 2 * n_folds:
        raise ValueError(
            f"{name}: {len(data)} rows leave {n_train} for training after the "
            f"{test_size:g} test split, too few for {n_folds} folds (need {2 * n_folds})"
        )
    if task == "classification":
        counts = y.value_counts()
        # Both the stratified test split and the stratified folds need each class
        # present in every fold of the training part.
        smallest = counts.idxmin()
        if math.floor(counts.min() * (1 - test_size)) < n_folds:
            raise ValueError(
                f"{name}: class {smallest!r} of {target!r} has only {counts.min()} rows, "
                f"too few for {n_folds} stratified folds after the {test_size:g} test split"
            )
    return task


def split_train_test(
    data: pd.DataFrame, target: str, task: str, test_size: float, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seeded hold-out split, stratified for classification."""
    stratify = data[target] if task == "classification" else None
    train, test = train_test_split(
        data, test_size=test_size, random_state=seed, stratify=stratify
    )
    return train.reset_index(drop=True), test.reset_index(drop=True)


def assign_folds(y: pd.Series, task: str, n_folds: int, seed: int) -> np.ndarray:
    """Fold index (0..k-1) of every training row, shape (n,); stratified for classification."""
    splitter_class = StratifiedKFold if task == "classification" else KFold
    splitter = splitter_class(n_splits=n_folds, shuffle=True, random_state=seed)
    fold_ids = np.empty(len(y), dtype=int)
    for fold, (_, held_out) in enumerate(splitter.split(np.zeros(len(y)), y)):
        fold_ids[held_out] = fold
    return fold_ids


def categorical_columns(features: pd.DataFrame) -> list[str]:
    """Columns that need encoding: every non-numeric (text, category, bool) column."""
    return [
        column
        for column in features.columns
        if not is_numeric_dtype(features[column]) or features[column].dtype == bool
    ]


def make_feature_encoder(categorical: list[str]) -> ColumnTransformer:
    """One-hot for `categorical` columns, numeric columns passed through.

    Unknown categories at prediction time become all-zero rows instead of errors.
    """
    return ColumnTransformer(
        [
            (
                "one_hot",
                OneHotEncoder(handle_unknown="ignore", sparse_output=False),
                categorical,
            )
        ],
        remainder="passthrough",
        verbose_feature_names_out=False,
    )


@dataclass(frozen=True)
class DatasetSplit:
    """A validated table held out into a training and a test part.

    `info` describes the dataset: name, task, target, rows, features,
    categorical_columns, sha256, train_rows, test_rows.
    """

    info: dict[str, Any]
    train_features: pd.DataFrame
    train_target: pd.Series
    test_features: pd.DataFrame
    test_target: pd.Series


@dataclass(frozen=True)
class ModelInput:
    """What a search trains on: the encoded training part and its CV folds.

    features: (n, p) encoded features; target: (n,) standardized regression
    target (SEGOR s.4) or class codes 0..K-1 in sorted label order; fold_ids:
    (n,) fold of each row; target_scaling: the raw target's mean and std
    (identity for classes); dataset: the DatasetSplit's info (or the caller's
    description: at least name, task and categorical_columns).
    """

    features: np.ndarray
    target: np.ndarray
    fold_ids: np.ndarray
    task: str
    target_scaling: dict[str, float]
    dataset: dict[str, Any]

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; expected one of {TASKS}")
        if not len(self.features) == len(self.target) == len(self.fold_ids):
            raise ValueError(
                f"features, target and fold_ids differ in length: "
                f"{len(self.features)}, {len(self.target)}, {len(self.fold_ids)}"
            )

    @property
    def name(self) -> str:
        return str(self.dataset.get("name", "data"))


def split_dataset(
    raw: pd.DataFrame, name: str, options: Mapping[str, Any], seed: int
) -> DatasetSplit:
    """Check the table and hold out a seeded test split (stratified for classes).

    options: the `data_processing` parameters (target, task, test_size, n_folds).
    """
    target = options["target"]
    task = validate_dataset(
        raw, target, options["task"], options["test_size"], options["n_folds"], name
    )
    train_set, test_set = split_train_test(
        raw, target, task, options["test_size"], derive_seed(seed, "test split")
    )
    info = {
        "name": name,
        "task": task,
        "target": target,
        "rows": len(raw),
        "features": raw.shape[1] - 1,
        "categorical_columns": categorical_columns(raw.drop(columns=target)),
        "sha256": dataset_fingerprint(raw),
        "train_rows": len(train_set),
        "test_rows": len(test_set),
    }
    return DatasetSplit(
        info,
        train_set.drop(columns=target),
        train_set[target],
        test_set.drop(columns=target),
        test_set[target],
    )


def make_model_input(
    features: pd.DataFrame,
    target: pd.Series,
    dataset: Mapping[str, Any],
    fold_ids: np.ndarray,
) -> ModelInput:
    """Encode the features and standardize a regression target (or code the classes).

    dataset: at least name, task and categorical_columns (a DatasetSplit's info).
    """
    task = dataset["task"]
    matrix = make_feature_encoder(dataset["categorical_columns"]).fit_transform(
        features
    )
    scaling = {"mean": 0.0, "std": 1.0}
    if task == "regression":
        # Population std (ddof=0), the same as StandardScaler in the final model.
        scaling = {"mean": float(target.mean()), "std": float(target.std(ddof=0))}
        if scaling["std"] == 0.0:
            raise ValueError(
                f"{dataset['name']}: target {target.name!r} is constant on the "
                "training part"
            )
        y = ((target - scaling["mean"]) / scaling["std"]).to_numpy(dtype=float)
    else:
        y = np.unique(target.to_numpy(), return_inverse=True)[1]
    return ModelInput(
        np.asarray(matrix, dtype=float),
        y,
        np.asarray(fold_ids),
        task,
        scaling,
        dict(dataset),
    )


def fold_model_input(
    features: pd.DataFrame,
    target: pd.Series,
    dataset: Mapping[str, Any],
    n_folds: int,
    seed: int,
) -> ModelInput:
    """The model input of a training part with seeded folds (stratified for classes)."""
    fold_ids = assign_folds(
        target, dataset["task"], n_folds, derive_seed(seed, "cv folds")
    )
    return make_model_input(features, target, dataset, fold_ids)


def prepare(
    raw: pd.DataFrame, name: str, options: Mapping[str, Any], seed: int
) -> tuple[DatasetSplit, ModelInput]:
    """Split, encode and fold a raw table as the data_processing pipeline does.

    options: the `data_processing` parameters (target, task, test_size, n_folds).
    """
    split = split_dataset(raw, name, options, seed)
    return split, fold_model_input(
        split.train_features, split.train_target, split.info, options["n_folds"], seed
    )
