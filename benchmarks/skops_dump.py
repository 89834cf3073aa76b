"""Writing the logged model's skops file: skops.io.dump against
tracking.skops_file.write_skops, side by side, by the arrays the file holds.

Each case is what a run logs for a regression ensemble of boosted trees: m
histogram gradient boosting members (100 trees each, no early stopping, seeds
0..m-1) on the bundled concrete dataset, in the CV+ model that also fits
them on each of 5 folds' complements (core.conformal): about 1,800 arrays per
member. Both write it deflated at level 1 into the same folder; the faster of
`--repeats` writes counts, and the model skops loads back from our file must
predict as the original.

    .venv/bin/python benchmarks/skops_dump.py
    .venv/bin/python benchmarks/skops_dump.py --members 1 4 16 --repeats 3

Results: benchmarks/results/skops_dump.{jsonl,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import skops.io
from sklearn.ensemble import HistGradientBoostingRegressor

from ensemble_bo.core.conformal import cross_conformal
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model, member_spread
from ensemble_bo.tracking.skops_file import write_skops

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
FOLDS = 5


def conformal_ensemble(members: int, features: pd.DataFrame, target: pd.Series):
    """The fitted CV+ model of `members` boosted-tree members."""
    ensemble = build_ensemble_model(
        "regression",
        [
            HistGradientBoostingRegressor(
                max_iter=100, early_stopping=False, random_state=seed
            )
            for seed in range(members)
        ],
        [1.0 / members] * members,
        FeatureEncoding(),
    )
    folds = np.arange(len(target)) % FOLDS
    return cross_conformal(ensemble, folds, "regression", spread=member_spread).fit(
        features, target
    )


def fastest(write, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        write()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS / "skops_dump.jsonl")
    args = parser.parse_args()
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv")
    features, target = raw.drop(columns="target"), raw["target"]
    records = []
    with tempfile.TemporaryDirectory() as folder:
        theirs, ours = Path(folder) / "skops.skops", Path(folder) / "ours.skops"
        for members in args.members:
            model = conformal_ensemble(members, features, target)
            skops_seconds = fastest(
                lambda model=model: skops.io.dump(
                    model, theirs, compression=zipfile.ZIP_DEFLATED, compresslevel=1
                ),
                args.repeats,
            )
            our_seconds = fastest(
                lambda model=model: write_skops(model, ours), args.repeats
            )
            loaded = skops.io.load(
                ours, trusted=skops.io.get_untrusted_types(file=ours)
            )
            np.testing.assert_array_equal(
                loaded.predict(features), model.predict(features)
            )
            with zipfile.ZipFile(ours) as archive:
                arrays = len(archive.namelist()) - 1
            record = {
                "members": members,
                "arrays": arrays,
                "skops_dump_seconds": skops_seconds,
                "write_skops_seconds": our_seconds,
                "skops_dump_mb": theirs.stat().st_size / 1e6,
                "write_skops_mb": ours.stat().st_size / 1e6,
                "machine": platform.processor() or platform.machine(),
            }
            records.append(record)
            sys.stdout.write(
                f"{members:3d} members, {arrays:6d} arrays: skops.io.dump "
                f"{skops_seconds:.2f} s, write_skops {our_seconds:.2f} s "
                f"({skops_seconds / our_seconds:.1f}x)\n"
            )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    lines = [
        "# Writing the logged model's skops file",
        "",
        "CV+ ensembles of histogram gradient boosting members (100 trees each) "
        "on concrete, written deflated; the faster of "
        f"{args.repeats} write(s) each.",
        "",
        "| members | arrays | skops.io.dump s | write_skops s | ratio | "
        "skops.io.dump MB | write_skops MB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['members']} | {r['arrays']} | {r['skops_dump_seconds']:.2f} | "
            f"{r['write_skops_seconds']:.2f} | "
            f"{r['skops_dump_seconds'] / r['write_skops_seconds']:.1f}x | "
            f"{r['skops_dump_mb']:.1f} | {r['write_skops_mb']:.1f} |"
            for r in records
        ),
        "",
    ]
    args.output.with_suffix(".md").write_text("\n".join(lines))
    sys.stdout.write("\n".join(lines))


if __name__ == "__main__":
    main()
