"""Logging node outputs to the active MLflow run, by kind.

The kinds (conf/base/mlflow.yml, `log_outputs`): params, metrics, a CSV table
under tables/, a PNG figure under plots/ (a search's at the root, for the
compare view), a markdown text under reports/, a
pool (a search result, data only) under pools/, an MLflow sklearn model (with
its files' sha256, tracking.model_integrity). A mapping of tables, figures or
texts (a partitioned output) is logged entry by entry. A search that stopped
early logs what reporting.SEARCH_REPORTS makes for it, and its pool.
"""

from __future__ import annotations

import math
import tempfile
import types
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import mlflow.sklearn
import pandas as pd
from matplotlib.figure import Figure
from mlflow.models import Model, ModelSignature, infer_signature
from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema
from mlflow.utils.file_utils import get_total_file_size
from pandas.api.types import is_integer_dtype
from sklearn.dummy import DummyRegressor

import ensemble_bo
from ensemble_bo import provenance, served
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.reporting import (
    FIGURE,
    METRICS,
    SEARCH_REPORTS,
    TABLE,
    png_bytes,
    search_reports,
)
from ensemble_bo.tracking.model_integrity import record_model
from ensemble_bo.tracking.pools import log_pool, log_result

# MLflow accepts at most this many params per call and this many characters per value.
_PARAMS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
# Packages the logged model needs to load elsewhere (`mlflow models predict`):
# pinned with everything they depend on, at the versions of this run.
_MODEL_REQUIREMENTS = ("scikit-learn", "numpy", "pandas", "scipy", "skops")
# The kind of a search result (mlflow.yml): logged as a pool, under pools/.
POOL = "pool"
# Where a stopped search's reports and pool go, and the title of its figures.
PARTIAL = "partial"
STOPPED_TITLE = "stopped search"


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


def _log_table(table: pd.DataFrame, path: str) -> None:
    mlflow.log_text(table.to_csv(index=False), f"{path}.csv")


def _log_figure(figure: Figure, path: str) -> None:
    folder, _, name = f"{path}.png".rpartition("/")
    with tempfile.TemporaryDirectory() as directory:
        file = Path(directory) / name
        file.write_bytes(png_bytes(figure))
        mlflow.log_artifact(str(file), folder or None)


def _log_text(text: Any, path: str) -> None:
    mlflow.log_text(str(text), f"{path}.md")


# The kinds logged as files: the folder each goes under, and how it is written.
FILE_KINDS: dict[str, tuple[str, Callable[[Any, str], None]]] = {
    TABLE: ("tables", _log_table),
    FIGURE: ("plots", _log_figure),
    "text": ("reports", _log_text),
}


def log_output(
    name: str,
    data: Any,
    rule: Mapping[str, Any],
    input_example: Any = None,
    method: str | None = None,
) -> None:
    """The node output `name` as its rule (mlflow.yml) says; `input_example`: the
    data a model's example rows come from. An output named `<name>#<kind>` (a
    search's report, reporting.report_dataset) is logged as <name>.

    A file with `at_root: true` goes to the artifact root, the only folder
    MLflow's compare view reads, and in the run of one `method` without its
    `<method>_` prefix, so that runs of different methods share its name.
    """
    kind = rule["as"]
    name = name.removesuffix(f"#{kind}")
    if kind in FILE_KINDS and isinstance(data, Mapping):
        # A partitioned output: each entry under a folder named after it.
        for key, value in sorted(data.items()):
            log_output(f"{name}/{key}", value, rule)
        return
    if kind == "params":
        log_params(data, prefix=f"{name}.")
    elif kind == METRICS:
        mlflow.log_metrics(
            {key: float(value) for key, value in flatten(data) if math.isfinite(value)}
        )
    elif kind in FILE_KINDS:
        if not (kind == TABLE and rule.get("skip_empty") and data.empty):
            folder, write = FILE_KINDS[kind]
            if rule.get("at_root"):
                write(data, name.removeprefix(f"{method}_") if method else name)
            else:
                write(data, f"{folder}/{name}")
    elif kind == POOL:
        log_pool(name, data)
    elif kind == "model":
        log_model(name, data, input_example)
    else:
        raise ValueError(
            f"conf mlflow.yml: log_outputs.{name}.as={kind!r}; "
            f"expected params, metrics, table, figure, text, {POOL} or model"
        )


def served_signature(estimator: Any, example: pd.DataFrame) -> ModelSignature:
    """The model's signature, inferred from its example rows, with every integer
    column typed Any.

    Served from a CSV or a JSON request, an integer column arrives as floats
    wherever a cell is empty (28.0, NaN). Typed `long` (as inferred), MLflow
    refuses those ("Can not safely convert float64 to int64"), while a float
    column's missing value reaches the model and is imputed; typed `double`,
    it would refuse the integers themselves. Any passes the column on as it
    comes, and the model takes its numbers (whole, float or missing) as every
    numeric column's. The other columns keep their inferred types.
    """
    signature = infer_signature(example, estimator.predict(example))
    integers = {c for c in example.columns if is_integer_dtype(example[c])}
    signature.inputs = Schema(
        [
            ColSpec(AnyType(), spec.name, spec.required)
            if spec.name in integers
            else spec
            for spec in signature.inputs.inputs
        ]
    )
    # params={"coverage": 0.9}: intervals or sets (ensemble_bo.served), or,
    # from a model without fold models, an error that says so rather than
    # MLflow dropping a parameter its signature lacks.
    signature.params = ParamSchema([ParamSpec(served.COVERAGE, "double", None)])
    return signature


