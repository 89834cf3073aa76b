"""The bundled datasets match data/01_raw/manifest.json, and a run checks it.

`sha256` in the manifest is the sha256 of each file's bytes (ensemble_bo.manifest).
The real check is `test_every_bundled_csv_matches_its_manifest_entry`; the others
work on a copy of data/01_raw in a temporary project: a changed listed file is
refused by `check_run_inputs` (what InputValidationHook runs before an MLflow
run is opened) with a message naming the file, the manifest and the ways out; an
unlisted file passes; a broken manifest is named; scripts/write_manifest.py
reproduces the committed manifest.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.manifest import (
    MANIFEST,
    check_raw_file,
    file_sha256,
    load_manifest,
    read_manifest,
)
from ensemble_bo.validation import check_run_inputs

PROJECT = Path(__file__).resolve().parents[1]
RAW_DATA = PROJECT / "data" / "01_raw"
HELDOUT = PROJECT / "benchmarks" / "heldout"
WRITE_MANIFEST = PROJECT / "scripts" / "write_manifest.py"
PARAMETERS = default_parameters()
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def parameters(**changes):
    result = copy.deepcopy(PARAMETERS)
    result.update(changes)
    return result


@pytest.fixture
def project(tmp_path):
    """A project folder with a copy of the bundled data/01_raw."""
    shutil.copytree(RAW_DATA, tmp_path / "data" / "01_raw")
    return tmp_path


def append_a_row(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines, lines[-1]]))


def test_file_sha256_is_the_sha256_of_the_bytes(tmp_path):
    path = tmp_path / "abc.txt"
    path.write_bytes(b"abc")
    assert file_sha256(path) == ABC_SHA256
    data = np.random.default_rng(0).bytes(3 * (1 << 20) + 17)  # several chunks
    (tmp_path / "big.bin").write_bytes(data)
    assert file_sha256(tmp_path / "big.bin") == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert file_sha256(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("folder", [RAW_DATA, HELDOUT], ids=["bundled", "heldout"])
def test_every_bundled_csv_matches_its_manifest_entry(folder):
    manifest = load_manifest(folder)
    assert sorted(manifest) == sorted(p.name for p in folder.glob("*.csv"))
    for name, entry in manifest.items():
        path = folder / name
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest(), name
        assert entry["rows"] == len(pd.read_csv(path)), name
        assert entry["name"] == path.stem
        assert "sha256_16" not in entry
        check_raw_file(path, folder, str(path.relative_to(PROJECT)))


def test_the_heldout_suite_shares_no_dataset_with_the_bundled_one():
    heldout = load_manifest(HELDOUT)
    assert not set(heldout) & set(load_manifest(RAW_DATA))
    tasks = [entry["task"] for entry in heldout.values()]
    assert tasks.count("regression") == 8 and len(tasks) == 16


@pytest.mark.parametrize(
    ("pipeline", "changes"),
    [
        ("segor", {"dataset": "diabetes"}),
        (
            "benchmark",
            {
                "benchmark": {
                    **PARAMETERS["benchmark"],
                    "datasets": ["wine", "diabetes"],
                }
            },
        ),
    ],
    ids=["dataset", "benchmark"],
)
def test_a_changed_bundled_file_is_refused_before_the_run(project, pipeline, changes):
    path = project / "data" / "01_raw" / "diabetes.csv"
    listed = load_manifest(path.parent)["diabetes.csv"]["sha256"]
    check_run_inputs(pipeline, parameters(**changes), project)  # unchanged: passes
    append_a_row(path)
    with pytest.raises(InvalidInput) as error:
        check_run_inputs(pipeline, parameters(**changes), project)
    message = str(error.value)
    for fragment in [
        "data/01_raw/diabetes.csv has changed",
        "data/01_raw/manifest.json",
        listed[:12],
        file_sha256(path)[:12],
        "git checkout -- data/01_raw/diabetes.csv",
        "python scripts/write_manifest.py",
    ]:
        assert fragment in message


def test_an_unlisted_csv_passes_unchecked(project):
    raw = project / "data" / "01_raw"
    rng = np.random.default_rng(1)
    x = rng.normal(size=80)
    pd.DataFrame({"x": x, "target": 2 * x + rng.normal(size=80)}).to_csv(
        raw / "mine.csv", index=False
    )
    assert "mine.csv" not in load_manifest(raw)
    check_raw_file(raw / "mine.csv", raw, "data/01_raw/mine.csv")
    check_run_inputs("segor", parameters(dataset="mine"), project)
    # a folder without a manifest checks nothing
    (raw / MANIFEST).unlink()
    assert load_manifest(raw) == {}
    append_a_row(raw / "diabetes.csv")
    check_run_inputs("segor", parameters(dataset="diabetes"), project)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[{"file": "diabetes.csv",', "is not valid JSON"),
        ('{"diabetes.csv": "d0b1"}', "should be a JSON list of objects"),
        (
            '[{"file": "diabetes.csv", "sha256_16": "d0b14a7a6a4015e4"}]',
            "without a `sha256`",
        ),
    ],
    ids=["not-json", "not-a-list", "old-short-hash"],
)
def test_a_broken_manifest_is_named(project, text, fragment):
    (project / "data" / "01_raw" / MANIFEST).write_text(text)
    with pytest.raises(InvalidInput) as error:
        check_run_inputs("segor", parameters(dataset="diabetes"), project)
    message = str(error.value)
    assert "data/01_raw/manifest.json" in message
    assert fragment in message
    assert "scripts/write_manifest.py" in message


def load_script():
    """scripts/write_manifest.py as a module (no second interpreter to start)."""
    spec = importlib.util.spec_from_file_location("write_manifest", WRITE_MANIFEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_manifest_reproduces_the_committed_manifest(project, capsys):
    raw = project / "data" / "01_raw"
    committed = (RAW_DATA / MANIFEST).read_text()
    # as documented: .venv/bin/python scripts/write_manifest.py [FOLDER]
    result = subprocess.run(
        [sys.executable, str(WRITE_MANIFEST), str(raw)],
        capture_output=True,
        text=True,
        check=True,
        cwd=PROJECT,
    )
    assert "no changes" in result.stdout
    assert (raw / MANIFEST).read_text() == committed
    # from the old scheme (the first 16 hex digits, under sha256_16): same result
    old = [
        {
            ("sha256_16" if key == "sha256" else key): (
                value[:16] if key == "sha256" else value
            )
            for key, value in entry.items()
        }
        for entry in read_manifest(raw)
    ]
    (raw / MANIFEST).write_text(json.dumps(old, indent=1))
    load_script().main([str(raw)])
    assert "sha256 updated" in capsys.readouterr().out
    assert (raw / MANIFEST).read_text() == committed


def test_write_manifest_updates_a_changed_file_and_adds_a_new_one(project, capsys):
    raw = project / "data" / "01_raw"
    append_a_row(raw / "wine.csv")
    shutil.copy(raw / "wine.csv", raw / "grapes.csv")
    load_script().main([str(raw)])
    output = capsys.readouterr().out
    assert "wine.csv: rows, sha256 updated" in output
    assert "grapes.csv: added" in output
    entries = read_manifest(raw)
    assert [entry["file"] for entry in entries][-1] == "grapes.csv"
    wine = load_manifest(raw)["wine.csv"]
    assert wine["rows"] == 179
    assert wine["sha256"] == file_sha256(raw / "wine.csv")
    assert entries[-1] == {
        "name": "grapes",
        "task": "multiclass",
        "rows": 179,
        "features": 13,
        "categorical": [],
        "target": "target",
        "file": "grapes.csv",
        "sha256": wine["sha256"],
    }
    check_run_inputs("sego", parameters(dataset="wine"), project)
