"""A search result as data only (core/result_files.py): round trips, and files refused."""

import json
import math
import os
import pickle
import shutil
from dataclasses import MISSING, asdict, fields, replace

import numpy as np
import pytest

from ensemble_bo.core.losses import PREDICTIONS, PROBABILITIES
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.preparation import ModelInput
from ensemble_bo.core.result_files import (
    ARRAYS_NPZ,
    COST_ARRAYS,
    RESULT_JSON,
    ResultFileError,
    read_result,
    write_result,
)
from ensemble_bo.core.results import (
    EnsembleSearchResult,
    IterationRecord,
    RungEvaluation,
)
from ensemble_bo.core.trials import TrialResult
from tests.support import cheap_parameters

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 3))
FOLDS = np.arange(40) % 5
IDENTITY = {"mean": 0.0, "std": 1.0}
INFO = {"name": "toy", "categorical_columns": []}
REGRESSION = ModelInput(
    X, X[:, 0] + 0.1 * RNG.normal(size=40), FOLDS, "regression", IDENTITY, INFO
)
CLASSES = ModelInput(
    X,
    (X[:, 0] > 0).astype(int) + (X[:, 2] > 1).astype(int),
    FOLDS,
    "classification",
    IDENTITY,
    INFO,
)


def searched(method, data, **blocks):
    parameters = cheap_parameters() | {"budget": 6}
    for name, change in blocks.items():
        parameters[name] = {**parameters[name], **change}
    parameters[method] = {
        **parameters[method],
        "time_limit": None,
        "optimizer": {**parameters[method]["optimizer"], "n_initial": 3},
    }
    return run_method(method, data, parameters, seed=0)


def same(first, second) -> bool:
    """Equal, NaN equal to NaN, arrays by value, in records and mappings too."""
    if isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        return np.array_equal(np.asarray(first), np.asarray(second), equal_nan=True)
    if isinstance(first, IterationRecord | RungEvaluation):
        return type(first) is type(second) and same(asdict(first), asdict(second))
    if isinstance(first, dict):
        return (
            isinstance(second, dict)
            and list(first) == list(second)
            and all(same(first[key], second[key]) for key in first)
        )
    if isinstance(first, list | tuple):
        return len(first) == len(second) and all(map(same, first, second))
    if isinstance(first, float) and math.isnan(first):
        return isinstance(second, float) and math.isnan(second)
    return type(first) is type(second) and first == second


def assert_round_trip(result: EnsembleSearchResult, folder) -> EnsembleSearchResult:
    write_result(result, folder)
    assert sorted(path.name for path in folder.iterdir()) == [ARRAYS_NPZ, RESULT_JSON]
    loaded = read_result(folder)
    for field in fields(EnsembleSearchResult):
        if field.name != "pool":
            original, read = getattr(result, field.name), getattr(loaded, field.name)
            assert same(original, read), field.name
    pool, read_pool = result.pool, loaded.pool
    assert read_pool.n_samples == pool.n_samples
    assert same(read_pool.labels, pool.labels)
    assert same(read_pool.configs, pool.configs)
    assert same(read_pool.encoded, pool.encoded)
    assert same(read_pool.fit_seconds, pool.fit_seconds)
    assert same(read_pool.predict_seconds_per_1000, pool.predict_seconds_per_1000)
    assert same(read_pool.model_bytes, pool.model_bytes)
    assert same(read_pool.errors, pool.errors)
    for kind in pool._outputs:  # every output, the derived ones recomputed
        original, read = pool.member_outputs(kind), read_pool.member_outputs(kind)
        if kind in (PREDICTIONS, PROBABILITIES):  # stored as float32
            assert read.dtype == original.dtype, kind
            assert same(read, original.astype(np.float32).astype(float)), kind
        elif original.dtype.kind == "f":  # recomputed from those
            np.testing.assert_allclose(read, original, rtol=1e-6, atol=1e-7)
        else:
            assert same(read, original), kind
    assert loaded.task == result.task and loaded.voting == result.voting
    return loaded


