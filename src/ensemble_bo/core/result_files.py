"""A search's result as data only: its numbers in an npz archive, the rest in JSON.

What a run logs as its pool (and a stopped search as its partial result), and
what the catalog keeps under data/06_models, is a folder of two files:

- `result.json`: the format and its version, the task and the number of
  samples, every trial's configuration and error, and the result's other
  fields (members, weights, history, rung evaluations, model, objective,
  search metrics, ...);
- `arrays.npz` (compressed): every trial's out-of-fold predictions (t, n),
  encoded point (t, d) and fit seconds (t,), the models' own CV losses (t,),
  the target (n,) when the result has one and, for classification, the
  labels (n,) and every trial's class probabilities (t, n, K). Predictions
  and probabilities are written as float32 (read as float64; a pool written
  as float64 reads too).

Nothing in either file can run code: the archive is read with
`allow_pickle=False`, the text with `json.loads`. A file is checked against the
schema as it is read (the version, every key and no other, each value's type,
each array's dtype and shape, lengths that agree), and the pool is rebuilt
trial by trial as a search builds it (`Pool.add`, which recomputes and checks
the outputs derived from the predictions); what fails is a ResultFileError
naming the file, the key and what was expected.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from ensemble_bo.core.losses import PROBABILITIES
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import (
    EnsembleSearchResult,
    IterationRecord,
    RungEvaluation,
)
from ensemble_bo.core.trials import TrialResult

FORMAT = "ensemble_bo.search_result"
VERSION = 1
RESULT_JSON = "result.json"
ARRAYS_NPZ = "arrays.npz"
REGRESSION, CLASSIFICATION = "regression", "classification"

# The keys of result.json and of each of its trials, with the JSON types their
# values may take (the names of IterationRecord's and RungEvaluation's fields).
_DOCUMENT = {
    "format": "str",
    "version": "int",
    "task": "str",
    "n_samples": "int",
    "trials": "list",
    "members": "list",
    "weights": "list | None",
    "history": "list",
    "rung_evaluations": "list",
    "model_name": "str",
    "objective": "str",
    "trials_reused": "int",
    "search_seconds": "float",
    "stopped_by": "str",
    "search_metrics": "dict",
}
_TRIAL = {"config": "dict", "error": "str | None"}
_JSON_TYPES = {
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, int | float)
    and not isinstance(value, bool),
    "str": lambda value: isinstance(value, str),
    "bool": lambda value: isinstance(value, bool),
    "dict": lambda value: isinstance(value, dict),
    "list": lambda value: isinstance(value, list),
    "None": lambda value: value is None,
}
# The arrays every result has (by the dtype kinds they may take: float, or any
# number); a classification result also has labels and probabilities, and a
# result with a target has it.
_FLOATS, _NUMBERS = "f", "iuf"
_ARRAYS = {
    "predictions": _FLOATS,
    "encoded": _FLOATS,
    "fit_seconds": _FLOATS,
    "single_losses": _FLOATS,
}
_CLASSIFICATION_ARRAYS = {"labels": _NUMBERS, "probabilities": _FLOATS}
# Trial costs (TrialResult), absent from results written before they were measured.
COST_ARRAYS = ("predict_seconds_per_1000", "model_bytes")
_OPTIONAL_ARRAYS = {"target": _NUMBERS} | dict.fromkeys(COST_ARRAYS, _FLOATS)


class ResultFileError(ValueError):
    """A folder that does not hold a search result in this format; the message
    names the file, the key and what is wrong."""


def write_result(result: EnsembleSearchResult, folder: Path) -> None:
    """`result` as `folder`/result.json and `folder`/arrays.npz (created)."""
    pool = result.pool
    arrays = {
        # float32 halves what every run writes twice (under data/ and in
        # MLflow); a selection from the pool read back sees values rounded
        # to 7 digits (benchmarks/float32_pools.py measures what that changes)
        "predictions": pool.predictions.astype(np.float32),
        # (t, d); a pool of no trials has no dimension to tell
        "encoded": np.vstack(pool.encoded) if pool.encoded else np.zeros((0, 0)),
        "fit_seconds": np.asarray(pool.fit_seconds, dtype=float),
        "single_losses": np.asarray(result.single_losses, dtype=float),
        **{name: np.asarray(getattr(pool, name), dtype=float) for name in COST_ARRAYS},
    }
    if pool.labels is not None:
        arrays |= {
            "labels": pool.labels,
            "probabilities": pool.member_outputs(PROBABILITIES).astype(np.float32),
        }
    if result.target is not None:
        arrays["target"] = np.asarray(result.target)
    document = {
        "format": FORMAT,
        "version": VERSION,
        "task": result.task,
        "n_samples": pool.n_samples,
        "trials": [
            {"config": config, "error": error}
            for config, error in zip(pool.configs, pool.errors)
        ],
        "members": list(result.members),
        # pairs: JSON's object keys would turn the pool indices into text
        "weights": None if result.weights is None else list(result.weights.items()),
        "history": [asdict(record) for record in result.history],
        "rung_evaluations": [asdict(record) for record in result.rung_evaluations],
        "model_name": result.model_name,
        "objective": result.objective,
        "trials_reused": result.trials_reused,
        "search_seconds": result.search_seconds,
        "stopped_by": result.stopped_by,
        "search_metrics": result.search_metrics,
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1, default=_json_scalar)
    (folder / RESULT_JSON).write_text(text, encoding="utf-8")
    with (folder / ARRAYS_NPZ).open("wb") as file:
        np.savez_compressed(file, allow_pickle=False, **arrays)


def _json_scalar(value: Any) -> Any:
    """A numpy number (or bool) as the Python one; anything else is refused."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(
        f"a search result holds {value!r} ({type(value).__name__}), which has no "
        "JSON form: configurations and records hold numbers, text, booleans, "
        "None, lists and mappings"
    )


