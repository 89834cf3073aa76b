"""Large data: a whole `kedro run` against its time budget, from 10,000 to
1,000,000 rows, beside AutoGluon `medium_quality` on the same split.

No package installable here ships a table of that size for offline use
(scikit-learn's covertype and California housing fetchers download), so the
data come from two documented generators, seeded:

- `concrete`: the bundled concrete table (1,030 rows, 8 features) replicated
  to the row count, each feature perturbed by Gaussian noise of 1% of its
  standard deviation, the target kept;
- `friedman`: scikit-learn's `make_friedman1` (20 features, 5 of them
  informative, noise sd 1).

Each cell is (data, rows, time budget, tool). `ours` is `kedro run
--pipelines=segor --params dataset=...,time_budget=T,budget=10000` plus
`--params` of this script, in a temporary copy of the project's conf with its
own SQLite store and the generated CSV; `autogluon_medium` is AutoGluon
(benchmarks/.venv-autogluon) with `time_limit=T` on the run's own training
part (the project's seeded split), scored on its test part. Both run in child
processes; each records:

- wall seconds of the whole process (ours: start-up, search, refit, reports,
  MLflow logging) and their ratio to the budget;
- peak memory: the largest sum of resident memory over the process and its
  children (worker processes included), sampled every 0.2 s;
- disk written: ours, the bytes of the copy's data/ (the generated CSV
  excepted), mlartifacts/ and mlflow.db after the run; AutoGluon, its fitted
  folder;
- test MSE of the standardized target (the target over the training part's
  mean and sd), trials, search seconds.

    .venv/bin/python benchmarks/scaling_rows.py --rows 100000 --budgets 60
    .venv/bin/python benchmarks/scaling_rows.py --params max_search_rows=null
    .venv/bin/python benchmarks/scaling_rows.py --report

Each finished cell is one JSON line of benchmarks/results/scaling_rows.jsonl
(a rerun skips those); the report goes to scaling_rows.md beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
from mlflow.tracking import MlflowClient
from peer_tools import (
    AUTOGLUON_PYTHON,
    AUTOGLUON_RUNNER,
    LABEL,
    PEER_THREADS,
    write_peer_folder,
)
from sklearn.datasets import make_friedman1

from ensemble_bo.api import default_parameters
from ensemble_bo.benchmarking import scripts, tables
from ensemble_bo.core.preparation import split_dataset

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = PROJECT / "benchmarks" / "results" / "scaling_rows.jsonl"
KINDS = ("concrete", "friedman")
TOOLS = ("ours", "autogluon_medium")
PACKAGES = ("scikit-learn", "numpy", "mlflow", "kedro")
# How often the process tree's memory is sampled.
SAMPLE_SECONDS = 0.2
MB = 1e6


def generate(kind: str, rows: int, seed: int = 0) -> pd.DataFrame:
    """`rows` rows of the generator `kind` (module docstring), seeded."""
    rng = np.random.default_rng(seed)
    if kind == "concrete":
        base = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv")
        frame = base.iloc[np.arange(rows) % len(base)].reset_index(drop=True)
        features = frame.columns.drop("target")
        noise = rng.normal(size=(rows, len(features))) * 0.01
        frame[features] = frame[features] + noise * base[features].std().to_numpy()
        return frame
    if kind == "friedman":
        X, y = make_friedman1(rows, n_features=20, noise=1.0, random_state=seed)
        frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
        return frame.assign(target=y)
    raise ValueError(f"unknown data {kind!r}; known: {list(KINDS)}")


def sampled_run(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    """Run `command`; its exit code, wall seconds and peak memory in MB (the
    largest sum of resident memory over it and its children)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    peak = 0.0
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    root = psutil.Process(process.pid)
    while process.poll() is None:
        if time.perf_counter() - start > timeout:
            process.kill()
            break
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(_rss(p) for p in tree))
        except psutil.NoSuchProcess:
            pass
        time.sleep(SAMPLE_SECONDS)
    process.wait()
    reader.join()
    return {
        "returncode": process.returncode,
        "wall_seconds": time.perf_counter() - start,
        "peak_rss_mb": peak / MB,
        "output_tail": b"".join(output).decode(errors="replace")[-3000:],
    }


def _rss(process: psutil.Process) -> float:
    try:
        return float(process.memory_info().rss)
    except psutil.NoSuchProcess:
        return 0.0


def folder_bytes(*paths: Path) -> int:
    """The bytes of the files under `paths` (files or folders)."""
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return total


def run_ours(
    name: str, frame: pd.DataFrame, budget: float, params: str
) -> dict[str, Any]:
    """A whole `kedro run` of segor on `frame`, in a copy of the project."""
    with tempfile.TemporaryDirectory(prefix="scaling-rows-") as folder:
        project = scripts.project_copy(PROJECT, Path(folder))
        raw = project / "data" / "01_raw" / f"{name}.csv"
        frame.to_csv(raw, index=False)
        uri = f"sqlite:///{project / 'mlflow.db'}"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": uri,
            "DO_NOT_TRACK": "true",
            "KEDRO_DISABLE_TELEMETRY": "true",
        }
        overrides = f"dataset={name},time_budget={budget:g},budget=10000"
        command = [sys.executable, "-m", "kedro", "run", "--pipelines=segor"]
        command += ["--params", ",".join(p for p in (overrides, params) if p)]
        run = sampled_run(command, project, env, timeout=10 * budget + 1800)
        written = (
            folder_bytes(
                project / "data", project / "mlartifacts", project / "mlflow.db"
            )
            - raw.stat().st_size
        )
        record = {**run, "disk_written_mb": written / MB}
        if run["returncode"] != 0:
            return record
        client = MlflowClient(uri)
        (logged,) = client.search_runs(
            [client.get_experiment_by_name("ensemble_bo").experiment_id]
        )
        metrics = logged.data.metrics
        return record | {
            "test_mse": metrics["test_mse_ensemble"],
            "trials": metrics.get("trials"),
            "search_seconds": metrics.get("search_seconds"),
            "refit_seconds": metrics.get("refit_seconds"),
            "search_sample_rows": metrics.get("search_sample_rows"),
            "final_model_mb": metrics.get("final_model_mb"),
        }


