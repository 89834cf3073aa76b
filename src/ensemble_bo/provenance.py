"""What a run needs to be reproduced: the code's state, the environment, the lock.

Read from git, the interpreter and the project's files (no Kedro or MLflow):
the tracking hook logs it as tags of each run, and `ensemble-bo rerun` (rerun.py)
compares a past run's tags with what is here now.
"""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement

from ensemble_bo.manifest import file_sha256

# Where a change that git does not track yet still changes the run: the code,
# the configuration and the raw data. Untracked files elsewhere (notebooks,
# outputs) do not make a run dirty.
RUN_INPUTS = ("src", "conf", "data/01_raw")
LOCK_FILE = "requirements.lock"
# Written by `make` beside the venv it synced: the sha256 of the lock it installed.
VENV_LOCK_STAMP = "requirements.lock.sha256"
KEY_PACKAGES = (
    "kedro",
    "mlflow",
    "numpy",
    "scipy",
    "scikit-learn",
    "pandas",
    "joblib",
    "threadpoolctl",
)
# Tag names, shared by the tracking hook (writes) and rerun (reads).
COMMIT_TAG = "mlflow.source.git.commit"
DIRTY_TAG = "git.dirty"
DIRTY_FILES_TAG = "git.dirty_files"
# conf/local is never in git: its content is recorded instead.
LOCAL_CONF = Path("conf") / "local"
LOCAL_CONF_TAG = "conf.local_sha256"
LOCK_TAG = "env.lock_sha256"
VENV_LOCK_TAG = "env.venv_lock_sha256"
PYTHON_TAG = "env.python"
PLATFORM_TAG = "env.platform"
PACKAGE_TAG_PREFIX = "env.package."
# At most this many changed paths are named in the dirty-files tag.
_DIRTY_FILES_SHOWN = 20


def git(project_path: Path, *args: str) -> str | None:
    """`git <args>`'s output in the project; None when git or the repository is missing."""
    try:
        completed = subprocess.run(
            ["git", *args],
            cwd=project_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout


def project_prefix(project_path: Path) -> str:
    """The project's folder inside its repository ("" at the root, else "sub/")."""
    return (git(project_path, "rev-parse", "--show-prefix") or "").strip()


def changed_files(project_path: Path) -> list[str] | None:
    """Paths (from the repository's root) that differ from the commit: modified
    tracked files anywhere, and untracked (not ignored) files under the
    project's RUN_INPUTS. None outside a git repository."""
    # -z: paths unquoted (spaces, accents), NUL-separated; a rename's entry is
    # followed by its old path
    status = git(project_path, "status", "--porcelain", "-z", "--untracked-files=all")
    if status is None:
        return None
    inputs = tuple(f"{project_prefix(project_path)}{p}/" for p in RUN_INPUTS)
    entries = iter(status.split("\0"))
    paths = []
    for entry in entries:
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            next(entries, None)  # the old path
        if code == "??" and not path.startswith(inputs):
            continue
        paths.append(path)
    return paths


def git_tags(project_path: Path) -> dict[str, str]:
    """The commit a run came from, and whether (and where) the code differed from it."""
    commit = (git(project_path, "rev-parse", "HEAD") or "").strip()
    changes = changed_files(project_path)
    if not commit or changes is None:
        return {}
    tags = {
        COMMIT_TAG: commit,
        DIRTY_TAG: str(bool(changes)).lower(),
        LOCAL_CONF_TAG: folder_sha256(project_path / LOCAL_CONF),
    }
    if changes:
        shown = changes[:_DIRTY_FILES_SHOWN]
        more = len(changes) - len(shown)
        tags[DIRTY_FILES_TAG] = ", ".join(shown) + (f" (+{more} more)" if more else "")
    return tags


def file_sha256s(folder: Path) -> dict[str, str]:
    """Each file under `folder` (its path relative to it, in order) -> its sha256."""
    files = (
        sorted(path for path in folder.rglob("*") if path.is_file())
        if folder.is_dir()
        else []
    )
    return {path.relative_to(folder).as_posix(): file_sha256(path) for path in files}


def folder_sha256(folder: Path) -> str:
    """sha256 over a folder's files: their paths (relative) and bytes, in order.
    An empty or missing folder has the hash of nothing."""
    digest = hashlib.sha256()
    for name, file_digest in file_sha256s(folder).items():
        if Path(name).name == ".gitkeep":
            continue
        digest.update(name.encode() + b"\0")
        digest.update(file_digest.encode())
    return digest.hexdigest()


def installed_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def venv_lock_sha256() -> str | None:
    """The sha256 of the lock this interpreter's venv was synced from, if `make` built it."""
    stamp = Path(sys.prefix) / VENV_LOCK_STAMP
    try:
        return stamp.read_text().split()[0]
    except (OSError, IndexError):
        return None


def environment_tags(project_path: Path) -> dict[str, str]:
    """The interpreter, the platform, the lock (the project's and the venv's) and
    the key packages' versions."""
    tags = {
        PYTHON_TAG: platform.python_version(),
        PLATFORM_TAG: platform.platform(),
    }
    lock = project_path / LOCK_FILE
    if lock.is_file():
        tags[LOCK_TAG] = file_sha256(lock)
    installed_lock = venv_lock_sha256()
    if installed_lock:
        tags[VENV_LOCK_TAG] = installed_lock
    for package in KEY_PACKAGES:
        installed = installed_version(package)
        if installed:
            tags[f"{PACKAGE_TAG_PREFIX}{package}"] = installed
    return tags


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def locked_versions(lock_text: str) -> dict[str, str]:
    """`name==version` pins of a requirements lock, by normalized name."""
    pins = {}
    for line in lock_text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[normalize(match.group(1))] = match.group(3)
    return pins


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def environment_differences(lock_text: str) -> list[tuple[str, str, str]]:
    """(package, locked version, installed version or "missing") for every pin
    of the lock that this interpreter does not have exactly."""
    differences = []
    for name, pinned in sorted(locked_versions(lock_text).items()):
        installed = installed_version(name)
        if installed != pinned:
            differences.append((name, pinned, installed or "missing"))
    return differences


def pinned_requirements(packages: tuple[str, ...]) -> list[str]:
    """`name==version` for the packages and, recursively, every installed
    distribution they require (markers evaluated here, extras not followed)."""
    pins: dict[str, str] = {}
    pending = list(packages)
    while pending:
        name = normalize(pending.pop())
        installed = installed_version(name)
        if name in pins or installed is None:
            continue
        pins[name] = installed
        for text in requires(name) or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return [f"{name}=={pinned}" for name, pinned in sorted(pins.items())]
