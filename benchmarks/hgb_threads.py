"""Histogram gradient boosting's fit time against its OpenMP threads, by data size.

scikit-learn's histogram gradient boosting starts one OpenMP thread per core
for every fit; on small data the threads' start-up and synchronisation cost
more than the work they share (scikit-learn issue 30662, open). A lone trial
worker is given every core (core.threads): this measures, on this machine,
from how many cells (rows x features) more threads pay.

Each case is a bundled dataset (ordinal-encoded, rows replicated with 1%
noise where a size asks for more rows than it has) fitted with the search
space's fixed settings (100 iterations, no early stopping) and its middle
values of the searched ones, under threadpoolctl limits of 1 to every usable
core; the fastest of `--repeats` fits counts.

    .venv/bin/python benchmarks/hgb_threads.py
    .venv/bin/python benchmarks/hgb_threads.py --rows 1000 4000 16000 64000

Results: benchmarks/results/hgb_threads.{jsonl,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.preprocessing import OrdinalEncoder
from threadpoolctl import threadpool_limits

from ensemble_bo.core.threads import usable_cores

DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
RESULTS = Path(__file__).resolve().parent / "results"
# Middle of the searched ranges (conf/base/parameters_models.yml), fixed ones as set.
SETTINGS = {
    "learning_rate": 0.1,
    "max_leaf_nodes": 31,
    "min_samples_leaf": 10,
    "l2_regularization": 0.1,
    "max_iter": 100,
    "early_stopping": False,
}


def table(name: str, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`rows` rows of the bundled dataset `name`: its features ordinal-encoded,
    replicated with noise of 1% of each feature's sd where `rows` is more."""
    frame = pd.read_csv(DATASETS / f"{name}.csv")
    target = frame.pop("target")
    numeric = pd.api.types.is_numeric_dtype(target)
    y = target.to_numpy(float) if numeric else pd.factorize(target)[0].astype(float)
    categorical = frame.select_dtypes(exclude="number").columns
    if len(categorical):
        frame[categorical] = OrdinalEncoder().fit_transform(frame[categorical])
    X = frame.to_numpy(dtype=float)
    X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    if rows <= len(X):
        return X[:rows], y[:rows]
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(X), rows)
    noise = rng.normal(0, 0.01, (rows, X.shape[1])) * X.std(axis=0)
    return X[index] + noise, y[index]


def fit_seconds(X: np.ndarray, y: np.ndarray, threads: int, repeats: int) -> float:
    best = np.inf
    with threadpool_limits(limits=threads):
        for _ in range(repeats):
            start = time.perf_counter()
            HistGradientBoostingRegressor(**SETTINGS, random_state=0).fit(X, y)
            best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--datasets", nargs="+", default=["concrete", "wage", "spambase", "letter"]
    )
    parser.add_argument("--rows", nargs="+", type=int, default=[500, 2000, 8000, 32000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS / "hgb_threads.jsonl")
    args = parser.parse_args()
    cores = usable_cores()
    threads = sorted({1, *[2**k for k in range(1, 8) if 2**k < cores], cores})
    records = []
    for name in args.datasets:
        for rows in args.rows:
            X, y = table(name, rows)
            seconds = {t: fit_seconds(X, y, t, args.repeats) for t in threads}
            records.append(
                {
                    "dataset": name,
                    "rows": rows,
                    "features": X.shape[1],
                    "cells": X.size,
                    "seconds": seconds,
                    "cores": cores,
                    "machine": platform.processor() or platform.machine(),
                }
            )
            sys.stdout.write(
                f"{name:10s} {rows:6d} x {X.shape[1]:3d}: "
                + ", ".join(f"{t} threads {s:.3f} s" for t, s in seconds.items())
                + "\n"
            )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    header = " | ".join(f"{t} threads s" for t in threads)
    ratios = " | ".join(f"{t} / 1" for t in threads[1:])
    lines = [
        "# Histogram gradient boosting: fit seconds by OpenMP threads",
        "",
        f"{cores} usable cores; fastest of {args.repeats} fits, 100 iterations; "
        "ratio below 1: more threads faster.",
        "",
        f"| dataset | rows | features | cells | {header} | {ratios} |",
        "|---|---:|---:|---:|" + "---:|" * (2 * len(threads) - 1),
    ]
    for record in sorted(records, key=lambda r: r["cells"]):
        seconds = record["seconds"]
        lines.append(
            f"| {record['dataset']} | {record['rows']} | {record['features']} | "
            f"{record['cells']} | "
            + " | ".join(f"{seconds[t]:.3f}" for t in threads)
            + " | "
            + " | ".join(f"{seconds[t] / seconds[1]:.2f}" for t in threads[1:])
            + " |"
        )
    report = "\n".join(lines) + "\n"
    args.output.with_suffix(".md").write_text(report)
    sys.stdout.write(report)


if __name__ == "__main__":
    main()
