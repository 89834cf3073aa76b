"""Stacked against plain final ensembles of the same search, and how CV chooses.

For each dataset and seed, one default search (segor for regression, sego
with the log-loss for classification, `--budget` trials: a budget in trials,
not seconds, so both final models come from exactly the same pool and
ensemble), then its final ensemble built three ways and scored on the test
split: plain (the members' weighted mean), stacked (a level-2 model on the
members' out-of-fold predictions, core.stacking, shipped whatever CV says),
and what `stacking: true` ships (the stack only where its CV loss on the
search's folds beats the plain ensemble's). Also each one's CV loss: the
plain ensemble's is the loss it was chosen on, the stack's is cross-validated.

    nice -n 10 .venv/bin/python benchmarks/stacking.py --suite heldout --seeds 0 1

Appends one JSON line per search to benchmarks/results/stacking_<suite>.jsonl
(a rerun skips the (dataset, seed) pairs already there) and writes the report
to the .md beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.refit import refit_and_score
from ensemble_bo.core.stacking import fitted_stack
from ensemble_bo.manifest import read_manifest

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
SUITES = {
    "bundled": PROJECT / "data" / "01_raw",
    "heldout": PROJECT / "benchmarks" / "heldout",
}
# The bundled suite of the peer comparison: adult and letter left out.
LEFT_OUT = {"adult", "letter"}
METHODS = {"regression": "segor", "classification": "sego"}


def run_one(name: str, raw: pd.DataFrame, seed: int, budget: int) -> dict[str, Any]:
    """One search, its final ensemble plain, stacked and as CV chose: its record."""
    parameters = default_parameters()
    parameters["budget"] = budget
    split, data = prepare(raw, name, parameters["data_processing"], seed)
    method = METHODS[data.task]
    result = run_method(method, data, parameters, seed)
    stack = fitted_stack(result, data.fold_ids, parameters["voting"])
    loss = "test_error" if data.task == "classification" else "test_mse"
    record: dict[str, Any] = {
        "dataset": name,
        "task": data.task,
        "seed": seed,
        "members": len(stack.members),
        "cv_loss_plain": stack.ensemble_cv_loss,
        "cv_loss_stacked": stack.cv_loss,
        "chosen": stack.chosen,
    }
    # plain: no stack; stacked: as if CV had preferred it
    always = dataclasses.replace(stack, ensemble_cv_loss=math.inf)
    for variant, used in (("plain", None), ("stacked", always)):
        _, metrics, _ = refit_and_score(
            result,
            split.train_features,
            split.train_target,
            split.test_features,
            split.test_target,
            data.encoding,
            data.target_scaling,
            parameters["voting"],
            seed,
            stack=used,
        )
        record[f"test_loss_{variant}"] = metrics[f"{loss}_ensemble"]
        record[f"test_log_loss_{variant}"] = metrics.get("test_log_loss_ensemble")
    chosen = "stacked" if stack.chosen else "plain"
    record["test_loss_chosen"] = record[f"test_loss_{chosen}"]
    record["test_log_loss_chosen"] = record[f"test_log_loss_{chosen}"]
    return record


def report(records: list[dict[str, Any]], suite: str, budget: int) -> str:
    frame = pd.DataFrame(records)
    rows = []
    for task, part in frame.groupby("task"):
        metrics = [("test_loss", "MSE" if task == "regression" else "error")]
        if task == "classification":
            metrics.append(("test_log_loss", "log-loss"))
        for column, name in metrics:
            plain = part[f"{column}_plain"].to_numpy()
            for variant in ("stacked", "chosen"):
                other = part[f"{column}_{variant}"].to_numpy()
                won = tables.wins(other, plain)
                rows.append(
                    [
                        task,
                        name,
                        variant,
                        str(len(part)),
                        tables.fmt(plain.mean()),
                        tables.fmt(other.mean()),
                        f"{won / len(part):.2f} ({won:g}/{len(part)})",
                        tables.fmt(tables.wilcoxon_p(other, plain), 3),
                    ]
                )
    header = [
        "task",
        "test metric",
        "variant",
        "cells",
        "plain",
        "variant's",
        "variant wins",
        "Wilcoxon p",
    ]
    cv = frame.groupby("task")[
        ["cv_loss_plain", "cv_loss_stacked", "chosen", "members"]
    ].mean()
    cv_rows = [
        [
            task,
            tables.fmt(row.cv_loss_plain),
            tables.fmt(row.cv_loss_stacked),
            f"{row.chosen:.2f}",
            f"{row.members:.1f}",
        ]
        for task, row in cv.iterrows()
    ]
    return (
        f"# Stacked against plain final ensembles ({suite} suite, {budget} trials)\n\n"
        "Same search, same members; test loss on the split of each seed. "
        "stacked: the level-2 model always; chosen: what `stacking: true` ships. "
        "Wins: cells where the variant's loss is lower (ties half).\n\n"
        + tables.markdown_table(header, rows)
        + "\n\nCV losses (mean; classification: the log-loss), the share of "
        "cells where CV chose the stack, distinct members:\n\n"
        + tables.markdown_table(
            ["task", "plain CV loss", "stack CV loss", "chosen", "members"], cv_rows
        )
        + "\n"
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="heldout")
    parser.add_argument("--datasets", nargs="+", help="default: the suite's")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--budget", type=int, default=30, help="trials per search")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--report", action="store_true", help="only report")
    args = parser.parse_args()
    output = args.output or RESULTS / f"stacking_{args.suite}.jsonl"
    folder = SUITES[args.suite]
    if not args.report:
        names = args.datasets or [
            entry["name"]
            for entry in read_manifest(folder)
            if entry["name"] not in LEFT_OUT
        ]
        frames = scripts.raw_datasets(names, PROJECT, folder)
        scripts.quiet_learners()
        done = {
            (record["dataset"], record["seed"])
            for record in map(json.loads, _lines(output))
        }
        with output.open("a") as file:
            for name, raw in frames.items():
                for seed in args.seeds:
                    if (name, seed) in done:  # a rerun skips what is stored
                        continue
                    record = run_one(name, raw, seed, args.budget)
                    scripts.log(
                        f"{name} seed {seed}: plain {record['test_loss_plain']:.4f}, "
                        f"stacked {record['test_loss_stacked']:.4f}, "
                        f"chosen {record['chosen']}"
                    )
                    file.write(json.dumps(record) + "\n")
                    file.flush()
    records = [json.loads(line) for line in _lines(output)]
    tables.write_report(
        report(records, args.suite, args.budget), output.with_suffix(".md")
    )


if __name__ == "__main__":
    main()
