"""How the configurations a search starts from do on large data's sample.

On data with more training rows than `max_search_rows`, the search trains on
a seeded sample of that many rows (core.preparation.search_input) and starts
from the space's large-data portfolio, then its portfolio less its kernel
machines (conf/base/parameters_large_data_portfolios.yml,
parameters_portfolios.yml). This script evaluates both whole lists,
configuration by configuration, by the
project's 5-fold CV on that sample, one core, as a search's trials would:

- regression (segor_sklearn): the two generated tables of
  benchmarks/scaling_rows.py, concrete replicated to 100,000 rows and
  make_friedman1 at 1,000,000 rows x 20;
- classification (sego_sklearn): the bundled adult table (32,561 rows).

Each record: the CV loss (MSE of the standardized target; log-loss of the
out-of-fold probabilities, labels counted as certain where a model has none),
the trial's seconds and its fold model's pickled size, and that size scaled
to its member refit after the search (core.inference_budget.RefitSizeScale:
by the rows for trees and forests, to the sample's rows for a row-capped SVR
or kNN, not at all for histogram boosting or linear models), which is what
the inference size limit weighs.

    .venv/bin/python benchmarks/large_data_start.py          # ~8 min, one core
    .venv/bin/python benchmarks/large_data_start.py --report

It writes benchmarks/results/large_data_start.jsonl and .md.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# One core: the seconds are those of a single-threaded trial.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from build_portfolio import cv_loss
from scaling_rows import generate

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.methods import inference_budget, search_cross_validation
from ensemble_bo.core.preparation import prepare, search_input
from ensemble_bo.core.trials import TrialRequest
from ensemble_bo.core.workers import WorkerEvaluator

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "large_data_start.jsonl"
PACKAGES = ("scikit-learn", "numpy")
# The data by space: (name, how it is made).
DATASETS = {
    "segor_sklearn": [
        ("concrete_100000", lambda: generate("concrete", 100_000)),
        ("friedman_1000000", lambda: generate("friedman", 1_000_000)),
    ],
    "sego_sklearn": [
        ("adult", lambda: pd.read_csv(PROJECT / "data" / "01_raw" / "adult.csv")),
    ],
}
MB = 1e6


def family(config: dict[str, Any]) -> str:
    return str(config.get("regressor", config.get("classifier")))


def evaluate(space: str, time_limit: float) -> list[dict[str, Any]]:
    """Every start configuration of `space` on each of its datasets' samples."""
    parameters = default_parameters()
    seed = int(parameters["seed"])
    starts = [
        ("large_data_portfolios", i, config)
        for i, config in enumerate(parameters["large_data_portfolios"][space])
    ] + [
        ("portfolios", i, config)
        for i, config in enumerate(parameters["portfolios"][space])
    ]
    records = []
    for name, make in DATASETS[space]:
        _, data = prepare(make(), name, parameters["data_processing"], seed)
        sample = search_input(data, parameters["max_search_rows"], seed)
        scale = inference_budget({}, sample, space).size_scale
        evaluator = WorkerEvaluator(
            search_cross_validation(space, sample, seed), time_limit=time_limit
        )
        for ticket, (start, index, config) in enumerate(starts):
            result = evaluator(TrialRequest(ticket, config))
            records.append(
                {
                    "dataset": name,
                    "space": space,
                    "rows": sample.sampled_from,
                    "sample_rows": len(sample.target),
                    "start": start,
                    "index": index,
                    "family": family(config),
                    "config": config,
                    "cv_loss": cv_loss(sample.task, sample.target, result),
                    "seconds": float(result.fit_seconds),
                    "model_mb": result.model_bytes / MB,
                    "refit_model_mb": result.model_bytes * scale(config) / MB,
                    "error": result.error,
                }
            )
            scripts.log(
                f"{name} {start}[{index}] {family(config)}: "
                f"{records[-1]['cv_loss']:.5f} in {result.fit_seconds:.1f} s"
            )
        evaluator.close()
    return records


def report(records: list[dict[str, Any]], output: Path) -> str:
    lines = [
        "# Large data: the configurations a search starts from",
        "",
        f"From `{scripts.shown(output, PROJECT)}`. Each configuration evaluated "
        "by 5-fold CV on the search's seeded sample of the training rows "
        "(max_search_rows), one core; CV loss: MSE of the standardized target "
        "(regression), log-loss (classification); refit MB: the fold model's "
        "pickled size scaled to its member refit after the search, as its "
        "model grows with its rows, what the inference size limit weighs "
        "(1,000 MB by default).",
        "",
    ]
    header = ["data", "list", "#", "family", "CV loss", "rank", "seconds", "refit MB"]
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        mine = [r for r in records if r["dataset"] == dataset]
        losses = [r["cv_loss"] for r in mine]
        order = np.argsort(np.where(np.isnan(losses), np.inf, losses), kind="stable")
        rank = {int(i): k + 1 for k, i in enumerate(order)}
        rows = [
            [
                f"{dataset} ({r['sample_rows']:,} of {r['rows']:,} rows)",
                "large data" if r["start"] == "large_data_portfolios" else "portfolio",
                str(r["index"] + 1),
                r["family"],
                tables.fmt(r["cv_loss"], 5),
                str(rank[i]) if not math.isnan(r["cv_loss"]) else "failed",
                tables.fmt(r["seconds"], 1),
                tables.fmt(r["refit_model_mb"], 0),
            ]
            for i, r in enumerate(mine)
        ]
        lines += [tables.markdown_table(header, rows), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spaces", nargs="+", choices=list(DATASETS), default=list(DATASETS)
    )
    parser.add_argument(
        "--time-limit", type=float, default=600.0, help="seconds per CV evaluation"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--report", action="store_true", help="only the report")
    args = parser.parse_args()
    if not args.report:
        stamp = scripts.provenance(PACKAGES, PROJECT)
        records = [
            {**record, **stamp}
            for space in args.spaces
            for record in evaluate(space, args.time_limit)
        ]
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            "".join(json.dumps(r, default=float) + "\n" for r in records)
        )
    records = [json.loads(line) for line in args.output.read_text().splitlines()]
    tables.write_report(report(records, args.output), args.output.with_suffix(".md"))


if __name__ == "__main__":
    main()
