"""Dataset validation, seeded splits, feature encoding and the model input.

The evaluation protocol of the papers: a seeded 33% test split (stratified
for classes), k seeded CV folds on the rest, a regression target standardized
on the training part (SEGOR s.4).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype
from sklearn.model_selection import KFold, StratifiedKFold, train_test_split

from ensemble_bo.core.column_checks import check_target_scale, check_text_features
from ensemble_bo.core.encoding import FeatureEncoding, categorical_columns
from ensemble_bo.core.evaluation import check_row_limit, seeded_order
from ensemble_bo.core.messages import examples, plain
from ensemble_bo.core.seeding import derive_seed

TASKS = ("regression", "classification")
# What `data_processing.task` may be: a task, or auto (decided from the target).
TASK_OPTIONS = (*TASKS, "auto")
# task auto: a numeric target whose values are all integers, with at most this
# many distinct values, is taken for class labels.
MAX_CLASSES_FOR_AUTO = 20
# task auto: a text target with more than MAX_CLASSES_FOR_AUTO distinct values is
# refused when more than this share of its values look like numbers with a unit
# ("79.9 MPa"), or when more than this share of the rows has a value of its own
# (identifiers, free text): such a column is neither numbers nor class labels.
UNCLEAR_TEXT_TARGET_SHARE = 0.5
_LEADING_NUMBER = re.compile(r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_SET_THE_TASK = (
    "set data_processing.task (e.g. --params data_processing.task=regression)"
)
logger = logging.getLogger(__name__)


def dataset_fingerprint(data: pd.DataFrame) -> str:
    """sha256 of the table's content (values, column names and dtypes)."""
    digest = hashlib.sha256()
    digest.update(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes())
    digest.update(repr(list(zip(data.columns, data.dtypes.astype(str)))).encode())
    return digest.hexdigest()


def target_numbers(target: pd.Series) -> pd.Series | None:
    """The target as floats when every value is a number, else None.

    A numeric column, or text whose every value parses as a number ("79.9" but
    not "79.9 MPa"); booleans are not numbers here (they are two classes).
    """
    if is_bool_dtype(target):
        return None
    if is_numeric_dtype(target):
        return target.astype(float)
    parsed = pd.to_numeric(target, errors="coerce")
    return parsed.astype(float) if parsed.notna().all() else None


def infer_task(
    target: pd.Series,
    task: str = "auto",
    name: str = "dataset",
    tasks: Collection[str] = TASKS,
) -> str:
    """'regression' or 'classification': `task` as given, or decided from the target.

    tasks: those of the method that takes the target. One that serves only
    regression takes every target as regression (`validate_target` refuses
    one that is not numbers); one that serves only classification takes
    whole numbers as classes however many distinct values they have.
    Otherwise task auto decides from the target's values (missing values ignored):

    - booleans: classification;
    - numbers (a numeric column, or text whose every value parses as a number):
      classification when every value is an integer and there are at most
      MAX_CLASSES_FOR_AUTO distinct values, else regression;
    - other text: classification (the values are class labels), unless it has
      more than MAX_CLASSES_FOR_AUTO distinct values that mostly look like numbers
      with a unit ("79.9 MPa") or mostly occur once: that is refused, naming an
      example, since it is neither a numeric target nor class labels.

    `data_processing.task: regression | classification` overrides the decision.
    """
    if task in TASKS:
        return task
    if task != "auto":
        raise ValueError(
            f"data_processing.task: unknown task {task!r}; expected one of "
            f"{list(TASK_OPTIONS)}"
        )
    if set(tasks) == {"regression"}:
        return "regression"
    values = target.dropna()
    if is_bool_dtype(values) or all(
        isinstance(value, bool | np.bool_) for value in values.unique()
    ):
        return "classification"
    numbers = target_numbers(values)
    if numbers is not None:
        integers = bool((numbers == np.round(numbers)).all())
        few = numbers.nunique() <= MAX_CLASSES_FOR_AUTO
        only_classes = set(tasks) == {"classification"}
        return "classification" if integers and (few or only_classes) else "regression"
    distinct = values.nunique()
    if distinct <= MAX_CLASSES_FOR_AUTO:
        return "classification"
    text = values.astype(str)
    with_unit = text[text.str.match(_LEADING_NUMBER)]
    column = f"{name}: target column {target.name!r}"
    if len(with_unit) > UNCLEAR_TEXT_TARGET_SHARE * len(text):
        raise ValueError(
            f"{column} holds text that looks like numbers with a unit "
            f"(e.g. {examples(with_unit)}), so it is neither numbers nor class "
            "labels; make the column numeric (strip the unit) for regression, or "
            f"{_SET_THE_TASK.replace('=regression', '=classification')} if these "
            "are classes"
        )
    if distinct > UNCLEAR_TEXT_TARGET_SHARE * len(text):
        raise ValueError(
            f"{column} has {distinct} distinct text values in {len(text)} rows "
            f"(e.g. {examples(text)}), too many to be class labels; choose the "
            "column to predict with data_processing.target, or "
            f"{_SET_THE_TASK.replace('=regression', '=classification')} to take "
            "them as classes anyway"
        )
    return "classification"


