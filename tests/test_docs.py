"""The documentation cannot go stale: the module map, the layout, the links."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
PACKAGE = PROJECT / "src" / "ensemble_bo"
ARCHITECTURE = PROJECT / "docs" / "architecture.md"
README = PROJECT / "README.md"
PAGES = [
    README,
    *sorted((PROJECT / "docs").glob("*.md")),
    PROJECT / "benchmarks" / "README.md",
]


def section(text: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same level."""
    level = heading.split()[0]
    start = text.index(f"\n{heading}\n")
    end = text.find(f"\n{level} ", start + len(heading) + 2)
    return text[start : None if end < 0 else end]


def test_the_module_map_names_every_module_and_only_modules_that_exist():
    mapped = re.findall(
        r"^\| `([\w/]+\.py)` \|",
        section(ARCHITECTURE.read_text(), "## Module map"),
        re.M,
    )
    modules = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    )
    assert sorted(mapped) == modules


def tracked_top_level() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name.split("/")[0] for name in listed if "/" in name}


def test_the_readme_layout_lists_every_top_level_folder_and_nothing_else():
    block = section(README.read_text(), "## Layout")
    (code,) = re.findall(r"```\n(.*?)```", block, re.S)
    paths = [line.split()[0] for line in code.splitlines() if line.strip()]
    for path in paths:
        assert (PROJECT / path).exists(), path
    listed = {path.rstrip("/").split("/")[0] for path in paths}
    assert tracked_top_level() <= listed


@pytest.mark.parametrize(
    "page", PAGES, ids=lambda page: page.relative_to(PROJECT).as_posix()
)
def test_every_relative_link_of_a_page_resolves(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_no_page_cites_a_work_item():
    pages = [
        *PAGES,
        *(PROJECT / "conf").rglob("*.yml"),
        *(PROJECT / "benchmarks").rglob("*.md"),
        *(PROJECT / "docs").rglob("*.md"),
    ]
    for page in pages:
        found = re.findall(r"issue ?#?[0-9]", page.read_text(), re.I)
        assert not found, (page.relative_to(PROJECT), found)
