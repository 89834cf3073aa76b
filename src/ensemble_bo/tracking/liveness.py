"""Runs whose process died: the tags that tell, and the sweep that marks them KILLED.

A run killed by SIGKILL or the out-of-memory killer never ends its MLflow run.
Each run is tagged with its process (host, PID, start time, boot); when the
store is next opened on the same host, a RUNNING run whose process is gone is
marked KILLED.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

logger = logging.getLogger(__name__)

# Who runs a run: tags that tell, when the store is next opened, whether the
# process of a run still RUNNING is alive or was killed (SIGKILL, out of memory).
HOST_TAG = "process.host"
PID_TAG = "process.pid"
START_TAG = "process.start_ticks"  # Linux: /proc/<pid>/stat field 22
BOOT_TAG = "process.boot_id"
KILLED_TAG = "killed_reason"


def _process_start_ticks(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (Linux); None elsewhere or if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # field 2, the command name, may hold spaces and parentheses
    return stat[stat.rindex(")") + 2 :].split()[19]


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_tags() -> dict[str, str]:
    """This process: host, PID and (on Linux) start time and boot, so a reused PID is not taken for it."""
    pid = os.getpid()
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(pid)}
    start, boot = _process_start_ticks(pid), _boot_id()
    if start is not None:
        tags[START_TAG] = start
    if boot is not None:
        tags[BOOT_TAG] = boot
    return tags


def process_is_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process these tags (process_tags, on this host) describe has ended."""
    try:
        pid = int(tags[PID_TAG])
    except (KeyError, ValueError):
        return False
    boot = tags.get(BOOT_TAG)
    if boot is not None and _boot_id() not in (None, boot):
        return True  # the machine rebooted since
    start = _process_start_ticks(pid)
    if start is not None or Path("/proc/self/stat").exists():
        # Linux: gone, or the PID now belongs to a process started later
        return start is None or (START_TAG in tags and tags[START_TAG] != start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def mark_dead_runs_killed(client: MlflowClient, experiment_id: str) -> list[str]:
    """Mark KILLED the experiment's RUNNING runs of this host whose process is gone.

    A run killed by SIGKILL or the out-of-memory killer never ends its MLflow
    run; the next run on the same host and store does. Returns their ids.
    """
    host = socket.gethostname().replace("'", "")
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'",
        run_view_type=ViewType.ACTIVE_ONLY,
        max_results=1000,
    )
    killed = []
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for run in runs:
        tags = run.data.tags
        if not process_is_gone(tags):
            continue
        reason = (
            f"process {tags.get(PID_TAG)} on {tags.get(HOST_TAG)} had ended without "
            f"ending the run (killed, e.g. SIGKILL or out of memory); found at {now}"
        )
        client.set_tag(run.info.run_id, KILLED_TAG, reason)
        client.set_terminated(run.info.run_id, "KILLED")
        logger.warning("MLflow run %s marked KILLED: %s", run.info.run_id, reason)
        killed.append(run.info.run_id)
    return killed
