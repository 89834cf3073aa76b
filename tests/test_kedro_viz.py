"""`kedro viz` shows the project's pipelines.

`kedro viz run` on 127.0.0.1 in a copy of the project, opened in headless Chromium.
"""

from __future__ import annotations

import pytest

from ensemble_bo.pipeline_registry import register_pipelines
from tests.support import copy_project, load_browser_pages, require_chromium

browser_pages = load_browser_pages()


@pytest.mark.slow
def test_kedro_viz_draws_the_segor_pipeline(tmp_path):
    require_chromium(browser_pages.find_chromium)
    project = copy_project(tmp_path / "project")
    nodes = {node.name for node in register_pipelines()["segor"].nodes}
    with browser_pages.kedro_viz(project, browser_pages.free_port()) as base:
        dom = browser_pages.chromium(f"{base}/?pid=segor")
    missing = sorted(name for name in nodes if name not in dom)
    assert not missing, f"nodes not drawn: {missing}"
    assert not any(name in dom for name in ("benchmark_report", "smbo_search")), (
        "another pipeline is drawn"
    )
    # the telemetry id Kedro-Viz's page writes (consent is off: nothing is
    # sent) stays in the project copy, out of the user's home
    assert (project / ".config" / "kedro" / "telemetry.toml").is_file()