# What MLflow's save_model is given in place of the ensemble. It writes the
# model's environment, code, example rows and MLmodel, and then loads back the
# skops file it dumped, in this process: for the ensemble, a second copy beside
# the first (on 100,000 rows, the run's peak: 1.65 GB from 0.97 GB). The
# ensemble's own file is dumped once, by dump_model.
_STAND_IN = DummyRegressor()


def _save_served_model(
    path: str, mlflow_model: Model, sk_model: Any, **kwargs: Any
) -> None:
    """mlflow.sklearn.save_model, with the skops file of `sk_model` dumped
    once (dump_model), and the python_function flavor loading through
    ensemble_bo.served (point predictions, or intervals and sets when asked)."""
    kwargs.pop("validate_serving_input", None)  # Model.log's, not save_model's
    mlflow.sklearn.save_model(
        path=path, mlflow_model=mlflow_model, sk_model=_STAND_IN, **kwargs
    )
    sklearn_flavor = mlflow_model.flavors[mlflow.sklearn.FLAVOR_NAME]
    sklearn_flavor["skops_trusted_types"] = dump_model(
        sk_model, Path(path) / sklearn_flavor["pickled_model"]
    )
    mlflow_model.flavors[mlflow.pyfunc.FLAVOR_NAME][mlflow.pyfunc.MAIN] = (
        served.__name__
    )
    mlflow_model.model_size_bytes = get_total_file_size(path)
    mlflow_model.save(str(Path(path) / "MLmodel"))


def dump_model(estimator: Any, path: Path) -> list[str]:
    """Write `estimator` to the skops file `path`, deflated; return the types
    loading it must trust: exactly those its file holds, read from the file's
    schema, which loads no array.

    The estimator was built by this very run, so its own types are trusted,
    and anything else is still refused. Deflated, a forest's node arrays take
    about a third (577 to 174 MB for 100 trees on 40,000 rows) for about 3 s
    more per 500 MB written and 2 s loaded. The file is written as
    skops.io.dump writes it, in time linear in its arrays (skops_file).
    """
    # Imported here: skops takes over a second to import, and every `kedro`
    # command loads this module while only a run that logs a model needs it.
    import skops.io  # noqa: PLC0415

    from ensemble_bo.tracking.skops_file import write_skops  # noqa: PLC0415

    write_skops(estimator, path, compression=zipfile.ZIP_DEFLATED, compresslevel=1)
    return skops.io.get_untrusted_types(file=path)


# What Model.log takes as a flavor: a module-like object with save_model.
_SERVED_FLAVOR = types.SimpleNamespace(
    __name__="mlflow.sklearn", save_model=_save_served_model
)


def log_model(name: str, estimator: Any, input_example: Any) -> None:
    """The fitted ensemble as an MLflow sklearn model that loads and serves
    anywhere; served, it also gives intervals or sets (ensemble_bo.served)."""
    example = None if input_example is None else input_example.head(5)
    logged = Model.log(
        artifact_path=None,
        flavor=_SERVED_FLAVOR,
        sk_model=estimator,
        name=name,
        serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_SKOPS,
        # Pinned here instead of inferred: inference re-imports the model in a
        # subprocess.
        pip_requirements=provenance.pinned_requirements(_MODEL_REQUIREMENTS),
        input_example=example,
        signature=None if example is None else served_signature(estimator, example),
        # MLflow's check of the example would load the model a second time in
        # this process (see _STAND_IN), and only warns when it fails; the
        # signature above already predicted those rows.
        validate_serving_input=False,
        # The ensemble classes are ours: ship the package so the model loads
        # and serves (`mlflow models predict`) where ensemble_bo is not installed.
        code_paths=[str(Path(ensemble_bo.__file__).parent)],
    )
    trusted_types = logged.flavors[mlflow.sklearn.FLAVOR_NAME]["skops_trusted_types"]
    record_model(name, logged.model_uri, trusted_types)


def log_stopped_search(result: EnsembleSearchResult) -> None:
    """What a search that stopped early had, under partial/: the reports made
    for a stopped search (reporting.SEARCH_REPORTS) and its pool."""
    mlflow.log_metric("iterations_completed", len(result.history))
    for name, report in search_reports(result, STOPPED_TITLE, stopped=True).items():
        _, write = FILE_KINDS[SEARCH_REPORTS[name].kind]
        write(report, f"{PARTIAL}/{PARTIAL}_{name}")
    log_result(result, PARTIAL, f"{PARTIAL}_search_result")
