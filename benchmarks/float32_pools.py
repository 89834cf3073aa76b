"""Pools stored as float32: the same selections as from the float64 pool?

A search's pool is written (core.result_files) with its out-of-fold
predictions and class probabilities as float32, half the bytes of float64.
What reads a written pool (the posthoc pipeline, a rerun of it) then
selects from values rounded to float32. Every cell here is one (dataset,
repetition) of the bundled datasets (all but adult and letter): the default search (SEGOR in
segor_sklearn, SEGO in sego_sklearn, `--budget` configurations) on the
project's split of repetition r, its result written and read back, and
greedy post-hoc selection (the posthoc pipeline's defaults) run on the pool
in memory (float64) and on the pool read back. Each cell records whether the
two selections are the same (members in order, weights), their CV and test
losses (each refit), the largest difference of a prediction, and the
compressed bytes of the predictions and probabilities both ways.

    .venv/bin/python benchmarks/float32_pools.py            # 16 datasets x 2 repetitions
    .venv/bin/python benchmarks/float32_pools.py --report   # tables only

Each finished cell is one JSON line of benchmarks/results/float32_pools.jsonl
(a rerun skips those), the report goes to float32_pools.md beside it.
"""

# ruff: noqa: E402 - the thread limits must be set before numpy is imported
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import io
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.grid import ToolCell, loss_on_test_split
from ensemble_bo.core.losses import PROBABILITIES
from ensemble_bo.core.methods import POSTHOC, inference_budget
from ensemble_bo.core.refit import refit_and_score
from ensemble_bo.core.result_files import ARRAYS_NPZ, read_result, write_result
from ensemble_bo.core.results import EnsembleSearchResult

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "float32_pools.jsonl"
PACKAGES = ("scikit-learn", "numpy", "ensemble-bo")


def _selection(result, data, parameters, seed) -> EnsembleSearchResult:
    """Post-hoc selection from `result`'s pool as the posthoc pipeline runs it."""
    settings = POSTHOC.settings.parse(
        POSTHOC.params, parameters[POSTHOC.params], (data.task,)
    )
    budget = inference_budget(parameters["inference"], data, result.model_name)
    return POSTHOC.select(result, data, settings, seed, budget)


def _summary(selected, split, data, voting, seed) -> dict[str, Any]:
    _, metrics, _ = refit_and_score(
        selected,
        split.train_features,
        split.train_target,
        split.test_features,
        split.test_target,
        data.encoding,
        data.target_scaling,
        voting,
        seed,
    )
    return {
        "members": [int(m) for m in selected.members],
        "weights": {str(k): float(v) for k, v in selected.member_weights.items()},
        "cv_loss": float(selected.history[-1].ensemble_loss),
        "test_loss": loss_on_test_split(metrics, data.task),
    }


def _compressed_bytes(arrays: dict[str, np.ndarray]) -> int:
    """The bytes of `arrays` in a compressed npz archive."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getbuffer().nbytes


def _stored_outputs(result: EnsembleSearchResult) -> dict[str, np.ndarray]:
    """The pool's predictions (and probabilities) as float64, as they were
    stored before."""
    pool = result.pool
    arrays = {"predictions": np.asarray(pool.predictions, dtype=np.float64)}
    if pool.labels is not None:
        arrays["probabilities"] = pool.member_outputs(PROBABILITIES)
    return arrays


def _written_outputs(folder: Path) -> dict[str, np.ndarray]:
    """The predictions (and probabilities) as written."""
    with np.load(folder / ARRAYS_NPZ) as archive:
        return {n: archive[n] for n in ("predictions", "probabilities") if n in archive}


def run_cell(cell: ToolCell, raw: pd.DataFrame, parameters: dict[str, Any]) -> dict:
    """The search, its pool written and read back, and post-hoc selection from both."""
    record = cell.coordinates
    start = time.perf_counter()
    try:
        split, data, result = scripts.default_search(cell, raw, parameters)
        with tempfile.TemporaryDirectory() as folder:
            write_result(result, Path(folder))
            read = read_result(Path(folder))
            record["float32_bytes"] = _compressed_bytes(_written_outputs(Path(folder)))
        record["float64_bytes"] = _compressed_bytes(_stored_outputs(result))
        ok = result.pool.ok
        record["max_prediction_difference"] = float(
            np.abs(read.pool.predictions[ok] - result.pool.predictions[ok]).max()
        )
        voting = parameters["voting"]
        from_float64 = _selection(result, data, parameters, cell.seed)
        from_float32 = _selection(read, data, parameters, cell.seed)
        record["float64"] = _summary(from_float64, split, data, voting, cell.seed)
        record["float32"] = _summary(from_float32, split, data, voting, cell.seed)
        record["same_selection"] = (
            record["float64"]["members"] == record["float32"]["members"]
            and record["float64"]["weights"] == record["float32"]["weights"]
        )
        record["test_loss"] = record["float64"]["test_loss"]
        record["trials"] = len(result.pool)
        record["status"] = "ok"
    except Exception as error:  # noqa: BLE001 - a failed cell is recorded, not raised
        record |= {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    record["cell_wall_seconds"] = time.perf_counter() - start
    return record


def report(records: dict[str, dict[str, Any]], output: Path) -> str:
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Pools stored as float32: post-hoc selections against float64",
        scripts.shown(output, PROJECT),
        ok,
        failed,
        "Per cell, greedy post-hoc selection from the search's pool in memory "
        "(float64) and from the pool written and read back (float32).",
    )
    same = sum(r["same_selection"] for r in ok)
    ratio = sum(r["float32_bytes"] for r in ok) / max(
        1, sum(r["float64_bytes"] for r in ok)
    )
    lines += [
        "",
        f"Same selection (members in order, weights) on {same} of {len(ok)} cells; "
        f"the predictions' compressed bytes at float32 are {ratio:.2f} of float64's.",
        "",
        tables.markdown_table(
            [
                "cell",
                "trials",
                "same",
                "largest prediction difference",
                "CV loss float64",
                "CV loss float32",
                "test loss float64",
                "test loss float32",
            ],
            [
                [
                    r["key"],
                    str(r["trials"]),
                    "yes" if r["same_selection"] else "no",
                    f"{r['max_prediction_difference']:.1e}",
                    tables.fmt(r["float64"]["cv_loss"], 6),
                    tables.fmt(r["float32"]["cv_loss"], 6),
                    tables.fmt(r["float64"]["test_loss"]),
                    tables.fmt(r["float32"]["test_loss"]),
                ]
                for r in sorted(ok, key=lambda r: r["key"])
            ],
        ),
        *tables.failed_lines(failed),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    scripts.add_search_grid_arguments(parser, DEFAULT_OUTPUT, repetitions=2)
    args = scripts.parse_search_grid(parser)
    scripts.search_grid_main(
        args,
        PROJECT,
        {**default_parameters(), "conformal": False},
        lambda tasks: scripts.default_search_cells(
            args.datasets,
            tasks,
            args.repetitions,
            "float32_pools",
            (("budget", args.budget),),
        ),
        run_cell,
        report,
        PACKAGES,
    )


if __name__ == "__main__":
    main()
