"""The bundled datasets' manifest (data/01_raw/manifest.json) and its check.

The manifest lists each bundled CSV with its task, shape, categorical columns,
source and `sha256`: the sha256 of the file's bytes, as full hex. A run
refuses a listed file whose bytes differ (`check_raw_file`, called by
`ensemble_bo.validation` where it loads a raw dataset, before any MLflow run
is opened), naming the file, the manifest and the two ways out: restore the
file, or rewrite the manifest with `python scripts/write_manifest.py`.

Why the file's bytes, not its parsed table: a user can verify a hash with
`sha256sum data/01_raw/NAME.csv`, without this project, and the hash does not
depend on how a pandas version parses the file (dtypes, float formatting,
text columns). The content fingerprint runs log as `dataset_info.fingerprint`
(`core.preparation.dataset_fingerprint`) is another thing: it keys
the trial journals by the table the run used, whatever file it came from.

The manifest is read by file name (`file`, e.g. `diabetes.csv`): that is what
a path on disk gives, and the dataset name is the file's stem anyway. Files
the manifest does not list (a user's own data) are not checked.

No Kedro, no MLflow: plain files, hashlib and json.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ensemble_bo.core.validation import InvalidInput

MANIFEST = "manifest.json"
# The manifest field holding a file's sha256 (full hex of the file's bytes).
HASH_FIELD = "sha256"
WRITE_MANIFEST = "python scripts/write_manifest.py"
# Hex digits of a hash shown in messages.
_SHOWN_DIGITS = 12
_CHUNK = 1 << 20
_FULL_SHA256 = re.compile(r"[0-9a-f]{64}")


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of the file's bytes, as 64 hex digits (what `sha256sum` prints)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(raw_folder: Path, shown: str | None = None) -> list[dict[str, Any]]:
    """The manifest's entries in file order; [] if `raw_folder` has no manifest.

    shown: the manifest's path for messages (default: raw_folder/manifest.json).
    Raises InvalidInput, naming the manifest, when it is not valid JSON or not
    a list of objects each with a `file` name.
    """
    path = Path(raw_folder) / MANIFEST
    shown = shown or str(path)
    if not path.is_file():
        return []
    fixes = f"restore it (git checkout -- {shown}) or rewrite it with {WRITE_MANIFEST}"
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InvalidInput(
            f"{shown} is not valid JSON ({error.msg} at line {error.lineno}, column "
            f"{error.colno}); {fixes}"
        ) from None
    except UnicodeDecodeError as error:
        raise InvalidInput(f"{shown} is not UTF-8 text ({error}); {fixes}") from None
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("file"), str)
        for entry in entries
    ):
        raise InvalidInput(
            f"{shown} should be a JSON list of objects, one per dataset, each with "
            f"its `file` name and `{HASH_FIELD}`; {fixes}"
        )
    return entries


def load_manifest(raw_folder: Path, shown: str | None = None) -> dict[str, dict]:
    """The manifest's entries by file name (`diabetes.csv`); {} if there is none.

    shown: the manifest's path for messages. Raises InvalidInput as
    `read_manifest` does.
    """
    return {entry["file"]: entry for entry in read_manifest(raw_folder, shown)}


def check_raw_file(path: Path, raw_folder: Path, shown: str) -> None:
    """Refuse (InvalidInput) a file the manifest lists whose bytes have changed.

    path: a CSV file in raw_folder (looked up in raw_folder/manifest.json by
    its name); shown: its path for messages (the manifest is shown beside it).
    A file the manifest does not list, or a folder without a manifest, passes.
    """
    shown_manifest = str(Path(shown).with_name(MANIFEST))
    entry = load_manifest(raw_folder, shown_manifest).get(Path(path).name)
    if entry is None:
        return
    expected = entry.get(HASH_FIELD)
    if not isinstance(expected, str) or not _FULL_SHA256.fullmatch(expected):
        raise InvalidInput(
            f"{shown_manifest} lists {Path(path).name} without a `{HASH_FIELD}` (the "
            f"64 hex digits of the file's sha256, got {expected!r}); rewrite the "
            f"manifest with {WRITE_MANIFEST}"
        )
    actual = file_sha256(path)
    if actual != expected:
        raise InvalidInput(
            f"{shown} has changed: its sha256 is {actual[:_SHOWN_DIGITS]}..., but "
            f"{shown_manifest} lists {expected[:_SHOWN_DIGITS]}... for it. Restore "
            f"the bundled file (git checkout -- {shown}), or, if the change is "
            f"intended, rewrite the manifest with {WRITE_MANIFEST} and commit it"
        )
