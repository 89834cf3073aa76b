"""Fit AutoGluon-Tabular on one cell's training part and predict its test part.

Runs inside the AutoGluon venv (benchmarks/.venv-autogluon, built from
benchmarks/requirements-autogluon.txt), never the project's: it imports
neither ensemble_bo nor anything of the project. peer_comparison.py writes a
folder with

- request.json: {"label", "problem_type" (regression, binary, multiclass),
  "time_limit" (seconds), "presets", and optionally "dynamic_stacking"};
- train.parquet: the training features and the label column (class labels
  as integer codes 0..k-1);
- test.parquet: the test features;

and calls `python autogluon_runner.py FOLDER`, which writes FOLDER/result.json:
"predictions" (one per test row), "probabilities" (classification: one row
per test row, a column per class code 0..k-1), "fit_seconds" (the whole
`.fit`), "n_models" (models trained, weighted ensembles included),
"families" (the model types the final model uses), "best_model",
"model_bytes" (the deployment clone on disk: only the models the best one
needs), "fitted_bytes" (the whole fitted folder) and
"predict_seconds_per_1000" (predicting the test part with the models in
memory, probabilities for classes, the fastest of 3 calls, per 1,000 rows) and
"versions" (AutoGluon's and its learners'). The harness scores the predictions itself.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from functools import partial
from importlib import metadata
from pathlib import Path

import pandas as pd

# Prediction is timed as the fastest of a few calls: the first may pay for
# loading or compiling, the rest is noise of a shared machine.
PREDICT_REPEATS = 3
# Whose versions a result names.
PACKAGES = ("autogluon.tabular", "lightgbm", "catboost", "scikit-learn", "pandas")


def predict_seconds_per_1000(predict: Callable[[], object], rows: int) -> float:
    """Seconds per 1,000 rows of the fastest of PREDICT_REPEATS calls of predict()."""
    fastest = float("inf")
    for _ in range(PREDICT_REPEATS):
        start = time.perf_counter()
        predict()
        fastest = min(fastest, time.perf_counter() - start)
    return 1000 * fastest / rows


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def families(predictor, best: str) -> list[str]:
    """The model types (LGBModel, CatBoostModel, RFModel...) the best model uses;
    a bagged model counts as its folds' type, a weighted ensemble as none."""
    info = predictor.info()["model_info"]
    used = set()
    for name in predictor._trainer.get_minimum_model_set(best):  # noqa: SLF001
        bagged = info[name].get("bagged_info") or {}
        kind = bagged.get("child_model_type", info[name]["model_type"])
        if kind not in ("WeightedEnsembleModel", "GreedyWeightedEnsembleModel"):
            used.add(kind)
    return sorted(used)


def main(folder: Path) -> None:
    # only the AutoGluon venv has it; the project imports this module's helpers
    from autogluon.tabular import TabularPredictor  # noqa: PLC0415

    request = json.loads((folder / "request.json").read_text())
    train = pd.read_parquet(folder / "train.parquet")
    test = pd.read_parquet(folder / "test.parquet")
    start = time.perf_counter()
    predictor = TabularPredictor(
        label=request["label"],
        problem_type=request["problem_type"],
        path=str(folder / "model"),
        verbosity=0,
    ).fit(
        train,
        time_limit=request["time_limit"],
        presets=request["presets"],
        num_cpus=1,
        num_gpus=0,
        # given only where the benchmark overrides the preset's
        **{k: request[k] for k in ("dynamic_stacking",) if k in request},
    )
    fit_seconds = time.perf_counter() - start
    best = predictor.model_best
    deployed = Path(predictor.clone_for_deployment(str(folder / "deployed")))
    predictor.persist()  # models in memory, as ours and FLAML's are when timed
    classes = request["problem_type"] != "regression"
    predict = partial(predictor.predict_proba if classes else predictor.predict, test)
    answer = predict()
    probabilities = None
    if classes:
        predictions = predictor.predict_from_proba(answer)
        codes = list(range(int(train[request["label"]].max()) + 1))
        probabilities = answer.reindex(columns=codes, fill_value=0.0).to_numpy()
    else:
        predictions = answer
    result = {
        "predictions": predictions.tolist(),
        "probabilities": None if probabilities is None else probabilities.tolist(),
        "fit_seconds": fit_seconds,
        "n_models": int(predictor.info()["num_models_trained"]),
        "families": families(predictor, best),
        "best_model": best,
        "model_bytes": folder_bytes(deployed),
        "fitted_bytes": folder_bytes(folder / "model"),
        "predict_seconds_per_1000": predict_seconds_per_1000(predict, len(test)),
        "versions": {p: metadata.version(p) for p in PACKAGES},
    }
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1], "request.json").is_file():
        sys.exit("usage: autogluon_runner.py FOLDER (holding request.json)")
    main(Path(sys.argv[1]))
