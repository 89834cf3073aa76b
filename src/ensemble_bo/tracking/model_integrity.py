"""A logged model's files: their sha256 recorded when it is logged, and checked.

Loading an MLflow sklearn model runs code its artifacts choose: skops builds the
types its `MLmodel` file says to trust, and `code/ensemble_bo` goes first on
`sys.path`. So whoever can write the model's artifacts can change what loading
it runs. When a run logs its model it records the sha256 of every file of the
model as stored (model.skops, MLmodel, the requirements, code/...) and the
types skops was told to trust, in the artifact `integrity/<name>.json`, and
the sha256 of that record as the run's tag `model.<name>.sha256`.
`verify_model` (`ensemble-bo verify-model`) downloads the model and compares.

The record is the run's, so whoever can change the run's tags can change it
too: passing the tag's value as it was when the run was trusted
(`expected_sha256`) takes the run's metadata out of what has to be trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import yaml
from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR
from mlflow.tracking import MlflowClient

from ensemble_bo.provenance import file_sha256s
from ensemble_bo.tracking.store import first_line
from ensemble_bo.validation import RUNS_PREFIX

INTEGRITY = "integrity"
MODELS_PREFIX = "models:/"
# Written into a downloaded model's folder by MLflow's download itself (the
# registry name and version it was downloaded as), never stored with the model.
_WRITTEN_BY_DOWNLOAD = "registered_model_meta"


class ModelNotVerifiable(LookupError):
    """There is nothing to check the model against; the message says why."""


def digest_tag(name: str) -> str:
    """The run's tag holding the sha256 of its model `name`'s record."""
    return f"model.{name}.sha256"


def model_files(folder: Path) -> dict[str, str]:
    """Each file of a downloaded model (relative path) -> its sha256."""
    return {
        path: digest
        for path, digest in file_sha256s(folder).items()
        if path != _WRITTEN_BY_DOWNLOAD
    }


def record_model(name: str, model_uri: str, trusted_types: list[str]) -> None:
    """The active run's record of its model `name` at `model_uri`, as stored."""
    with tempfile.TemporaryDirectory() as directory, _without_progress_bar():
        folder = mlflow.artifacts.download_artifacts(
            artifact_uri=model_uri, dst_path=directory
        )
        record = {
            "model": name,
            "files": model_files(Path(folder)),
            "skops_trusted_types": sorted(trusted_types),
        }
    text = json.dumps(record, indent=1, sort_keys=True)
    mlflow.log_text(text, f"{INTEGRITY}/{name}.json")
    mlflow.set_tag(digest_tag(name), hashlib.sha256(text.encode()).hexdigest())


@contextmanager
def _without_progress_bar() -> Iterator[None]:
    """MLflow's download bar off, in a run's output (a verification's own
    command turns it off for good)."""
    before = os.environ.get(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name)
    os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name]
        else:
            os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name] = before


@dataclass
class ModelCheck:
    """What verify_model found: every difference from the run's record."""

    uri: str
    run_id: str
    name: str
    differences: list[str] = field(default_factory=list)
    files: int = 0
    trusted_types: list[str] = field(default_factory=list)
    folder: Path | None = None  # the verified copy, when kept

    @property
    def matches(self) -> bool:
        return not self.differences

    def report(self) -> str:
        if self.matches:
            kept = (
                f"\nThe verified copy is {self.folder}: load it from there "
                f'(mlflow.pyfunc.load_model("{self.folder}")).'
                if self.folder
                else ""
            )
            return (
                f"Verified: {self.uri} is the model run {self.run_id} logged: its "
                f"{self.files} files have the sha256 the run recorded, and skops "
                f"trusts the {len(self.trusted_types)} types it recorded."
            ) + kept
        return (
            f"DIFFERENT: {self.uri} is not the model run {self.run_id} logged "
            f"({len(self.differences)} differences); do not load it:\n"
            + "\n".join(f"  - {difference}" for difference in self.differences)
        )