def uniform_labels(target: pd.Series) -> pd.Series:
    """Class labels of one kind, as scikit-learn's stratified splits need them.

    A text column of Python objects holding only booleans becomes a boolean
    column; one mixing kinds (1 and "a") becomes text. Others are unchanged.
    """
    if target.dtype != object:
        return target
    kinds = {type(value) for value in target.dropna()}
    if kinds <= {bool, np.bool_}:
        return target.astype(bool)
    if len(kinds) > 1:
        return target.astype(str)
    return target


def check_split_options(task: Any, test_size: Any, n_folds: Any) -> None:
    """The `data_processing` options `task`, `test_size` and `n_folds`, or ValueError."""
    if task not in TASK_OPTIONS:
        raise ValueError(
            f"data_processing.task: unknown task {task!r}; expected one of "
            f"{list(TASK_OPTIONS)}"
        )
    if (
        isinstance(test_size, bool)
        or not isinstance(test_size, Real)
        or not 0.0 < test_size < 1.0
    ):
        raise ValueError(
            f"data_processing.test_size must be in (0, 1), got {test_size!r} (the "
            "share of rows held out for the test, e.g. 0.33)"
        )
    if isinstance(n_folds, bool) or not isinstance(n_folds, Integral) or n_folds < 2:
        raise ValueError(
            f"data_processing.n_folds must be an integer >= 2, got {n_folds!r} (the "
            "number of cross-validation folds, e.g. 5)"
        )


def check_table(data: pd.DataFrame, name: str = "dataset") -> None:
    """A table with rows and distinct column names, or ValueError naming the problem."""
    if data.shape[1] == 0:
        raise ValueError(
            f"{name}: the table has no columns (is the CSV file empty?); it needs a "
            "header line naming the columns, then one line per example"
        )
    if len(data) == 0:
        raise ValueError(
            f"{name}: the table has a header ({list(data.columns)}) but no rows; add "
            "the examples, one line each"
        )
    duplicated = sorted(set(data.columns[data.columns.duplicated()]), key=str)
    if duplicated:
        raise ValueError(
            f"{name}: column name(s) {duplicated} appear more than once; give every "
            "column its own name"
        )


def validate_features(features: pd.DataFrame, name: str = "dataset") -> None:
    """Features the models can take, or ValueError naming the columns.

    Missing values are allowed (every model imputes them or splits on
    them, see zoo.py), but not a column with no value at all, nor infinities,
    nor a date or identifier-like column (core.column_checks).
    """
    empty = [column for column in features.columns if features[column].isna().all()]
    if empty:
        raise ValueError(
            f"{name}: feature column(s) {empty} have no value at all (every row "
            "missing); drop them from the table"
        )
    numeric = [
        column
        for column in features.columns
        if is_numeric_dtype(features[column]) and not is_bool_dtype(features[column])
    ]
    infinite = {
        column: int(np.isinf(features[column].to_numpy(dtype=float)).sum())
        for column in numeric
    }
    infinite = {column: count for column, count in infinite.items() if count}
    if infinite:
        raise ValueError(
            f"{name}: feature column(s) {list(infinite)} hold infinite values "
            f"(inf or -inf; count per column: {infinite}); replace them with finite "
            "numbers, or leave the cells empty (missing values are imputed)"
        )
    check_text_features(features, name)