def read_result(folder: Path, name: str | None = None) -> EnsembleSearchResult:
    """The result `folder` holds (write_result), checked; or ResultFileError.
    `name`: what messages call the folder (by default, its path)."""
    folder = Path(folder)
    name = name or str(folder)
    if not folder.is_dir():
        raise ResultFileError(
            f"{name} is not a folder: a search result is a folder holding "
            f"{RESULT_JSON} and {ARRAYS_NPZ}"
        )
    try:
        return _result(_read_document(folder / RESULT_JSON), _read_arrays(folder))
    except ResultFileError as error:
        raise ResultFileError(
            f"{name} is not a search result as ensemble_bo writes one: {error}"
        ) from None


def _read_document(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ResultFileError(f"it has no {RESULT_JSON}")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # not JSON, or not UTF-8 text
        raise ResultFileError(f"{RESULT_JSON} is not JSON text ({error})") from None
    if not isinstance(document, dict):
        raise ResultFileError(f"{RESULT_JSON} holds {_shown(document)}, not an object")
    if (document.get("format"), document.get("version")) != (FORMAT, VERSION):
        raise ResultFileError(
            f"{RESULT_JSON} has format {document.get('format')!r} version "
            f"{document.get('version')!r}; this version of ensemble_bo reads "
            f"{FORMAT!r} version {VERSION}"
        )
    return _checked(document, _DOCUMENT, RESULT_JSON)


def _read_arrays(folder: Path) -> dict[str, np.ndarray]:
    path = folder / ARRAYS_NPZ
    if not path.is_file():
        raise ResultFileError(f"it has no {ARRAYS_NPZ}")
    try:
        # allow_pickle=False: a pickle, or an array of Python objects, is
        # refused before anything in it is read, let alone run.
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an archive of named arrays")
        with archive:
            return {name: archive[name] for name in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ResultFileError(
            f"{ARRAYS_NPZ} is not a numpy archive of plain arrays ({error})"
        ) from None


def _result(
    document: dict[str, Any], arrays: dict[str, np.ndarray]
) -> EnsembleSearchResult:
    task, n = document["task"], document["n_samples"]
    if n < 1:
        raise ResultFileError(f"{RESULT_JSON}: n_samples is {n}, expected at least 1")
    if task not in (REGRESSION, CLASSIFICATION):
        raise ResultFileError(
            f"{RESULT_JSON}: task {task!r}, expected {REGRESSION!r} or "
            f"{CLASSIFICATION!r}"
        )
    trials = [
        _checked(trial, _TRIAL, f"{RESULT_JSON}: trials[{index}]")
        for index, trial in enumerate(document["trials"])
    ]
    expected = _ARRAYS | (_CLASSIFICATION_ARRAYS if task == CLASSIFICATION else {})
    _refuse_other_keys(arrays, expected, ARRAYS_NPZ, "arrays", _OPTIONAL_ARRAYS)
    t = len(trials)
    shapes = {
        "predictions": (t, n),
        "fit_seconds": (t,),
        "single_losses": (t,),
        **dict.fromkeys(COST_ARRAYS, (t,)),
        "labels": (n,),
        "target": (n,),
    }
    for name, array in arrays.items():
        kinds = {**expected, **_OPTIONAL_ARRAYS}[name]
        if array.dtype.kind not in kinds:
            raise ResultFileError(
                f"{ARRAYS_NPZ}: {name!r} holds {array.dtype} values, expected "
                + ("floating-point numbers" if kinds == _FLOATS else "numbers")
            )
        if name in shapes and array.shape != shapes[name]:
            raise ResultFileError(
                f"{ARRAYS_NPZ}: {name!r} has shape {array.shape}, expected "
                f"{shapes[name]} ({t} trials of {n} samples)"
            )
    if arrays["encoded"].ndim != 2 or len(arrays["encoded"]) != t:
        raise ResultFileError(
            f"{ARRAYS_NPZ}: 'encoded' has shape {arrays['encoded'].shape}, expected "
            f"({t}, d): one encoded point per trial"
        )
    return EnsembleSearchResult(
        pool=_pool(trials, arrays, n),
        members=_indices(document["members"], t, "members"),
        single_losses=arrays["single_losses"].astype(float),
        history=_records(IterationRecord, document["history"], "history"),
        target=arrays.get("target"),
        weights=_weights(document["weights"], t),
        model_name=document["model_name"],
        trials_reused=document["trials_reused"],
        search_seconds=document["search_seconds"],
        stopped_by=document["stopped_by"],
        search_metrics=_search_metrics(document["search_metrics"]),
        objective=document["objective"],
        rung_evaluations=_records(
            RungEvaluation, document["rung_evaluations"], "rung_evaluations"
        ),
    )


def _pool(trials: list[dict], arrays: dict[str, np.ndarray], n: int) -> Pool:
    """The pool rebuilt trial by trial, its derived outputs recomputed by Pool.add."""
    labels = arrays.get("labels")
    if labels is not None:
        if not (np.all(np.isfinite(labels)) and np.all(labels == np.floor(labels))):
            raise ResultFileError(f"{ARRAYS_NPZ}: 'labels' are not whole numbers")
        if labels.size and labels.min() < 0:
            raise ResultFileError(f"{ARRAYS_NPZ}: 'labels' hold {labels.min()} < 0")
        classes = int(labels.max()) + 1 if labels.size else 0
        expected = (len(trials), n, classes)
        if arrays["probabilities"].shape != expected:
            raise ResultFileError(
                f"{ARRAYS_NPZ}: 'probabilities' has shape "
                f"{arrays['probabilities'].shape}, expected {expected} (trials, "
                "samples, classes)"
            )
    pool = Pool(n, max(len(trials), 1), labels)
    for index, trial in enumerate(trials):
        ok = trial["error"] is None
        outcome = TrialResult(
            arrays["predictions"][index] if ok else None,
            float(arrays["fit_seconds"][index]),
            trial["error"],
            arrays["probabilities"][index] if ok and labels is not None else None,
            **{
                name: float(arrays[name][index])
                for name in COST_ARRAYS
                if name in arrays
            },
        )
        try:
            pool.add(trial["config"], arrays["encoded"][index], outcome)
        except ValueError as error:
            raise ResultFileError(f"{ARRAYS_NPZ}: {error}") from None
    return pool


def _checked(data: Any, kinds: Mapping[str, str], where: str) -> dict[str, Any]:
    """`data`, an object with exactly the keys of `kinds`, each of its JSON type
    (a float may be written as an integer)."""
    if not isinstance(data, dict):
        raise ResultFileError(f"{where} is {_shown(data)}, expected an object")
    _refuse_other_keys(data, kinds, where, "keys")
    for key, kind in kinds.items():
        if not any(_JSON_TYPES[option](data[key]) for option in kind.split(" | ")):
            raise ResultFileError(
                f"{where}: {key!r} is {_shown(data[key])}, expected {kind}"
            )
    return {
        key: float(value) if kinds[key] == "float" else value
        for key, value in data.items()
    }


def _records(record_type: type, items: list, key: str) -> list:
    kinds = {field.name: str(field.type) for field in fields(record_type)}
    # Fields added later have defaults: a result written before them lacks
    # their keys, which then take the default.
    optional = {f.name for f in fields(record_type) if f.default is not MISSING}
    return [
        record_type(
            **_checked(
                item,
                {k: v for k, v in kinds.items() if k not in optional or k in item}
                if isinstance(item, dict)
                else kinds,
                f"{RESULT_JSON}: {key}[{index}]",
            )
        )
        for index, item in enumerate(items)
    ]


def _indices(values: list, trials: int, key: str) -> list[int]:
    for value in values:
        if not _JSON_TYPES["int"](value) or not 0 <= value < trials:
            raise ResultFileError(
                f"{RESULT_JSON}: {key!r} holds {_shown(value)}, expected pool "
                f"indices 0..{trials - 1}"
            )
    return list(values)


def _weights(pairs: list | None, trials: int) -> dict[int, float] | None:
    if pairs is None:
        return None
    weights = {}
    for pair in pairs:
        if not (
            isinstance(pair, list) and len(pair) == 2 and _JSON_TYPES["float"](pair[1])
        ):
            raise ResultFileError(
                f"{RESULT_JSON}: 'weights' holds {_shown(pair)}, expected "
                "[pool index, weight] pairs"
            )
        (index,) = _indices([pair[0]], trials, "weights")
        weights[index] = float(pair[1])
    return weights


def _search_metrics(metrics: dict) -> dict[str, float]:
    for name, value in metrics.items():
        if not _JSON_TYPES["float"](value):
            raise ResultFileError(
                f"{RESULT_JSON}: search_metrics[{name!r}] is {_shown(value)}, "
                "expected a number"
            )
    return {name: float(value) for name, value in metrics.items()}


def _refuse_other_keys(
    present: Mapping[str, Any],
    expected: Mapping[str, Any],
    where: str,
    noun: str,
    optional: Mapping[str, Any] | None = None,
) -> None:
    """Every key of `expected` is present, and no key but those and `optional`'s."""
    optional = optional or {}
    missing = [key for key in expected if key not in present]
    unknown = [key for key in present if key not in expected and key not in optional]
    if missing or unknown:
        problems = [f"missing {noun} {missing}"] if missing else []
        problems += [f"unknown {noun} {unknown}"] if unknown else []
        raise ResultFileError(
            f"{where}: {'; '.join(problems)} (its {noun} are {[*expected, *optional]})"
        )


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
