"""Our ensemble searches against AutoML peers at equal wall time, on real datasets.

Every cell is one (dataset, repetition, tool, time budget T): the project's own
test split of repetition r (the benchmark pipeline's `split_dataset` with seed
repetition_seed(0, r): test_size 0.33, stratified for classes), the tool fitted
on the training part with T seconds, then scored on the test part by the same
code for every tool: MSE of the target standardized by the training part's
mean and std (SEGOR s.4) for regression; error rate, log-loss, Brier score and
ROC AUC for classification. Tools (peer_tools.py):

- flaml: `flaml.AutoML` (default estimator list, 5-fold CV, mse / accuracy);
- autogluon_medium, autogluon_best: AutoGluon-Tabular's `TabularPredictor`
  with presets medium_quality (its default) / best_quality, LightGBM and
  CatBoost, in a venv of its own (autogluon_runner.py in a subprocess);
- ours: SEGOR (regression) / SEGO (classification) in the multi-family spaces
  segor_sklearn / sego_sklearn, `EnsembleSearch(time_budget=T)`;
- segor_paper (`--with-paper-space`, regression): SEGOR in its paper's default
  space, decision_tree_regressor, at the same T;
- ours+model=NAME: ours in another model or space of conf/base/
  parameters_models.yml, for the task it serves (e.g. lightgbm_regressor),
  against every other such tool of the same task;
- ours:<objective> (classification): SEGO with each objective of `sego.loss`
  (squared_margin, error, log_loss, brier), its ensemble combined as the
  objective scores it, against the first one named.

Two suites of 8 regression and 8 classification datasets: `bundled` (the
project's data/01_raw, on which its defaults were chosen) and `heldout`
(benchmarks/heldout, written by build_heldout_suite.py and never used to
choose a default: what a new user's data looks like to the defaults).

All get the same raw DataFrame (text columns as they are) and do their own
preprocessing. Every tool runs on one core (OMP/BLAS threads 1). The peers are
dev-only dependencies (benchmarks/requirements-flaml.txt,
benchmarks/requirements-autogluon.txt; benchmarks/README.md says how to
install them):

    .venv/bin/python benchmarks/peer_comparison.py --jobs 2      # full grid, days
    .venv/bin/python benchmarks/peer_comparison.py --suite heldout --jobs 2
    .venv/bin/python benchmarks/peer_comparison.py --report      # tables only

Each finished cell is appended as one JSON line to
benchmarks/results/peer_comparison.jsonl (peer_comparison_heldout.jsonl for
the held-out suite); a rerun skips the cells already
there (failed cells are run again), so a killed run resumes. Cells run by
budget, the smallest first. The report (peer_report.py) goes to the .md next
to the JSON lines (and is printed).
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

# Single-threaded for every tool (our evaluation worker processes and the
# AutoGluon subprocess inherit this), so that equal wall time means equal CPU.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import importlib.util
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from peer_report import report
from peer_tools import (
    AUTOGLUON_PRESETS,
    AUTOGLUON_PYTHON,
    FITTERS,
    PEERS,
    TOOLS,
    parse_tool,
    tool_name,
    tool_setup,
)

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.benchmarking.store import CellLines
from ensemble_bo.core.grid import (
    ToolCell,
    dataset_task,
    repetition_seed,
    run_tool_cell,
    split_dataset,
)
from ensemble_bo.manifest import read_manifest

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
HELDOUT = PROJECT / "benchmarks" / "heldout"

REGRESSION = scripts.BUNDLED_REGRESSION
CLASSIFICATION = scripts.BUNDLED_CLASSIFICATION
# The row cap: the default datasets have at most 4,597 rows (spambase); adult
# (32,561 rows) and letter (20,000) are left out, as in the project's results
# grid (conf/results/parameters_benchmark.yml); --datasets may name them.
# Each suite: its datasets' folder, its default datasets, its default output.
SUITES = {
    "bundled": (None, REGRESSION + CLASSIFICATION, RESULTS / "peer_comparison.jsonl"),
    "heldout": (
        HELDOUT,
        [entry["name"] for entry in read_manifest(HELDOUT)],
        RESULTS / "peer_comparison_heldout.jsonl",
    ),
}
DEFAULT_TIME_BUDGETS = (10.0, 30.0, 120.0, 600.0)
# A large budget of configurations: the time budget is what ends our searches.
DEFAULT_BUDGET = 10_000
# Whose versions every record names (AutoGluon's: its record's peer_versions).
PACKAGES = (
    "flaml",
    "lightgbm",
    "xgboost",
    "scikit-learn",
    "numpy",
    "pandas",
    "ensemble-bo",
)


def run_cell(
    cell: ToolCell,
    raw: pd.DataFrame,
    data_processing: dict[str, Any],
    autogluon_python: Path = AUTOGLUON_PYTHON,
) -> dict[str, Any]:
    """Split, fit, score one cell, in a worker process: its JSON record.

    The fit also gets the test features (the same split, made again: it is
    seeded) to time prediction on them; AutoGluon predicts them in its process.
    """
    scripts.quiet_learners()
    options: dict[str, Any] = {
        "test_features": split_dataset(
            raw, cell.dataset, data_processing, cell.seed
        ).test_features
    }
    if cell.tool in AUTOGLUON_PRESETS:
        options["python"] = autogluon_python
    fit = partial(FITTERS[parse_tool(cell.tool)[0]], **options)
    return run_tool_cell(cell, raw, data_processing, fit)


# --------------------------------------------------------------------------- main


def build_cells(
    args: argparse.Namespace, tasks: dict[str, str], base_seed: int
) -> list[ToolCell]:
    """Every cell, the cheap budgets first: all T=10 cells, then T=30, and so on."""
    cells = []
    for budget in sorted(args.time_budgets):
        for repetition in range(args.repetitions):
            for dataset, task in tasks.items():
                for tool in args.tools:
                    setup = tool_setup(tool, task, args)
                    if not setup:
                        continue
                    cells.append(
                        ToolCell(
                            dataset,
                            repetition,
                            repetition_seed(base_seed, repetition),
                            tool,
                            tuple(sorted(setup.items())),
                            time_budget=float(budget),
                            task=task,
                        )
                    )
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default="bundled",
        help="bundled: data/01_raw (default); heldout: benchmarks/heldout",
    )
    parser.add_argument(
        "--datasets",
        nargs="+",
        help="names in the suite's folder (default: its 16, for bundled all but "
        "adult and letter)",
    )
    parser.add_argument(
        "--time-budgets", nargs="+", type=float, default=list(DEFAULT_TIME_BUDGETS)
    )
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument(
        "--tools",
        nargs="+",
        type=tool_name,
        default=[*PEERS, "ours"],
        help=f"of {', '.join(TOOLS)}, each of ours optionally with +name=value "
        "settings of our parameters (e.g. ours+max_trial_share=0.1), or "
        "+model=NAME for another model or space of the task NAME serves; default: "
        f"{' '.join(PEERS)} ours",
    )
    parser.add_argument(
        "--autogluon-python",
        type=Path,
        default=AUTOGLUON_PYTHON,
        help="the AutoGluon venv's python (default: benchmarks/.venv-autogluon)",
    )
    parser.add_argument(
        "--with-paper-space",
        action="store_true",
        help="add segor_paper: SEGOR in decision_tree_regressor (regression)",
    )
    parser.add_argument("--regression-space", default="segor_sklearn")
    parser.add_argument("--classification-space", default="sego_sklearn")
    parser.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_BUDGET,
        help="our configurations per search; the time budget ends it first",
    )
    scripts.add_run_arguments(parser, None)
    args = parser.parse_args()
    folder, datasets, default_output = SUITES[args.suite]
    args.datasets = args.datasets or datasets
    output = (args.output or default_output).resolve()

    if not args.report:
        if args.with_paper_space and "segor_paper" not in args.tools:
            args.tools.append("segor_paper")
        if args.jobs < 1 or args.repetitions < 1:
            sys.exit("--jobs and --repetitions must be at least 1")
        if "flaml" in args.tools and importlib.util.find_spec("flaml") is None:
            sys.exit(
                "flaml is not installed; install the pins of "
                "benchmarks/requirements-flaml.txt (see its header), or leave "
                "flaml out of --tools"
            )
        autogluon = [tool for tool in args.tools if tool in AUTOGLUON_PRESETS]
        if autogluon and not args.autogluon_python.is_file():
            sys.exit(
                f"{args.autogluon_python} does not exist: build the AutoGluon venv "
                "(benchmarks/requirements-autogluon.txt, see its header), or leave "
                f"{' '.join(autogluon)} out of --tools"
            )
        parameters = default_parameters()
        data_processing = dict(parameters["data_processing"])
        base_seed = int(parameters["benchmark"]["seed"])
        frames = scripts.raw_datasets(args.datasets, PROJECT, folder)
        tasks = {
            name: dataset_task(frame, name, data_processing)
            for name, frame in frames.items()
        }
        scripts.run_grid(
            build_cells(args, tasks, base_seed),
            run_cell,
            CellLines(output),
            PROJECT,
            frames=frames,
            arguments=(data_processing, args.autogluon_python.absolute()),
            jobs=args.jobs,
            stamp=scripts.provenance(PACKAGES),
        )

    records = CellLines(output).records()
    text = report(records, scripts.shown(output, PROJECT))
    tables.write_report(text, output.with_suffix(".md"))


if __name__ == "__main__":
    main()
