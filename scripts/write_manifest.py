"""Rewrite data/01_raw/manifest.json from the CSV files beside it.

    .venv/bin/python scripts/write_manifest.py            # data/01_raw
    .venv/bin/python scripts/write_manifest.py FOLDER     # FOLDER/manifest.json

For every file the manifest lists, in its order: `sha256` (the file's bytes,
what `sha256sum` prints), `rows` (examples, the header not counted),
`features` (columns besides the entry's `target`) and `categorical` (the
non-numeric feature columns, as core.preparation.categorical_columns decides)
are computed again; `name`, `task`, `target`, `source` and `file` are kept. An
old `sha256_16` field is replaced by `sha256` in its place. CSV files the
manifest does not list yet are added, sorted by name, with what can be
computed: name (the file's stem), task (regression, binary or multiclass, as
task auto decides; only with a `target` column), rows, features, categorical,
target, file and sha256; their `source` is left to you.

Runs check each listed file against the manifest (ensemble_bo.manifest), so
rerun this and commit the manifest after an intended change to a bundled file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from ensemble_bo.core.preparation import categorical_columns, infer_task
from ensemble_bo.manifest import HASH_FIELD, MANIFEST, file_sha256, read_manifest

PROJECT = Path(__file__).resolve().parents[1]
RAW_DATA = PROJECT / "data" / "01_raw"
OLD_HASH_FIELD = "sha256_16"
TARGET = "target"


def _table_fields(frame: pd.DataFrame, target: str) -> dict[str, Any]:
    """rows, features and categorical of a table whose target column is `target`."""
    fields: dict[str, Any] = {"rows": len(frame)}
    if target in frame.columns:
        features = frame.drop(columns=target)
        fields["features"] = features.shape[1]
        fields["categorical"] = categorical_columns(features)
    return fields


def _task(target: pd.Series, name: str) -> str | None:
    """regression, binary or multiclass as task auto decides; None if it cannot."""
    try:
        task = infer_task(target, "auto", name)
    except ValueError:
        return None
    if task == "regression":
        return task
    return "binary" if target.nunique() == 2 else "multiclass"


def updated_entry(entry: dict[str, Any], path: Path) -> dict[str, Any]:
    """`entry` with its computed fields recomputed from `path`, keys in order."""
    frame = pd.read_csv(path)
    fields = {
        **_table_fields(frame, entry.get("target", TARGET)),
        HASH_FIELD: file_sha256(path),
    }
    result: dict[str, Any] = {}
    for key, value in entry.items():
        if key == OLD_HASH_FIELD:
            result[HASH_FIELD] = fields[HASH_FIELD]
        elif key in fields:
            result[key] = fields[key]
        else:
            result[key] = value
    for key in ("rows", HASH_FIELD):  # the least an entry has
        result.setdefault(key, fields[key])
    return result


def new_entry(path: Path) -> dict[str, Any]:
    """An entry for a CSV file the manifest does not list, with what is computable."""
    entry: dict[str, Any] = {"name": path.stem}
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        frame = None
    if frame is not None:
        if TARGET in frame.columns and (task := _task(frame[TARGET], path.stem)):
            entry["task"] = task
        entry.update(_table_fields(frame, TARGET))
        if TARGET in frame.columns:
            entry["target"] = TARGET
    entry["file"] = path.name
    entry[HASH_FIELD] = file_sha256(path)
    return entry


def write_manifest(folder: Path) -> list[str]:
    """Rewrite folder/manifest.json; what changed, one line each."""
    manifest = folder / MANIFEST
    entries = read_manifest(folder, str(manifest))
    notes = []
    updated = []
    for entry in entries:
        path = folder / entry["file"]
        if not path.is_file():
            raise SystemExit(
                f"{manifest} lists {entry['file']}, but there is no {path}: restore "
                "the file, or remove its entry from the manifest"
            )
        new = updated_entry(entry, path)
        if new != entry:
            changed = sorted(k for k in new if new.get(k) != entry.get(k))
            notes.append(f"{entry['file']}: {', '.join(changed)} updated")
        updated.append(new)
    listed = {entry["file"] for entry in entries}
    for path in sorted(folder.glob("*.csv")):
        if path.name not in listed:
            updated.append(new_entry(path))
            notes.append(f"{path.name}: added (fill in its `source`)")
    manifest.write_text(json.dumps(updated, indent=1), encoding="utf-8")
    return notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=RAW_DATA,
        help=f"the folder with the CSV files and {MANIFEST} (default: data/01_raw)",
    )
    folder = parser.parse_args(argv).folder
    if not folder.is_dir():
        raise SystemExit(f"{folder} is not a folder")
    notes = write_manifest(folder)
    sys.stdout.write(
        "".join(f"{note}\n" for note in notes)
        + f"wrote {folder / MANIFEST} ({'no changes' if not notes else 'changed'})\n"
    )


if __name__ == "__main__":
    main()
