"""What a run logged while its tracking server did not answer, and its upload.

A run's buffer is a folder beside the run's outputs
(data/07_model_output/mlflow_buffer/<Kedro session id>/): a local SQLite
MLflow store (`mlflow.db`, artifacts in `mlartifacts/` beside it) holding one
run per outage, and `run.json`, which names the server's run they belong to,
how far their upload has got, and how the run ended once it has. MLflow
writes each call to the store as it is made, so a process that dies loses
nothing it had logged.

Uploading copies each outage's run into the server's run, in order:
parameters, metric histories (their steps and timestamps kept), tags,
artifacts, logged models and child runs (benchmark cells), then the run's end.
What would be made twice if repeated (a logged model, a child run) is written
to run.json as soon as it is made, so an upload cut short and started again
goes on where it stopped; the rest is idempotent.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import LoggedModelOutput, LoggedModelStatus, Param, Run, RunTag
from mlflow.models import Model
from mlflow.tracking import MlflowClient
from mlflow.utils.file_utils import local_file_uri_to_path
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from ensemble_bo.core.journal import atomic_write_bytes
from ensemble_bo.tracking.liveness import KILLED_TAG, process_is_gone, process_tags
from ensemble_bo.tracking.store import (
    display_uri,
    open_experiment,
    resolve_tracking_uri,
)

# Where a run's buffer goes, relative to the project: beside the search journals.
BUFFER_FOLDER = Path("data") / "07_model_output" / "mlflow_buffer"
STATE_FILE = "run.json"
_STORE_FILE = "mlflow.db"
# The buffer's own experiment: its runs are the outages of one server run.
_EXPERIMENT = "buffered"
# MLflow's limits per log_batch call.
_PARAMS_PER_BATCH = 100
_TAGS_PER_BATCH = 100
_METRICS_PER_BATCH = 1000


class RunBufferError(ValueError):
    """A folder that is not a run's buffer."""


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RunBuffer:
    """A run's buffer folder: its local store and its run.json (see the module)."""

    def __init__(self, folder: Path, state: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self._state = state
        self._experiment_id: str | None = None

    @classmethod
    def create(cls, folder: Path, tracking_uri: str, run: Run) -> RunBuffer:
        """An empty buffer for `run`, tracked on the server `tracking_uri`."""
        buffer = cls(
            folder,
            {
                # the password stays in the environment
                "tracking_uri": display_uri(tracking_uri, mask=""),
                "experiment_id": run.info.experiment_id,
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "process": process_tags(),
                "parts": [],
                "end": None,
            },
        )
        buffer._save()
        return buffer

    @classmethod
    def open(cls, folder: Path) -> RunBuffer:
        state_file = Path(folder) / STATE_FILE
        try:
            state = json.loads(state_file.read_text("utf-8"))
        except FileNotFoundError:
            raise RunBufferError(
                f"{folder} is not a run's buffer (it has no {STATE_FILE}): give a "
                f"folder of {BUFFER_FOLDER}/, which a run names when it ends"
            ) from None
        except json.JSONDecodeError as error:
            raise RunBufferError(f"{state_file} is not JSON: {error}") from None
        return cls(Path(folder), state)

    @property
    def uri(self) -> str:
        """The buffer's store: a SQLite file, its artifacts beside it."""
        return resolve_tracking_uri(f"sqlite:///{_STORE_FILE}", self.folder)

    @property
    def tracking_uri(self) -> str:
        return self._state["tracking_uri"]

    @property
    def run_id(self) -> str:
        return self._state["run_id"]

    @property
    def experiment_id(self) -> str:
        """The server's experiment of the run."""
        return self._state["experiment_id"]

    @property
    def end(self) -> Mapping[str, Any] | None:
        """How the run ended (status, time, why), None while it goes on."""
        return self._state["end"]

    def buffer_experiment_id(self) -> str:
        """The buffer store's experiment (the store is made on first use)."""
        if self._experiment_id is None:
            self._experiment_id = open_experiment(self.uri, _EXPERIMENT)
        return self._experiment_id

    def add_part(self, run: Run) -> None:
        """`run` (in the buffer's store) holds what is logged from now on; the
        tags it was created with are MLflow's own, not the run's."""
        self._state["parts"].append(
            {
                "run_id": run.info.run_id,
                "created_tags": sorted(run.data.tags),
                "models": {},
                "children": {},
                "done": False,
            }
        )
        self._save()

    def record_end(self, status: str, reason: str | None = None) -> None:
        self._state["end"] = {
            "status": status,
            "time": int(time.time() * 1000),
            **({"reason": reason} if reason else {}),
        }
        self._save()

    def writer_is_gone(self) -> bool:
        """Whether the process that buffered the run has ended (on this host)."""
        return process_is_gone(self._state["process"])

    def end_killed_writer(self) -> None:
        """A run whose process died while buffering (SIGKILL, out of memory) never
        recorded its end: it ends KILLED."""
        process = self._state["process"]
        self.record_end(
            "KILLED",
            f"process {process.get('process.pid')} on {process.get('process.host')} "
            "ended without ending the run while its server did not answer",
        )

    def metrics(self) -> dict[str, float]:
        """The latest value of each metric logged to the buffer."""
        client = MlflowClient(self.uri)
        metrics: dict[str, float] = {}
        for part in self._state["parts"]:
            metrics.update(client.get_run(part["run_id"]).data.metrics)
        return metrics

    def upload(self, client: MlflowClient) -> None:
        """Copy what is not uploaded yet into the server's run (`client`), then the
        run's end if it has ended. Raises what MLflow raises if the server does
        not answer; run.json keeps how far it got."""
        server_run = client.get_run(self.run_id)
        source = MlflowClient(self.uri)
        for part in self._state["parts"]:
            if part["done"]:
                continue
            run = source.get_run(part["run_id"])
            self._copy(source, run, client, self.run_id, part["created_tags"])
            self._copy_models(source, run, client, part, server_run.data.params)
            self._copy_children(source, run, client, part)
            part["done"] = True
            self._save()
        end = self.end
        if end is not None and not end.get("uploaded"):
            if end.get("reason"):
                client.set_tag(self.run_id, KILLED_TAG, end["reason"])
            elif KILLED_TAG in server_run.data.tags:
                # marked KILLED by a later run's sweep while this one waited here
                client.delete_tag(self.run_id, KILLED_TAG)
            client.set_terminated(self.run_id, end["status"], end["time"])
            end["uploaded"] = True
            self._save()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _save(self) -> None:
        atomic_write_bytes(
            self.folder / STATE_FILE,
            json.dumps(self._state, indent=1, sort_keys=True).encode(),
        )

    @staticmethod
    def _copy(
        source: MlflowClient,
        run: Run,
        target: MlflowClient,
        target_run_id: str,
        skipped_tags: Iterable[str],
    ) -> None:
        """`run`'s parameters, metric histories, tags and artifacts (idempotent)."""
        run_id = run.info.run_id
        params = [Param(key, value) for key, value in run.data.params.items()]
        skipped = set(skipped_tags)
        tags = [RunTag(k, v) for k, v in run.data.tags.items() if k not in skipped]
        # A value the server already has at a step is not copied: a request
        # the server carried out as it went away, but whose answer never
        # came, was buffered as well, at another timestamp.
        metrics = []
        for key in sorted(run.data.metrics):
            held = {
                (metric.step, metric.value)
                for metric in target.get_metric_history(target_run_id, key)
            }
            metrics += [
                metric
                for metric in source.get_metric_history(run_id, key)
                if (metric.step, metric.value) not in held
            ]
        for batch in _batches(params, _PARAMS_PER_BATCH):
            target.log_batch(target_run_id, params=batch)
        # A repeated batch is no second value: the server drops a metric whose
        # key, step, timestamp and value it already has.
        for batch in _batches(metrics, _METRICS_PER_BATCH):
            target.log_batch(target_run_id, metrics=batch)
        for batch in _batches(tags, _TAGS_PER_BATCH):
            target.log_batch(target_run_id, tags=batch)
        artifacts = Path(local_file_uri_to_path(run.info.artifact_uri))
        if artifacts.is_dir() and any(artifacts.iterdir()):
            target.log_artifacts(target_run_id, str(artifacts))

    def _copy_models(
        self,
        source: MlflowClient,
        run: Run,
        target: MlflowClient,
        progress: dict[str, Any],
        run_params: Mapping[str, str],
    ) -> None:
        """Each model logged to `run`, as the same model of the server's run: its
        files unchanged but MLmodel, which names the run and model it belongs to."""
        for output in run.outputs.model_outputs if run.outputs else []:
            done = progress["models"].get(output.model_id)
            if done and done["linked"]:
                continue
            model = source.get_logged_model(output.model_id)
            if done is None:
                created = target.create_logged_model(
                    self.experiment_id,
                    name=model.name,
                    source_run_id=self.run_id,
                    tags=model.tags,
                    # as MLflow gives a model logged to a run: the run's params
                    params={**run_params, **(model.params or {})},
                    model_type=model.model_type,
                )
                done = progress["models"][output.model_id] = {
                    "id": created.model_id,
                    "linked": False,
                }
                self._save()
            target_model = target.get_logged_model(done["id"])
            with tempfile.TemporaryDirectory() as temporary:
                files = Path(temporary) / "model"
                shutil.copytree(local_file_uri_to_path(model.artifact_location), files)
                described = Model.load(str(files))
                described.run_id = self.run_id
                described.model_id = described.model_uuid = target_model.model_id
                described.artifact_path = target_model.artifact_location
                described.save(str(files / "MLmodel"))
                target.log_model_artifacts(target_model.model_id, str(files))
            target.finalize_logged_model(target_model.model_id, LoggedModelStatus.READY)
            target.log_outputs(
                self.run_id, [LoggedModelOutput(target_model.model_id, output.step)]
            )
            done["linked"] = True
            self._save()

    def _copy_children(
        self,
        source: MlflowClient,
        run: Run,
        target: MlflowClient,
        progress: dict[str, Any],
    ) -> None:
        """`run`'s child runs (benchmark cells) as child runs of the server's run."""
        children = source.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{run.info.run_id}'",
            order_by=["attributes.start_time ASC"],
            max_results=50_000,
        )
        for child in children:
            target_id = progress["children"].get(child.info.run_id)
            if target_id is None:
                created = target.create_run(
                    self.experiment_id,
                    start_time=child.info.start_time,
                    tags={
                        **child.data.tags,
                        MLFLOW_PARENT_RUN_ID: self.run_id,
                    },
                    run_name=child.info.run_name,
                )
                target_id = progress["children"][child.info.run_id] = (
                    created.info.run_id
                )
                self._save()
            self._copy(source, child, target, target_id, [MLFLOW_PARENT_RUN_ID])
            if child.info.status != "RUNNING":
                target.set_terminated(target_id, child.info.status, child.info.end_time)


def buffer_folder(project_path: Path, session_id: str) -> Path:
    """Where a run of Kedro session `session_id` keeps what its server did not take."""
    return project_path / BUFFER_FOLDER / session_id


def shown_path(folder: Path) -> str:
    """`folder` as a command would name it here: relative to the current directory
    when it lies below it."""
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)