def every_field_result() -> EnsembleSearchResult:
    """A classification result with every field set away from its default: a
    failed trial, configurations of every JSON type, weights, target, history,
    rung evaluations."""
    labels = np.array([0, 1, 2, 1, 0])
    pool = Pool(5, labels=labels)
    configs = [
        {"depth": 3, "rate": 0.25, "kind": "gini", "limit": None, "bootstrap": True},
        {"depth": 7, "rate": 1.0, "kind": "entropy", "limit": 4, "layers": [8, 4]},
        {"depth": 1, "rate": 1e-300, "kind": "", "limit": None, "bootstrap": False},
    ]
    probabilities = RNG.dirichlet(np.ones(3), size=5)
    pool.add(
        configs[0],
        np.array([0.1, 0.2]),
        TrialResult(
            probabilities.argmax(axis=1).astype(float),
            0.5,
            None,
            probabilities,
            predict_seconds_per_1000=0.02,
            model_bytes=4096.0,
        ),
    )
    pool.add(configs[1], np.array([0.3, 0.4]), TrialResult(None, 1.5, "ValueError: x"))
    pool.add(configs[2], np.array([0.5, 0.6]), TrialResult(labels.astype(float), 2.0))
    record = IterationRecord(0, -1, 0, "ok", "replace", 0.4, 0.3, 1, math.nan, 0.5)
    result = EnsembleSearchResult(
        pool=pool,
        members=[0, 2, 2],
        single_losses=np.array([0.4, math.nan, 0.2]),
        history=[record, replace(record, iteration=1, trial=1, status="failed")],
        target=labels,
        weights={0: 0.25, 2: 0.75},
        model_name="decision_tree_classifier",
        trials_reused=1,
        search_seconds=3.5,
        stopped_by="time_budget",
        search_metrics={"esmbo_rho": 0.3},
        objective="log_loss",
        rung_evaluations=[
            RungEvaluation(0, 0, 1.0, configs[0], "ok", 0.5, True, -1, 0.1),
            RungEvaluation(0, 1, 5.0, configs[0], "ok", math.nan, False, 0, 0.4),
            RungEvaluation(
                0, 0, 1.0, configs[1], "failed", math.nan, False, -1, 0.0, "x"
            ),
        ],
    )
    for field in fields(EnsembleSearchResult):  # so a new field is round-tripped too
        if field.default_factory is not MISSING:
            assert not same(getattr(result, field.name), field.default_factory())
        elif field.default is not MISSING:
            assert not same(getattr(result, field.name), field.default), field.name
    return result


def test_a_result_written_before_trial_costs_reads_them_as_nan(tmp_path):
    folder = tmp_path / "result"
    write_result(every_field_result(), folder)
    with np.load(folder / ARRAYS_NPZ) as stored:
        arrays = {k: v for k, v in stored.items() if k not in COST_ARRAYS}
    np.savez(folder / ARRAYS_NPZ, **arrays)
    pool = read_result(folder).pool
    assert np.isnan(pool.predict_seconds_per_1000).all()
    assert np.isnan(pool.model_bytes).all() and len(pool.model_bytes) == 3


def test_history_written_before_a_field_existed_takes_its_default(tmp_path):
    folder = tmp_path / "result"
    write_result(every_field_result(), folder)
    document = json.loads((folder / RESULT_JSON).read_text())
    for record in document["history"]:
        del record["ensemble_predict_seconds"]
    (folder / RESULT_JSON).write_text(json.dumps(document))
    history = read_result(folder).history
    assert len(history) == 2 and all(
        math.isnan(r.ensemble_predict_seconds) for r in history
    )
    # a required key is still required
    del document["history"][0]["trial"]
    (folder / RESULT_JSON).write_text(json.dumps(document))
    with pytest.raises(ResultFileError, match="trial"):
        read_result(folder)


def test_every_field_of_a_result_and_its_pool_round_trips(tmp_path):
    loaded = assert_round_trip(every_field_result(), tmp_path / "result")
    assert loaded.pool.configs[0]["limit"] is None
    assert loaded.pool.configs[0]["bootstrap"] is True
    assert type(loaded.pool.configs[1]["rate"]) is float
    assert loaded.pool.errors[1] == "ValueError: x"


@pytest.mark.parametrize(
    ("method", "data", "blocks"),
    [
        ("segor", REGRESSION, {}),
        ("sego", CLASSES, {}),
        ("esmbo", REGRESSION, {}),
        (
            "segor",
            REGRESSION,
            {"segor": {"fidelity": {"scheduler": "hyperband", "resource": "folds"}}},
        ),
    ],
    ids=["regression", "classification", "esmbo", "multi-fidelity"],
)
def test_a_search_s_result_round_trips(tmp_path, method, data, blocks):
    result = searched(method, data, **blocks)
    if "segor" in blocks:
        assert result.rung_evaluations
    loaded = assert_round_trip(result, tmp_path / "result")
    assert loaded.member_weights == result.member_weights
    assert loaded.diversity() == pytest.approx(result.diversity(), rel=1e-5)


@pytest.fixture
def written(tmp_path):
    folder = tmp_path / "result"
    write_result(every_field_result(), folder)
    return folder


def rewrite_document(folder, change):
    document = json.loads((folder / RESULT_JSON).read_text())
    change(document)
    (folder / RESULT_JSON).write_text(json.dumps(document))


def rewrite_arrays(folder, change):
    with np.load(folder / ARRAYS_NPZ) as archive:
        arrays = dict(archive)
    change(arrays)
    np.savez_compressed(folder / ARRAYS_NPZ, **arrays)