def run_autogluon(
    name: str, frame: pd.DataFrame, budget: float, seed: int
) -> dict[str, Any]:
    """AutoGluon medium_quality on the run's own training part, scored on its
    test part."""
    split = split_dataset(frame, name, default_parameters()["data_processing"], seed)
    train = split.train_features.assign(**{LABEL: split.train_target.to_numpy()})
    request = {
        "label": LABEL,
        "problem_type": "regression",
        "time_limit": budget,
        "presets": "medium_quality",
    }
    with tempfile.TemporaryDirectory(prefix="scaling-rows-ag-") as folder:
        path = write_peer_folder(Path(folder), request, train, split.test_features)
        run = sampled_run(
            [str(AUTOGLUON_PYTHON), str(AUTOGLUON_RUNNER), folder],
            path,
            {**os.environ, **PEER_THREADS},
            timeout=10 * budget + 1800,
        )
        if run["returncode"] != 0:
            return run
        result = json.loads((path / "result.json").read_text())
    target = split.train_target.to_numpy(dtype=float)
    errors = (np.asarray(result["predictions"]) - split.test_target.to_numpy()) / (
        target.std()
    )
    return run | {
        "test_mse": float(np.mean(errors**2)),
        "trials": result["n_models"],
        "search_seconds": result["fit_seconds"],
        "disk_written_mb": result["fitted_bytes"] / MB,
        "final_model_mb": result["model_bytes"] / MB,
    }


def cell_key(kind: str, rows: int, budget: float, tool: str, params: str) -> str:
    return f"{kind}/{rows}/T{budget:g}/{tool}" + (f"/{params}" if params else "")


def report(records: list[dict[str, Any]], output: Path) -> str:
    lines = [
        "# Large data: a whole run against its time budget",
        "",
        f"From `{scripts.shown(output, PROJECT)}` ({len(records)} cells). "
        "Wall: the whole process (ours: start-up, search, refit, reports, MLflow "
        "logging), and its ratio to the time budget; peak memory: the largest "
        "sum over the process tree; disk: bytes written by the run; test MSE "
        "of the standardized target.",
        "",
    ]
    header = [
        "data",
        "rows",
        "budget s",
        "tool",
        "wall s",
        "wall / budget",
        "search s",
        "trials",
        "peak memory MB",
        "disk written MB",
        "model MB",
        "test MSE",
    ]
    rows = []
    for r in sorted(
        records, key=lambda r: (r["kind"], r["rows"], r["budget"], r["tool"])
    ):
        failed = r["returncode"] != 0
        rows.append(
            [
                r["kind"],
                f"{r['rows']:,}",
                f"{r['budget']:g}",
                r["tool"] + (f" ({r['params']})" if r["params"] else ""),
                f"{r['wall_seconds']:.0f}",
                f"{r['wall_seconds'] / r['budget']:.2f}",
                "failed" if failed else tables.fmt(r.get("search_seconds"), 1),
                "-" if failed else f"{r.get('trials') or 0:.0f}",
                f"{r['peak_rss_mb']:.0f}",
                tables.fmt(r.get("disk_written_mb"), 0),
                tables.fmt(r.get("final_model_mb"), 1),
                "-" if failed else tables.fmt(r["test_mse"]),
            ]
        )
    lines.append(tables.markdown_table(header, rows))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["concrete"], choices=KINDS)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--budgets", type=float, nargs="+", default=[60.0])
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    parser.add_argument(
        "--params",
        default="",
        help="more kedro --params for ours, e.g. max_search_rows=null",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    output = args.output.resolve()
    done = {}
    if output.exists():
        for line in output.read_text().splitlines():
            record = json.loads(line)
            done[record["key"]] = record
    if not args.report:
        stamp = scripts.provenance(PACKAGES, PROJECT)
        for kind in args.kinds:
            for rows in args.rows:
                frame = generate(kind, rows, args.seed)
                name = f"{kind}_{rows}"
                for budget in args.budgets:
                    for tool in args.tools:
                        params = args.params if tool == "ours" else ""
                        key = cell_key(kind, rows, budget, tool, params)
                        if key in done:
                            continue
                        scripts.log(f"{key}: running")
                        if tool == "ours":
                            result = run_ours(name, frame, budget, params)
                        else:
                            result = run_autogluon(name, frame, budget, args.seed)
                        record = {
                            "key": key,
                            "kind": kind,
                            "rows": rows,
                            "budget": budget,
                            "tool": tool,
                            "params": params,
                            **result,
                            **stamp,
                        }
                        with output.open("a") as file:
                            file.write(json.dumps(record) + "\n")
                        done[key] = record
                        scripts.log(
                            f"{key}: wall {record['wall_seconds']:.0f} s, peak "
                            f"{record['peak_rss_mb']:.0f} MB, test MSE "
                            f"{record.get('test_mse', float('nan')):.4f}"
                        )
    text = report(list(done.values()), output)
    output.with_suffix(".md").write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
