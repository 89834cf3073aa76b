"""Logging node outputs to the active MLflow run, by kind.

The kinds (conf/base/mlflow.yml, `log_outputs`): params, metrics, a CSV table
under tables/, a PNG figure under plots/, a markdown text under reports/, a
pickled pool under pools/, an MLflow sklearn model. A mapping of tables,
figures or texts (a partitioned output) is logged entry by entry.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
import mlflow.sklearn

import ensemble_bo
from ensemble_bo import provenance
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.reporting import trial_history
from ensemble_bo.tracking.pools import log_pickle, log_pool

logger = logging.getLogger(__name__)

# MLflow accepts at most this many params per call and this many characters per value.
_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
# Packages the logged model needs to load elsewhere (`mlflow models predict`):
# pinned with everything they depend on, at the versions of this run.
_MODEL_REQUIREMENTS = ("scikit-learn", "numpy", "pandas", "scipy", "skops")


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mapping -> (dotted.key, leaf value) pairs."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


def log_params(parameters: Mapping[str, Any], prefix: str = "") -> None:
    """Nested parameters as dotted MLflow params, in batches MLflow accepts."""
    flat = [
        (f"{prefix}{name}", str(value)[:_MAX_PARAM_LENGTH])
        for name, value in flatten(parameters)
    ]
    for start in range(0, len(flat), _PARAMS_PER_BATCH):
        mlflow.log_params(dict(flat[start : start + _PARAMS_PER_BATCH]))


def log_output(
    name: str, data: Any, rule: Mapping[str, Any], input_example: Any = None
) -> None:
    """The node output `name` as its rule (mlflow.yml) says; `input_example`: the
    data a model's example rows come from."""
    kind = rule["as"]
    if kind in ("table", "figure", "text") and isinstance(data, Mapping):
        # A partitioned output: each entry under a folder named after it.
        for key, value in sorted(data.items()):
            log_output(f"{name}/{key}", value, rule)
        return
    if kind == "params":
        log_params(data, prefix=f"{name}.")
    elif kind == "metrics":
        mlflow.log_metrics(
            {key: float(value) for key, value in flatten(data) if math.isfinite(value)}
        )
    elif kind == "table":
        if not (rule.get("skip_empty") and data.empty):
            mlflow.log_text(data.to_csv(index=False), f"tables/{name}.csv")
    elif kind == "figure":
        mlflow.log_figure(data, f"plots/{name}.png")
    elif kind == "text":
        mlflow.log_text(str(data), f"reports/{name}.md")
    elif kind == "pickle":
        log_pool(name, data)
    elif kind == "model":
        log_model(name, data, input_example)
    else:
        raise ValueError(
            f"conf mlflow.yml: log_outputs.{name}.as={kind!r}; "
            "expected params, metrics, table, figure, text, pickle or model"
        )


def log_model(name: str, estimator: Any, input_example: Any) -> None:
    """The fitted ensemble as an MLflow sklearn model that loads and serves anywhere."""
    # Imported here: skops takes over a second to import, and every `kedro`
    # command loads this module while only a run that logs a model needs it.
    import skops.io  # noqa: PLC0415

    mlflow.sklearn.log_model(
        sk_model=estimator,
        name=name,
        # skops refuses types it has not vetted (e.g. sklearn's tree storage).
        # This estimator was built by this very run, so exactly its types are
        # trusted when the model is loaded; anything else is still refused.
        skops_trusted_types=skops.io.get_untrusted_types(
            data=skops.io.dumps(estimator)
        ),
        # Pinned here instead of inferred: inference re-imports the model in a subprocess.
        pip_requirements=provenance.pinned_requirements(_MODEL_REQUIREMENTS),
        input_example=None if input_example is None else input_example.head(5),
        # The ensemble classes are ours: ship the package so the model loads
        # and serves (`mlflow models predict`) where ensemble_bo is not installed.
        code_paths=[str(Path(ensemble_bo.__file__).parent)],
    )


def log_stopped_search(result: EnsembleSearchResult) -> None:
    """What a search that stopped early had: its trials, under partial/."""
    mlflow.log_metric("iterations_completed", len(result.history))
    mlflow.log_text(
        trial_history(result).to_csv(index=False),
        "partial/partial_trial_history.csv",
    )
    log_pickle(result, "partial", "partial_search_result.pkl")
    logger.warning(
        "%d trained models of the stopped search are saved in MLflow run %s, "
        "artifacts partial/",
        len(result.pool),
        mlflow.active_run().info.run_id,
    )
