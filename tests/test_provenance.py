"""What a run records to be reproduced: lock pins, the environment, the model's pins."""

from __future__ import annotations

from importlib.metadata import version

from ensemble_bo import provenance
from tests.support import PROJECT, git

LOCK = """\
# comment
numpy==2.4.6 \\
    --hash=sha256:aaaa
scikit-learn==1.9.1 \\
    --hash=sha256:bbbb
    # via ensemble-bo
Typing_Extensions==4.0.0
"""


def test_locked_versions_reads_pins_with_hashes_by_normalized_name():
    assert provenance.locked_versions(LOCK) == {
        "numpy": "2.4.6",
        "scikit-learn": "1.9.1",
        "typing-extensions": "4.0.0",
    }


def test_the_project_lock_pins_what_this_environment_has():
    lock = (PROJECT / provenance.LOCK_FILE).read_text()
    assert provenance.environment_differences(lock) == []


def test_environment_differences_name_each_package_pinned_otherwise():
    lock = f"numpy=={version('numpy')}\nscipy==0.0.1\nno-such-package==1.0\n"
    assert provenance.environment_differences(lock) == [
        ("no-such-package", "1.0", "missing"),
        ("scipy", "0.0.1", version("scipy")),
    ]


def test_the_models_pins_hold_its_whole_dependency_closure_at_installed_versions():
    pins = dict(
        pin.split("==") for pin in provenance.pinned_requirements(("scikit-learn",))
    )
    # scikit-learn's own requirements, recursively, at this environment's versions
    for name in ("scikit-learn", "numpy", "scipy", "joblib", "threadpoolctl"):
        assert pins[name] == version(name)
    assert "pandas" not in pins  # not a requirement of scikit-learn
    assert "pytest" not in pins  # only of an extra


def test_the_venv_lock_stamp_is_read_from_the_interpreters_prefix(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(provenance.sys, "prefix", str(tmp_path))
    assert provenance.venv_lock_sha256() is None
    (tmp_path / provenance.VENV_LOCK_STAMP).write_text("abc123\n")
    assert provenance.venv_lock_sha256() == "abc123"


def test_changed_files_of_a_project_in_a_folder_of_its_repository(tmp_path):
    repo, project = tmp_path, tmp_path / "proj"
    for path in ("proj/src/.gitkeep", "proj/conf/base/a.yml", "README.md"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("x\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "base")
    assert provenance.project_prefix(project) == "proj/"
    assert provenance.git_tags(project)["git.dirty"] == "false"
    # git quotes these names in plain porcelain output; -z does not
    (project / "data" / "01_raw").mkdir(parents=True)
    (project / "data" / "01_raw" / "my data é.csv").write_text("x,target\n")
    (repo / "other").mkdir()
    (repo / "other" / "notes.txt").write_text("not a run input\n")
    git(repo, "mv", "proj/conf/base/a.yml", "proj/conf/base/b.yml")
    tags = provenance.git_tags(project)
    assert tags["git.dirty"] == "true"
    assert sorted(tags["git.dirty_files"].split(", ")) == [
        "proj/conf/base/b.yml",
        "proj/data/01_raw/my data é.csv",
    ]


def test_conf_local_is_recorded_by_its_content(tmp_path):
    empty = provenance.folder_sha256(tmp_path / "missing")
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / ".gitkeep").touch()
    assert provenance.folder_sha256(tmp_path / "local") == empty
    (tmp_path / "local" / "parameters.yml").write_text("seed: 1\n")
    first = provenance.folder_sha256(tmp_path / "local")
    (tmp_path / "local" / "parameters.yml").write_text("seed: 2\n")
    assert len({empty, first, provenance.folder_sha256(tmp_path / "local")}) == 3