def validate_target(y: pd.Series, task: str = "auto", name: str = "dataset") -> str:
    """The task (auto decided by `infer_task`) of a usable target, or ValueError.

    A usable target has no missing value, more than one distinct value and,
    for regression, finite numbers (numeric text such as "79.9" included)
    whose scale no few values set (core.column_checks.check_target_scale).
    """
    column = f"{name}: target column {y.name!r}"
    missing = y.isna().to_numpy()
    if missing.any():
        rows = np.flatnonzero(missing)
        raise ValueError(
            f"{column} has {missing.sum()} missing value(s), first at row(s) "
            f"{rows[:5].tolist()}; drop or fill those rows"
        )
    if y.nunique() == 1:
        raise ValueError(
            f"{column} has the same value ({plain(y.iloc[0])!r}) in every row: there is "
            "nothing to predict (one class, or a constant); choose another target "
            "column (data_processing.target) or dataset"
        )
    task = infer_task(y, task, name)
    if task == "regression":
        numbers = target_numbers(y)
        if numbers is None:
            # booleans convert to numbers, and are refused all the same
            not_numbers = y[pd.to_numeric(y, errors="coerce").isna()]
            bad = (not_numbers if len(not_numbers) else y).iloc[0]
            raise ValueError(
                f"{name}: regression needs a numeric target, but column {y.name!r} "
                f"has dtype {y.dtype} (e.g. value {plain(bad)!r}); make the column numeric "
                "(strip units, fix typos), or, if it holds class labels, take it as a "
                "classification task (data_processing.task=classification; in Python, "
                "task='classification') with a method that builds classification "
                "ensembles"
            )
        infinite = np.flatnonzero(~np.isfinite(numbers.to_numpy()))
        if infinite.size:
            raise ValueError(
                f"{column} has {infinite.size} infinite value(s), first at row(s) "
                f"{infinite[:5].tolist()}; replace or drop them"
            )
        check_target_scale(numbers.to_numpy(), column)
    return task


