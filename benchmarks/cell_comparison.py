"""Methods against baselines, cell by cell, from a benchmark's stored cells.

The benchmark pipeline's report compares methods on per-dataset means; targets
such as "beats X on >= 70% of cells, with a one-sided Wilcoxon p < 0.05 over
datasets" are stated over (dataset, repetition) cells. This reads the cell store
the pipeline writes (ensemble_bo.benchmarking.store.CellFolder: one JSON record
per finished cell), keeps one model and budget, and prints, for every
method:

- its mean test loss (error rate or standardized MSE) and, for
  classification, the ensemble's test log-loss, Brier score and ROC AUC;
- against each baseline, over the cells both have: the win rate (ties count
  half, ESMBO s.6.2), the datasets won on the mean over repetitions (ties
  half too), and the
  one-sided Wilcoxon signed-rank p-value of "method lower than baseline" on
  the per-dataset means (core.comparison.wilcoxon_test, SEGO eq. 10 averaging).

    .venv/bin/python benchmarks/cell_comparison.py --model sego_sklearn_paper \\
        --baselines smbo_posthoc smbo --name classification_objectives

Grids run with other settings (which the pipeline stores beside the first, under
the same method names) are told apart by copying each grid's cells to a folder
of its own and naming it with a suffix: --cells base/ --cells bfgs/=+bfgs.
With --against-unsuffixed each suffixed method is compared with the same method
of the unsuffixed store (`segor:f-m+bfgs` against `segor:f-m`): a setting
against the default, without the cross pairs --baselines would add.

Writes benchmarks/results/<name>.md and <name>.json, and <name>_cells.csv with
every compared cell, so that the tables can be recomputed once the cell store
is gone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from ensemble_bo.benchmarking.store import CellFolder
from ensemble_bo.core.comparison import wilcoxon_test, win_frequency
from ensemble_bo.core.comparison_table import markdown_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
CELLS = ROOT / "data" / "07_model_output" / "benchmark_cells"
# The ensemble's classification test metrics beside the error rate (core.refit).
CLASSIFICATION_METRICS = {
    "log-loss": "test_log_loss_ensemble",
    "Brier": "test_brier_ensemble",
    "ROC AUC": "test_roc_auc_ensemble",
}


def load_cells(
    folders: list[tuple[Path, str]], model: str, budget: int
) -> pd.DataFrame:
    """One row per finished cell of `model` at `budget` in each (folder, suffix),
    the suffix appended to its method names; refuses two cells for one
    (dataset, method, repetition), which would make the pairing ambiguous."""
    rows = []
    for folder, suffix in folders:
        for record in CellFolder(folder).records().values():
            if record["model"] != model or record["budget"] != budget:
                continue
            rows.append(
                {
                    "dataset": record["dataset"],
                    "method": record["method"] + suffix,
                    "repetition": record["repetition"],
                    "seed": record["seed"],
                    "task": record["task"],
                    "test_loss": record["test_loss"],
                    "members": record["ensemble_members_distinct"],
                    "seconds": record["wall_seconds"],
                    **{
                        name: record["test_metrics"].get(metric, np.nan)
                        for name, metric in CLASSIFICATION_METRICS.items()
                    },
                }
            )
    if not rows:
        raise SystemExit(
            f"no finished cell of model {model!r} at budget {budget} in "
            f"{[str(folder) for folder, _ in folders]}"
        )
    cells = pd.DataFrame(rows)
    coordinates = ["dataset", "method", "repetition"]
    repeated = cells[cells.duplicated(coordinates, keep=False)]
    if len(repeated):
        raise SystemExit(
            "more than one stored cell for "
            f"{repeated[coordinates].drop_duplicates().values.tolist()[:5]}: the "
            "store holds cells of other settings; compare one grid's store"
        )
    return cells


def method_table(cells: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    columns = ["test_loss", "members", "seconds"]
    if (cells["task"] == "classification").all():
        columns[1:1] = list(CLASSIFICATION_METRICS)
    table = cells.groupby("method")[columns].mean().reindex(methods)
    table.insert(0, "cells", cells.groupby("method").size().reindex(methods))
    return table.rename(
        columns={"test_loss": "test loss", "members": "distinct members"}
    ).rename(columns={"seconds": "seconds per cell"})


def against(cells: pd.DataFrame, method: str, baseline: str) -> dict[str, float]:
    """Win rate over the cells both have, datasets won (ties half), one-sided
    Wilcoxon p; NaN where they share no cell. A cell is paired by its seed too,
    so grids run from other base seeds never compare different test splits."""
    by_cell = cells.pivot_table(
        index=["dataset", "repetition", "seed"], columns="method", values="test_loss"
    ).reindex(columns=[method, baseline])
    by_cell = by_cell.dropna()
    if by_cell.empty:
        return {"method": method, "baseline": baseline, "cells": 0}
    wins = win_frequency(by_cell).loc[method, baseline]
    by_dataset = by_cell.groupby(level="dataset").mean()
    datasets_won = win_frequency(by_dataset).loc[method, baseline] * len(by_dataset)
    return {
        "method": method,
        "baseline": baseline,
        "cells": len(by_cell),
        "win rate": float(wins),
        "cells won": float(wins * len(by_cell)),
        "datasets": len(by_dataset),
        "datasets won": float(datasets_won),
        "Wilcoxon p (one-sided)": wilcoxon_test(
            by_dataset[method], by_dataset[baseline], alternative="less"
        ),
    }


def unsuffixed_pairs(methods: list[str], suffixes: list[str]) -> list[tuple[str, str]]:
    """(method, the same method without its store's suffix) for each suffixed method."""
    return [
        (method, method.removesuffix(suffix))
        for method in methods
        for suffix in suffixes
        if suffix and method.endswith(suffix)
    ]


def _records(frame: pd.DataFrame) -> list[dict]:
    """Rows as plain JSON values, NaN as null (strict JSON has no NaN)."""
    return [
        {key: None if pd.isna(value) else value for key, value in row.items()}
        for row in json.loads(frame.to_json(orient="records"))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="the cells' model")
    parser.add_argument("--baselines", nargs="+", default=[])
    parser.add_argument(
        "--against-unsuffixed",
        action="store_true",
        help="compare each suffixed method with its unsuffixed name",
    )
    parser.add_argument("--name", required=True, help="results file name")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument(
        "--cells",
        action="append",
        metavar="FOLDER[=SUFFIX]",
        help="a cell store (default: the pipeline's); with =SUFFIX its method "
        "names get SUFFIX, to compare grids run with other settings (repeatable)",
    )
    parser.add_argument(
        "--methods", nargs="*", help="methods to keep, in this order (default: all)"
    )
    args = parser.parse_args()
    folders = [
        (Path(folder), suffix)
        for folder, _, suffix in (
            spec.partition("=") for spec in args.cells or [str(CELLS)]
        )
    ]
    cells = load_cells(folders, args.model, args.budget)
    methods = args.methods or sorted(cells["method"].unique())
    pairs = [
        (method, baseline)
        for baseline in args.baselines
        for method in methods
        if method != baseline
    ]
    if args.against_unsuffixed:
        pairs += unsuffixed_pairs(methods, [suffix for _, suffix in folders])
    if not pairs:
        raise SystemExit("nothing to compare: give --baselines or --against-unsuffixed")
    compared = list(dict.fromkeys(methods + [baseline for _, baseline in pairs]))
    unknown = sorted(set(compared) - set(cells["method"]))
    if unknown:
        raise SystemExit(
            f"no cells of {unknown}; the store has {sorted(cells['method'].unique())}"
        )
    cells = cells[cells["method"].isin(compared)]
    comparisons = pd.DataFrame([against(cells, *pair) for pair in pairs])
    table = method_table(cells, compared)
    lines = [
        f"# {args.name}: model `{args.model}`, budget {args.budget}",
        "",
        f"Datasets: {', '.join(sorted(cells['dataset'].unique()))}; "
        f"repetitions: {cells['repetition'].nunique()}.",
        "",
        "## Means over cells",
        "",
        markdown_table(table.round(4), index_name="method"),
        "",
        "## Against the baselines (win rate over cells, ties half; Wilcoxon on "
        "per-dataset means, method lower)",
        "",
        markdown_table(comparisons.set_index("method").round(4), index_name="method"),
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines))
    (RESULTS / f"{args.name}.json").write_text(
        json.dumps(
            {
                "methods": _records(table.reset_index()),
                "comparisons": _records(comparisons),
            },
            indent=1,
        )
    )
    cells.sort_values(["dataset", "method", "repetition"]).to_csv(
        RESULTS / f"{args.name}_cells.csv", index=False
    )
    print("\n".join(lines))  # noqa: T201


if __name__ == "__main__":
    main()