def model_source(uri: str, client: MlflowClient) -> tuple[str, str]:
    """(run id, model name) of a model URI, from the tracking store (never from
    the model's own files, which the check is about)."""
    if uri.startswith(RUNS_PREFIX):
        run_id, _, name = uri.removeprefix(RUNS_PREFIX).partition("/")
        if run_id and name and "/" not in name.strip("/"):
            return run_id, name.strip("/")
    elif uri.startswith(MODELS_PREFIX) and "/" not in uri.removeprefix(MODELS_PREFIX):
        try:
            model = client.get_logged_model(uri.removeprefix(MODELS_PREFIX))
        except Exception as error:  # noqa: BLE001 - unknown id or unreachable store
            raise ModelNotVerifiable(
                f"no logged model {uri!r} in the tracking store ({first_line(error)})"
            ) from None
        return model.source_run_id, model.name
    raise ModelNotVerifiable(
        f"{uri!r} is not a model URI this can verify: give runs:/<run id>/<model "
        "name> (e.g. runs:/<run id>/segor_model) or models:/<model id>"
    )


def verify_model(
    uri: str, expected_sha256: str | None = None, download_to: Path | None = None
) -> ModelCheck:
    """The model at `uri` downloaded and compared with its run's record; kept in
    `download_to` (a new or empty folder; else deleted), so what was checked is
    what loads."""
    client = MlflowClient()
    run_id, name = model_source(uri, client)
    try:
        tags = client.get_run(run_id).data.tags
    except Exception as error:  # noqa: BLE001 - unknown id or unreachable store
        raise ModelNotVerifiable(
            f"no MLflow run {run_id!r} in the tracking store ({first_line(error)})"
        ) from None
    tag = digest_tag(name)
    if tag not in tags:
        raise ModelNotVerifiable(
            f"run {run_id} recorded no sha256 for a model {name!r} (no tag {tag}): "
            "it logged no such model, or logged it before models were recorded, "
            "so there is nothing to check it against"
        )
    check = ModelCheck(uri, run_id, name)
    if expected_sha256 is not None and expected_sha256 != tags[tag]:
        check.differences.append(
            f"the run's tag {tag} is {tags[tag]}, not the {expected_sha256} you "
            "expected: the run's record was changed"
        )
    with tempfile.TemporaryDirectory() as directory:
        record = _record(client, run_id, name, tags[tag], directory, check)
        if record is None:
            return check
        try:
            folder = Path(
                mlflow.artifacts.download_artifacts(
                    artifact_uri=uri,
                    dst_path=str(download_to or Path(directory) / "model"),
                )
            )
        except Exception as error:  # noqa: BLE001 - deleted, or an unreachable store
            check.differences.append(f"the model is gone ({first_line(error)})")
            return check
        _compare(record, folder, check)
    check.folder = folder if download_to is not None else None
    return check


def _record(
    client: MlflowClient,
    run_id: str,
    name: str,
    digest: str,
    directory: str,
    check: ModelCheck,
) -> dict | None:
    """The run's record of the model, if it is the one its tag names."""
    path = f"{INTEGRITY}/{name}.json"
    try:
        text = Path(client.download_artifacts(run_id, path, directory)).read_bytes()
    except Exception as error:  # noqa: BLE001 - deleted, or an unreachable store
        check.differences.append(
            f"the run's record {path} is gone ({first_line(error)})"
        )
        return None
    if hashlib.sha256(text).hexdigest() != digest:
        check.differences.append(
            f"the run's record {path} is not the one it logged (its sha256 is not "
            f"the tag's {digest}): the files cannot be checked against it"
        )
        return None
    return json.loads(text)


def _compare(record: dict, folder: Path, check: ModelCheck) -> None:
    """Each file of `folder` against the record, and the types skops trusts."""
    recorded, found = record["files"], model_files(folder)
    for path in sorted(set(recorded) | set(found)):
        if path not in found:
            check.differences.append(f"{path}: missing")
        elif path not in recorded:
            check.differences.append(f"{path}: added (sha256 {found[path]})")
        elif found[path] != recorded[path]:
            check.differences.append(
                f"{path}: changed (sha256 {found[path]}, recorded {recorded[path]})"
            )
    check.files = len(found)
    check.trusted_types = record["skops_trusted_types"]
    try:
        flavor = yaml.safe_load((folder / "MLmodel").read_text())["flavors"]["sklearn"]
        trusted = list(flavor["skops_trusted_types"] or [])
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return  # an MLmodel gone or rewritten is a difference of its sha256 already
    added = sorted(set(trusted) - set(check.trusted_types))
    if added:
        check.differences.append(
            f"MLmodel: skops is told to trust types the run did not record: {added}"
        )