def validate_dataset(
    data: pd.DataFrame,
    target: str,
    task: str,
    test_size: float,
    n_folds: int,
    name: str = "dataset",
) -> str:
    """The resolved task ('auto' is decided from the target, see `infer_task`).

    Raises ValueError naming the offending option, column, value or rows, and
    what to do, if `data` can't be used: options out of range, an empty table,
    duplicate column names, no target column or no feature column, a target
    with missing values, one value or (regression) non-numbers, infinities or
    a scale set by a few values (core.column_checks), a feature column without
    any value, with infinities, of dates or of identifiers, too few rows for
    the folds, a class too small for stratified folds.
    """
    check_split_options(task, test_size, n_folds)
    check_table(data, name)
    if target not in data.columns:
        raise ValueError(
            f"{name}: target column {target!r} not found; columns are "
            f"{list(data.columns)}; set data_processing.target to the column to predict"
        )
    if data.shape[1] < 2:
        raise ValueError(
            f"{name}: no feature columns besides the target {target!r}; the table "
            "needs at least one column to predict from"
        )
    y = data[target]
    task = validate_target(y, task, name)
    validate_features(data.drop(columns=target), name)
    n_train = len(data) - math.ceil(test_size * len(data))
    if n_train < 2 * n_folds:
        raise ValueError(
            f"{name}: {len(data)} rows leave {n_train} for training after the "
            f"{test_size:g} test split, too few for {n_folds} folds (need "
            f"{2 * n_folds}); lower data_processing.n_folds or use more rows"
        )
    if task == "classification":
        counts = y.value_counts()
        # Both the stratified test split and the stratified folds need each class
        # present in every fold of the training part.
        smallest = plain(counts.idxmin())
        if math.floor(counts.min() * (1 - test_size)) < n_folds:
            raise ValueError(
                f"{name}: class {smallest!r} of {target!r} has only {counts.min()} rows, "
                f"too few for {n_folds} stratified folds after the {test_size:g} test "
                "split; lower data_processing.n_folds, merge or drop rare classes, or "
                "set data_processing.task=regression if the target is a quantity"
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
    if task == "classification":
        y = uniform_labels(y)
    fold_ids = np.empty(len(y), dtype=int)
    for fold, (_, held_out) in enumerate(splitter.split(np.zeros(len(y)), y)):
        fold_ids[held_out] = fold
    return fold_ids


@dataclass(frozen=True)
class DatasetSplit:
    """A validated table held out into a training and a test part.

    `info` describes the dataset: name, task, target, rows, features,
    categorical_columns, ordinal_columns (those of them with more levels than
    one-hot encoding takes, core.encoding), encoded_features (the columns after
    encoding, fitted on the training part), fingerprint, train_rows, test_rows.
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
    description: at least name, task and categorical_columns); encoding: how
    the raw categorical columns became `features` (its `categorical_features`
    are the columns of category codes); sampled_from: the number of training
    rows this input is a sample of (search_input), None: it holds them all;
    given_folds: the folds are the caller's (a splitter's, which may keep
    groups apart), so no other split of the rows may be drawn
    (core.revalidation).
    """

    features: np.ndarray
    target: np.ndarray
    fold_ids: np.ndarray
    task: str
    target_scaling: dict[str, float]
    dataset: dict[str, Any]
    encoding: FeatureEncoding = FeatureEncoding()
    sampled_from: int | None = None
    given_folds: bool = False

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
    fingerprint = dataset_fingerprint(raw)  # of the table as given
    if task == "regression" and not is_numeric_dtype(raw[target]):
        # Text whose every value is a number ("79.9"): the numbers are the target.
        raw = raw.assign(**{target: target_numbers(raw[target])})
    if task == "classification":
        raw = raw.assign(**{target: uniform_labels(raw[target])})
    train_set, test_set = split_train_test(
        raw, target, task, options["test_size"], derive_seed(seed, "test split")
    )
    categorical = categorical_columns(raw.drop(columns=target))
    train_features = train_set.drop(columns=target)
    encoding = FeatureEncoding.choose(train_features, categorical)
    info = {
        "name": name,
        "task": task,
        "target": target,
        "rows": len(raw),
        "features": raw.shape[1] - 1,
        "categorical_columns": categorical,
        "ordinal_columns": list(encoding.ordinal),
        # what the models see: more of them than training rows is warned of
        # (make_model_input), and logged with the dataset's description
        "encoded_features": len(
            encoding.encoder().fit(train_features).get_feature_names_out()
        ),
        "fingerprint": fingerprint,
        "train_rows": len(train_set),
        "test_rows": len(test_set),
    }
    return DatasetSplit(
        info,
        train_features,
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

    dataset: at least name, task and categorical_columns (a DatasetSplit's info);
    their encoding is chosen by their levels in `features` (core.encoding).
    More encoded features than rows is allowed, with a logged warning.
    """
    task = dataset["task"]
    encoding = FeatureEncoding.choose(features, dataset["categorical_columns"])
    matrix = encoding.encoder().fit_transform(features)
    if matrix.shape[1] > len(matrix):
        # Not refused: wide data is common (measurements of many genes), and
        # trees and regularized models take it; but the user should know.
        logger.warning(
            "%s: %d features (after one-hot encoding) for %d training rows, more "
            "features than rows: models may overfit, and trials take longer; "
            "fewer, more informative columns usually serve better",
            dataset["name"],
            matrix.shape[1],
            len(matrix),
        )
    scaling = {"mean": 0.0, "std": 1.0}
    if task == "regression":
        if not is_numeric_dtype(target) or is_bool_dtype(target):
            numbers = target_numbers(target)
            if numbers is None:
                raise ValueError(
                    f"{dataset['name']}: regression needs a numeric target, but "
                    f"{target.name!r} holds values that are not numbers"
                )
            target = numbers
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
        encoding,
    )


def search_input(data: ModelInput, max_rows: int | None, seed: int) -> ModelInput:
    """What the search trains on: `data`, or when it has more than `max_rows`
    training rows, a seeded sample of `max_rows` of them (rows in their order).

    Each fold, and within it each class, keeps its share of the rows (a
    prefix of core.evaluation.seeded_order stratified by both), so
    the sample's folds are the data's folds, smaller. Every trial fits and
    predicts the sample only: a trial's cost, the pool's memory (trials x
    max_rows) and the selection's steps stop growing with the data; the
    final ensemble is refit (or bagged) on every row. max_rows: an integer
    >= core.evaluation.MIN_SEARCH_ROWS or None (every row).
    """
    max_rows = check_row_limit(max_rows)
    n = len(data.target)
    if max_rows is None or n <= max_rows:
        return data
    strata = data.fold_ids.astype(np.int64)
    if data.task == "classification":
        strata = strata * (int(data.target.max()) + 1) + data.target
    order = seeded_order(n, derive_seed(seed, "search sample"), strata)
    rows = np.sort(order[:max_rows])
    logger.info(
        "%s: the search trains on a sample of %d of its %d training rows "
        "(max_search_rows), the final ensemble on all of them",
        data.name,
        max_rows,
        n,
    )
    return replace(
        data,
        features=data.features[rows],
        target=data.target[rows],
        fold_ids=data.fold_ids[rows],
        sampled_from=n,
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