class CreatesAMarker:
    """Unpickled, creates the folder `path` (what crafted code could do)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_a_pickle_in_place_of_a_file_is_refused_without_being_unpickled(
    written, tmp_path
):
    marker = tmp_path / "marker"
    crafted = pickle.dumps(CreatesAMarker(marker))
    pickle.loads(crafted)  # the crafted bytes do run code when unpickled
    assert marker.is_dir()
    marker.rmdir()
    (written / ARRAYS_NPZ).write_bytes(crafted)
    with pytest.raises(ResultFileError, match="arrays.npz is not a numpy archive"):
        read_result(written)
    # an archive holding an array of pickled objects
    objects = np.array([CreatesAMarker(marker)], dtype=object)
    with (written / ARRAYS_NPZ).open("wb") as file:
        np.savez(file, predictions=objects)
    with pytest.raises(ResultFileError, match="arrays.npz is not a numpy archive"):
        read_result(written)
    (written / RESULT_JSON).write_bytes(crafted)
    with pytest.raises(ResultFileError, match="result.json is not JSON text"):
        read_result(written)
    assert not marker.exists()
    # nor is a whole result that is a pickle, as a file
    (tmp_path / "pool.pkl").write_bytes(crafted)
    with pytest.raises(ResultFileError, match="is not a folder"):
        read_result(tmp_path / "pool.pkl")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.update(version=2),
            "format 'ensemble_bo.search_result' version 2; this version of "
            "ensemble_bo reads 'ensemble_bo.search_result' version 1",
        ),
        (lambda d: d.pop("members"), r"result.json: missing keys \['members'\]"),
        (lambda d: d.update(extra=1), r"result.json: unknown keys \['extra'\]"),
        (lambda d: d.update(trials="abc"), "'trials' is str 'abc', expected list"),
        (lambda d: d.update(members=[0, 3]), "'members' holds int 3, expected pool"),
        (lambda d: d.update(weights=[[0, "a"]]), r"\[pool index, weight\] pairs"),
        (lambda d: d.update(task="ranking"), "task 'ranking'"),
        (
            lambda d: d["trials"][1].pop("error"),
            r"trials\[1\]: missing keys \['error'\]",
        ),
        (
            lambda d: d["history"][0].update(iteration="0"),
            r"history\[0\]: 'iteration' is str '0', expected int",
        ),
        (
            lambda d: d["rung_evaluations"][0].update(promoted=1),
            r"rung_evaluations\[0\]: 'promoted' is int 1, expected bool",
        ),
        (lambda d: d.update(search_metrics={"rho": None}), r"search_metrics\['rho'\]"),
    ],
)
def test_a_document_off_the_schema_is_refused_naming_what(written, change, message):
    rewrite_document(written, change)
    with pytest.raises(ResultFileError, match=message):
        read_result(written)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda a: a.update(predictions=a["predictions"][:, :4]),
            r"'predictions' has shape \(3, 4\), expected \(3, 5\) \(3 trials of 5",
        ),
        (lambda a: a.pop("labels"), r"missing arrays \['labels'\]"),
        (lambda a: a.update(more=np.zeros(2)), r"unknown arrays \['more'\]"),
        (
            lambda a: a.update(fit_seconds=np.array(["0.5", "1.5", "2.0"])),
            "'fit_seconds' holds <U3 values, expected floating-point numbers",
        ),
        (lambda a: a.update(encoded=np.zeros(3)), "'encoded' has shape"),
        (lambda a: a.update(labels=a["labels"] + 0.5), "not whole numbers"),
        (
            lambda a: a.update(probabilities=a["probabilities"][:, :, :2]),
            r"'probabilities' has shape \(3, 5, 2\), expected \(3, 5, 3\)",
        ),
        (
            lambda a: a["predictions"].__setitem__((0, 0), 7.0),
            "trial 0: predicted class codes must be whole numbers in",
        ),
    ],
)
def test_arrays_off_the_schema_are_refused_naming_what(written, change, message):
    rewrite_arrays(written, change)
    with pytest.raises(ResultFileError, match=message):
        read_result(written)


def test_a_missing_file_is_named(written):
    (written / ARRAYS_NPZ).unlink()
    with pytest.raises(ResultFileError, match="is not a search result as ensemble_bo"):
        read_result(written)
    shutil.rmtree(written)
    written.mkdir()
    with pytest.raises(ResultFileError, match="it has no result.json"):
        read_result(written)


def test_a_value_without_a_json_form_is_refused_when_written(tmp_path):
    result = every_field_result()
    result.pool.configs[0]["when"] = object()
    with pytest.raises(TypeError, match="has no JSON form"):
        write_result(result, tmp_path / "result")


def test_predictions_and_probabilities_are_stored_as_float32(tmp_path):
    result = every_field_result()
    write_result(result, tmp_path / "result")
    with np.load(tmp_path / "result" / ARRAYS_NPZ) as archive:
        assert archive["predictions"].dtype == np.float32
        assert archive["probabilities"].dtype == np.float32
        # the rest keeps float64: seconds, losses, encoded points
        assert archive["fit_seconds"].dtype == np.float64
        assert archive["encoded"].dtype == np.float64
    # a pool written as float64 (by an earlier version) still reads
    rewrite_arrays(
        tmp_path / "result",
        lambda arrays: arrays.update(
            predictions=arrays["predictions"].astype(np.float64)
        ),
    )
    assert read_result(tmp_path / "result").pool.predictions.dtype == np.float64
