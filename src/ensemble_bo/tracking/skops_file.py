"""Writing a skops file in time linear in the arrays it holds.

skops.io.dump (0.16) asks its zip archive for the list of names before it
writes each array, a list the archive builds anew on every call: quadratic in
the arrays. An ensemble of boosted trees with its CV+ fold models holds about
40,000 (three per tree), and its dump took 32 s, 24 of them building that
list; its schema, written with indentation, goes through json's pure-Python
encoder, another 3 s. This writes the same archive, through skops's own
get_state, with the names kept in a set and the schema compact (indentation
is for readers; skops reads either), straight into the file instead of a
buffer of the whole model first: 5 s for that ensemble, and a peak lower by
the archive's size. tests/test_skops_file.py checks that it holds the
schema and arrays skops.io.dump writes.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import skops
import skops.io  # registers skops's get_state dispatch (skops.io._persist)
from skops.io._utils import SaveContext, get_state


class _NamedZipFile(zipfile.ZipFile):
    """A zip archive being written whose namelist is a set of its names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._names: set[str] = set()

    def writestr(self, zinfo_or_arcname: Any, data: Any, *args: Any, **kwargs: Any):
        super().writestr(zinfo_or_arcname, data, *args, **kwargs)
        name = getattr(zinfo_or_arcname, "filename", zinfo_or_arcname)
        self._names.add(name)

    def namelist(self) -> set[str]:  # type: ignore[override] - skops asks `in` only
        return self._names


def write_skops(
    obj: Any,
    path: Path,
    compression: int = zipfile.ZIP_DEFLATED,
    compresslevel: int = 1,
) -> None:
    """Write `obj` to the skops file `path` as skops.io.dump(obj, path,
    compression=..., compresslevel=...) does."""
    with _NamedZipFile(
        path, "w", compression=compression, compresslevel=compresslevel
    ) as archive:
        context = SaveContext(zip_file=archive)
        state = get_state(obj, context)
        context.clear_memo()
        state["protocol"] = context.protocol
        state["_skops_version"] = skops.__version__
        archive.writestr("schema.json", json.dumps(state))
