"""Categorical encodings compared: one-hot for every text column against a level limit.

For each dataset, seed and encoding, the same search (segor for regression,
sego for classification, the conf/base defaults with `--budget` trials) on
the same split and folds; only the encoding of the text columns differs.
`--levels all` one-hot encodes every categorical column; a number N one-hot
encodes the columns of at most N levels and ordinal-codes the others, which
histogram gradient boosting takes as categories (core.encoding). Prints a
Markdown table (test loss, encoded columns, seconds) and writes it, with
every run's record, under benchmarks/results/.

    nice -n 10 .venv/bin/python benchmarks/categorical_encoding.py \\
        --datasets adult german_credit /path/to/ames.csv --levels all 10 \\
        --seeds 0 1 2 --budget 30 --max-rows 3000

A dataset is a bundled name (data/01_raw) or the path of a CSV file whose
target column is named `target`.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.refit import refit_and_score
from ensemble_bo.validation import load_raw_dataset

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
METHODS = {"regression": "segor", "classification": "sego"}
ONE_HOT_ALL = "all"


def load(dataset: str, max_rows: int | None, seed: int) -> tuple[str, pd.DataFrame]:
    """The dataset's name and table, a seeded sample of `max_rows` rows if larger."""
    path = Path(dataset)
    if path.suffix == ".csv":
        name, raw = path.stem, load_raw_dataset(path.stem, path.parent)
    else:
        name, raw = dataset, scripts.raw_datasets([dataset], PROJECT)[dataset]
    if max_rows is not None and len(raw) > max_rows:
        raw = raw.sample(n=max_rows, random_state=seed).reset_index(drop=True)
    return name, raw


def run_one(
    name: str, raw: pd.DataFrame, levels: str, seed: int, budget: int
) -> dict[str, Any]:
    """One search and its refit under the encoding `levels`: its record."""
    parameters = default_parameters()
    parameters["budget"] = budget
    split, data = prepare(raw, name, parameters["data_processing"], seed)
    limit = 10**9 if levels == ONE_HOT_ALL else int(levels)
    encoding = FeatureEncoding.choose(
        split.train_features, split.info["categorical_columns"], limit
    )
    features = encoding.encoder().fit_transform(split.train_features)
    data = replace(data, features=np.asarray(features, dtype=float), encoding=encoding)
    method = METHODS[data.task]
    start = time.perf_counter()
    result = run_method(method, data, parameters, seed)
    _, metrics, _ = refit_and_score(
        result,
        split.train_features,
        split.train_target,
        split.test_features,
        split.test_target,
        encoding,
        data.target_scaling,
        parameters["voting"],
        seed,
    )
    loss = (
        "test_error_ensemble" if data.task == "classification" else "test_mse_ensemble"
    )
    return {
        "dataset": name,
        "method": method,
        "levels": levels,
        "seed": seed,
        "encoded_columns": data.features.shape[1],
        "ordinal_columns": list(encoding.ordinal),
        "test_loss": metrics[loss],
        "test_log_loss": metrics.get("test_log_loss_ensemble"),
        "seconds": time.perf_counter() - start,
    }


def report(records: list[dict[str, Any]], budget: int) -> str:
    frame = pd.DataFrame(records)
    rows = []
    for (dataset, levels), group in frame.groupby(["dataset", "levels"], sort=False):
        rows.append(
            [
                dataset,
                f"one-hot <= {levels} levels"
                if levels != ONE_HOT_ALL
                else "one-hot all",
                str(int(group["encoded_columns"].iloc[0])),
                tables.fmt(group["test_loss"].mean()),
                tables.fmt(tables.mean_of(group["test_log_loss"])),
                f"{group['seconds'].mean():.1f}",
                str(len(group)),
            ]
        )
    header = [
        "dataset",
        "encoding",
        "encoded columns",
        "test loss (MSE / error)",
        "test log-loss",
        "seconds",
        "seeds",
    ]
    return (
        f"Categorical encodings, segor / sego defaults, {budget} trials, "
        "mean over seeds\n\n" + tables.markdown_table(header, rows) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "german_credit"])
    parser.add_argument("--levels", nargs="+", default=[ONE_HOT_ALL, "10"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=30, help="trials per search")
    parser.add_argument(
        "--max-rows", type=int, default=3000, help="a seeded sample of larger tables"
    )
    parser.add_argument("--output", default="categorical_encoding")
    parser.add_argument(
        "--report", action="store_true", help="only re-read the records and report"
    )
    args = parser.parse_args()
    records_path = RESULTS / f"{args.output}.jsonl"
    if args.report:
        records = [json.loads(line) for line in records_path.read_text().splitlines()]
        tables.write_report(report(records, args.budget), RESULTS / f"{args.output}.md")
        return
    scripts.quiet_learners()
    RESULTS.mkdir(parents=True, exist_ok=True)
    records_path.write_text("")
    records = []
    # seed by seed, so that a run cut short still compares encodings on its seeds
    for seed in args.seeds:
        for dataset in args.datasets:
            name, raw = load(dataset, args.max_rows, seed)
            for levels in args.levels:
                record = run_one(name, raw, levels, seed, args.budget)
                scripts.log(json.dumps(record))
                with records_path.open("a") as lines:
                    lines.write(json.dumps(record) + "\n")
                records.append(record)
    tables.write_report(report(records, args.budget), RESULTS / f"{args.output}.md")


if __name__ == "__main__":
    main()
