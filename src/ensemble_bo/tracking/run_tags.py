"""What a run records about how it was started, and what it continues.

The tags and artifacts `ensemble-bo rerun` reads to start the same run again
(pipelines, Kedro env, overrides, command, commit, environment, the raw data's
sha256), a launcher's own tags, and a resumed search's journal.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow
import mlflow.data
import pandas as pd
import yaml
from mlflow.tracking import MlflowClient

from ensemble_bo import provenance
from ensemble_bo.provenance import file_sha256
from ensemble_bo.tracking.artifacts import flatten
from ensemble_bo.validation import RAW_DATA

# Tags and artifacts that say how a run was started: what `ensemble-bo rerun` reads.
PIPELINE_TAG = "kedro.pipeline"
ENV_TAG = "kedro.env"
RUNTIME_PARAMS_TAG = "kedro.runtime_params"
COMMAND_TAG = "kedro.command"  # the command line as typed (what a person reads)
SESSION_TAG = "kedro.session_id"  # also the folder of the run's outputs under data/
DATA_FILE_TAG = "data.file"
DATA_SHA256_TAG = "data.sha256"
RERUN_OF_TAG = "rerun_of"
# Set when only part of the pipelines ran (--from-nodes, --tags, ...): not rerunnable.
PARTIAL_RUN_TAG = "kedro.partial_run"
_PARTIAL_RUN_OPTIONS = (
    "from_nodes",
    "to_nodes",
    "node_names",
    "from_inputs",
    "to_outputs",
    "tags",
    "namespaces",
    "load_versions",
    "only_missing_outputs",
)
RUNTIME_PARAMS_ARTIFACT = "config/runtime_params.json"
PARAMETERS_ARTIFACT = "config/parameters.yml"
# Tags a launcher adds to the run it starts (a JSON object): `ensemble-bo rerun`
# marks its run `rerun_of`, `ensemble-bo scheduled` its scheduled job.
EXTRA_TAGS_VARIABLE = "ENSEMBLE_BO_RUN_TAGS"
# MLflow's limit on a tag's value.
_MAX_TAG_LENGTH = 8000


def raw_data_tags(parameters: Mapping[str, Any], project_path: Path) -> dict[str, str]:
    """The sha256 of each raw file the run reads: `dataset`'s, and the benchmark's."""
    tags = {}
    dataset = parameters.get("dataset")
    if (
        isinstance(dataset, str)
        and (project_path / RAW_DATA / f"{dataset}.csv").is_file()
    ):
        path = RAW_DATA / f"{dataset}.csv"
        tags[DATA_FILE_TAG] = path.as_posix()
        tags[DATA_SHA256_TAG] = file_sha256(project_path / path)
    benchmark = parameters.get("benchmark")
    names = benchmark.get("datasets") if isinstance(benchmark, Mapping) else None
    for name in names or ():
        path = project_path / RAW_DATA / f"{name}.csv"
        if path.is_file():
            tags[f"{DATA_SHA256_TAG}.{name}"] = file_sha256(path)
    return tags


def log_dataset_input(frame: pd.DataFrame, path: str) -> None:
    """The run's raw dataset, as the pipeline read it from `path` (the tag
    DATA_FILE_TAG), as an MLflow dataset input: the runs table's Dataset
    column, with MLflow's digest of its content (the file's sha256 is the tag
    data.sha256)."""
    with warnings.catch_warnings():
        # MLflow registers its local-file source under two names and warns
        # that a path "can be interpreted in multiple ways"; both are the same.
        warnings.simplefilter("ignore", UserWarning)
        dataset = mlflow.data.from_pandas(
            frame,
            source=path,
            name=Path(path).stem,
            targets="target" if "target" in frame.columns else None,
        )
    mlflow.log_input(dataset, context="training")


def launcher_tags() -> dict[str, str]:
    """The tags of EXTRA_TAGS_VARIABLE, or an error naming it."""
    text = os.environ.get(EXTRA_TAGS_VARIABLE)
    if not text:
        return {}
    try:
        tags = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{EXTRA_TAGS_VARIABLE}={text!r} is not JSON: {error}"
        ) from None
    if not isinstance(tags, dict):
        raise ValueError(f"{EXTRA_TAGS_VARIABLE}={text!r}: expected a JSON object")
    return {str(key): str(value) for key, value in tags.items()}


def run_tags(
    run_params: Mapping[str, Any], parameters: Mapping[str, Any], project_path: Path
) -> dict[str, str]:
    """Everything needed to start the same run again, as tags (see provenance.py)."""
    overrides = json.dumps(run_params.get("runtime_params") or {}, sort_keys=True)
    partial = {
        option: run_params[option]
        for option in _PARTIAL_RUN_OPTIONS
        if run_params.get(option)
    }
    return {
        # first: a launcher cannot overwrite what the run itself records
        **launcher_tags(),
        **({PARTIAL_RUN_TAG: json.dumps(partial, default=str)} if partial else {}),
        COMMAND_TAG: shlex.join(sys.argv)[:_MAX_TAG_LENGTH],
        ENV_TAG: str(run_params.get("env") or ""),
        RUNTIME_PARAMS_TAG: overrides[:_MAX_TAG_LENGTH],
        SESSION_TAG: str(run_params.get("run_id") or run_params.get("session_id")),
        **provenance.git_tags(project_path),
        **provenance.environment_tags(project_path),
        **raw_data_tags(parameters, project_path),
    }


def log_run_configuration(
    parameters: Mapping[str, Any], run_params: Mapping[str, Any]
) -> None:
    """The merged parameters (conf/base, the env's, the overrides) as YAML, and the
    overrides exactly as given (the tag may be cut at MLflow's length limit)."""
    mlflow.log_text(
        yaml.safe_dump(dict(parameters), sort_keys=False), PARAMETERS_ARTIFACT
    )
    mlflow.log_text(
        json.dumps(run_params.get("runtime_params") or {}, indent=1, sort_keys=True),
        RUNTIME_PARAMS_ARTIFACT,
    )


# A search's journal (events.SearchResumable), and what a resumed run continues.
JOURNAL_TAG = "search.journal"
RESUMED_TRIALS_TAG = "resumed.trials"
RESUMED_RUN_TAG = "resumed.run_id"


def tag_resumed_search(journal: str, recorded: int) -> None:
    """Tag the active run with its search's journal; a resumed one with what it continues.

    A rerun that resumes a stopped search is a new MLflow run (the stopped one
    keeps its status, FAILED or KILLED, and its partial artifacts): tagged with
    the number of trials it took from the journal and the id of the latest
    earlier run of the same journal.
    """
    run = mlflow.active_run()
    tags = {JOURNAL_TAG: journal}
    quote_mark = "'" if "'" not in journal else '"'
    if recorded and quote_mark not in journal:
        tags[RESUMED_TRIALS_TAG] = str(recorded)
        earlier = [
            other
            for other in MlflowClient().search_runs(
                [run.info.experiment_id],
                filter_string=(
                    f"tags.`{JOURNAL_TAG}` = {quote_mark}{journal}{quote_mark}"
                ),
                order_by=["attributes.start_time DESC"],
                max_results=10,
            )
            if other.info.run_id != run.info.run_id
        ]
        if earlier:
            tags[RESUMED_RUN_TAG] = earlier[0].info.run_id
        # the runs table tells a resumed run from the one it continues
        tags[RUN_NAME_TAG] = f"{run.info.run_name} resumed"[:_MAX_RUN_NAME]
    mlflow.set_tags(tags)


# MLflow keeps a run's name in this tag; the UI shows at most this many characters.
RUN_NAME_TAG = "mlflow.runName"
_MAX_RUN_NAME = 250


def run_name(
    pipeline: str,
    parameters: Mapping[str, Any],
    run_params: Mapping[str, Any],
    tags: Mapping[str, str],
) -> str:
    """What the runs table calls a run: pipeline, dataset and seed, then what
    sets it apart from a plain run (the --params overrides but those two, a
    conf environment, being a rerun), so that two runs' names differ where
    their settings do: `segor-concrete-0`, `segor-concrete-0 budget=20
    ensemble.variant=g-h`, `segor-concrete-0 rerun of 1f2e3d4c`."""
    name = "-".join(
        str(part)
        for part in (pipeline, parameters.get("dataset"), parameters.get("seed"))
        if part is not None
    )
    overrides = sorted(
        (key, value)
        for key, value in flatten(run_params.get("runtime_params") or {})
        if key not in ("dataset", "seed")
    )
    if overrides:
        name += " " + " ".join(f"{key}={value}" for key, value in overrides)
    if run_params.get("env"):
        name += f" [{run_params['env']}]"
    if RERUN_OF_TAG in tags:
        name += f" rerun of {tags[RERUN_OF_TAG][:8]}"
    return name[:_MAX_RUN_NAME]
