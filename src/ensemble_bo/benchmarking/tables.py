"""What the benchmark scripts' reports are made of: Markdown and statistics.

The statistics are core/comparison.py's (win frequency with ties half, the
Wilcoxon signed-rank test), adapted to a report: counts of paired cells, and
NaN where a test has nothing to compare. The pipeline's own report is
ensemble_bo.reporting.benchmark_report.
"""

from __future__ import annotations

import datetime
import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ensemble_bo.benchmarking.scripts import log
from ensemble_bo.core.comparison import wilcoxon_test, win_frequency

# --------------------------------------------------------------------------- Markdown


def split_records(
    records: dict[str, dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The finished records and the failed ones."""
    ok = [r for r in records.values() if r.get("status") == "ok"]
    failed = [r for r in records.values() if r.get("status") != "ok"]
    return ok, failed


def report_head(
    title: str,
    source: str,
    ok: list[dict[str, Any]],
    failed: list[dict[str, Any]],
    description: str,
) -> list[str]:
    """The report's title, source, date, description and the cells' versions."""
    lines = [
        f"# {title}",
        "",
        f"From `{source}` ({len(ok)} finished cells, {len(failed)} failed), "
        f"reported {datetime.datetime.now().isoformat(timespec='seconds')}.",
        description,
    ]
    versions = {json.dumps(r.get("versions", {}), sort_keys=True) for r in ok}
    for version in sorted(versions):
        items = json.loads(version).items()
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in items) + ".")
    return lines


def failed_lines(failed: list[dict[str, Any]]) -> list[str]:
    """The report's section on failed cells; none without them."""
    if not failed:
        return []
    return [
        "",
        "## Failed cells",
        "",
        *(f"- {r['key']}: `{r.get('error', '?')}`" for r in failed),
    ]


def tool_setups(frame: pd.DataFrame, tool: str) -> list[str]:
    """The distinct setups `tool`'s cells ran with, as JSON (sorted keys), sorted."""
    return sorted(
        {
            json.dumps(setup, sort_keys=True)
            for setup in frame.loc[frame["tool"] == tool, "setup"]
        }
    )


def write_report(text: str, path: Path) -> None:
    """Write the report to `path` and print it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)  # noqa: T201 - a benchmark prints its tables
    log(f"wrote {path}")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of formatted cells (core.comparison_table.markdown_table takes a
    DataFrame and right-aligns its columns)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def mean_of(values: pd.Series) -> float | None:
    """The mean of the numeric values; None without any."""
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


# --------------------------------------------------------------------------- statistics


def wins(x: Any, y: Any) -> float:
    """Paired cells where x's loss is lower than y's, ties counting half."""
    pairs = pd.DataFrame({"x": np.asarray(x, float), "y": np.asarray(y, float)})
    if pairs.empty:
        return 0.0
    # A count of halves: the frequency times the pairs, rounded to the half.
    return round(2 * win_frequency(pairs).loc["x", "y"] * len(pairs)) / 2


def wilcoxon_p(a: Any, b: Any, alternative: str = "two-sided") -> float:
    """core.comparison.wilcoxon_test's p of paired losses a vs b; NaN without pairs.

    alternative "less": a's losses tend to be lower; "two-sided": they differ.
    """
    if len(a) == 0:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's notes on ties and small samples
        return wilcoxon_test(a, b, alternative=alternative)
