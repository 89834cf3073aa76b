"""The report of peer_comparison.py: its tables, per time budget and task.

Read from the stored records alone (core.grid.ToolCell records of
peer_tools' fits), so that `--report` rewrites it at any time, and older
stores (without AutoGluon, prediction times or model sizes) still read: what
a record lacks is shown as "-".
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from typing import Any

import pandas as pd
from peer_tools import PEERS, SETTING_SEPARATOR, TOOLS, label, parse_tool

from ensemble_bo.benchmarking import tables
from ensemble_bo.core.zoo import model_task

# Classification metrics of every record that has them, reported side by side.
PROBABILITY_METRICS = {
    "test_loss": "error",
    "test_log_loss": "log-loss",
    "test_brier": "Brier",
    "test_roc_auc": "ROC AUC",
}
# Columns a record may lack (older stores, other tools): read as missing.
OPTIONAL_COLUMNS = (
    "families",
    "n_families",
    "ensemble_members_distinct",
    "refit_seconds",
    "final_fit_seconds_kept",
    "best_estimator",
    "predict_seconds_per_1000",
    "model_bytes",
    "fitted_bytes",
    "peer_versions",
)


def paired_losses(
    frame: pd.DataFrame, a: str, b: str, metric: str = "test_loss"
) -> pd.DataFrame:
    """Cells where both tools finished: columns a and b (their `metric`), by dataset, r."""
    wide = frame.pivot_table(
        index=["dataset", "repetition"], columns="tool", values=metric
    )
    if a not in wide or b not in wide:
        return pd.DataFrame(columns=[a, b])
    return wide[[a, b]].dropna()


def comparison_pairs(tools: list[str]) -> list[tuple[str, str]]:
    """Each of our tools against each peer; ours against SEGOR's paper space;
    each SEGO objective against the first of them run (the default first); a
    tool with settings against the same tool without them."""
    peers = [tool for tool in tools if tool in PEERS]
    pairs = [(tool, peer) for tool in tools if tool not in PEERS for peer in peers]
    if "ours" in tools and "segor_paper" in tools:
        pairs.append(("ours", "segor_paper"))
    objectives = [
        tool
        for tool in tools
        if tool.startswith("ours:") and SETTING_SEPARATOR not in tool
    ]
    pairs += [(tool, objectives[0]) for tool in objectives[1:]]
    # each tool with settings against the same tool without them
    pairs += [
        (tool, parse_tool(tool)[0])
        for tool in tools
        if SETTING_SEPARATOR in tool and parse_tool(tool)[0] in tools
    ]
    # tools that differ only by their model: every pair of the same task
    by_task: dict[str, list[str]] = {}
    for tool in tools:
        name, params = parse_tool(tool)
        if name == "ours" and set(params) == {"model"}:
            by_task.setdefault(model_task(params["model"]), []).append(tool)
    pairs += [
        (later, earlier)
        for same in by_task.values()
        for earlier, later in itertools.combinations(same, 2)
    ]
    return pairs


def comparison_rows(
    frame: pd.DataFrame, tools: list[str], metric: str = "test_loss"
) -> list[list[str]]:
    """Per pair: paired cells, win rate (ties half), two-sided Wilcoxon p, and
    the same over the datasets' means (datasets won)."""
    sign = -1.0 if metric == "test_roc_auc" else 1.0  # lower wins, so negate AUC
    rows = []
    for a, b in comparison_pairs(tools):
        paired = sign * paired_losses(frame, a, b, metric)
        if paired.empty:
            continue
        x, y = paired[a].to_numpy(), paired[b].to_numpy()
        won = tables.wins(x, y)
        means = paired.groupby(level="dataset").mean()
        dataset_wins = tables.wins(means[a], means[b])
        rows.append(
            [
                f"{label(a)} vs {label(b)}",
                str(len(paired)),
                f"{won / len(paired):.2f} ({won:g}/{len(paired)})",
                tables.fmt(tables.wilcoxon_p(x, y), 3),
                f"{dataset_wins / len(means):.2f} ({dataset_wins:g}/{len(means)})",
                tables.fmt(
                    tables.wilcoxon_p(means[a].to_numpy(), means[b].to_numpy()), 3
                ),
            ]
        )
    return rows


def metric_means(frame: pd.DataFrame, tools: list[str]) -> str:
    """Each tool's mean error, log-loss, Brier score and ROC AUC over its cells."""
    rows = []
    for tool in tools:
        part = frame[frame["tool"] == tool]
        rows.append(
            [label(tool), str(len(part))]
            + [
                tables.fmt(tables.mean_of(part[m])) if m in part else "-"
                for m in PROBABILITY_METRICS
            ]
            + [tables.fmt(tables.mean_of(part["n_trials"]), 1)]
        )
    return tables.markdown_table(
        ["tool", "cells", *PROBABILITY_METRICS.values(), "mean trials"], rows
    )


def cost_rows(frame: pd.DataFrame, tools: list[str]) -> list[list[str]]:
    """Per tool: seconds used against the budget, trials, families, serving costs."""
    rows = []
    for tool in tools:
        part = frame[frame["tool"] == tool]
        if part.empty:
            continue
        fit = pd.to_numeric(part["fit_wall_seconds"], errors="coerce")
        search = pd.to_numeric(part["search_seconds"], errors="coerce")
        # FLAML's time after its search is its retrain on all of X; ours times
        # its refit (refit_seconds_), and the rest is start-up (the evaluation
        # worker's) and bookkeeping outside the search clock.
        if tool == "flaml":
            refit = fit - search
        else:
            refit = pd.to_numeric(part["refit_seconds"], errors="coerce")
        stopped = Counter(part["stopped_by"].fillna("?"))
        megabytes = pd.to_numeric(part["model_bytes"], errors="coerce") / 1e6
        fitted = pd.to_numeric(part["fitted_bytes"], errors="coerce") / 1e6
        rows.append(
            [
                label(tool),
                str(len(part)),
                tables.fmt(tables.mean_of(fit), 1),
                tables.fmt(tables.mean_of(fit / part["time_budget"]), 2),
                tables.fmt(tables.mean_of(search), 1),
                tables.fmt(tables.mean_of(refit), 1),
                tables.fmt(tables.mean_of(fit - search - refit), 1),
                tables.fmt(tables.mean_of(part["n_trials"]), 1),
                tables.fmt(tables.mean_of(part["n_families"]), 2),
                tables.fmt(tables.mean_of(part["predict_seconds_per_1000"]), 3),
                tables.fmt(tables.mean_of(megabytes), 2),
                tables.fmt(tables.mean_of(fitted), 2),
                ", ".join(f"{k} {v}" for k, v in sorted(stopped.items())),
            ]
        )
    return rows


COST_HEADER = [
    "tool",
    "cells",
    "fit s",
    "fit / T",
    "search s",
    "refit s",
    "other s",
    "trials (models)",
    "families per ensemble",
    "predict s per 1,000 rows",
    "model MB",
    "fitted MB",
    "stopped by",
]


def setup_lines(frame: pd.DataFrame, tools: list[str]) -> list[str]:
    """Each tool's setups, and the versions of a peer run in its own venv."""
    lines = []
    for tool in tools:
        described = "; ".join(
            ", ".join(f"{k} {v}" for k, v in json.loads(setup).items())
            for setup in tables.tool_setups(frame, tool)
        )
        versions = {
            json.dumps(v, sort_keys=True)
            for v in frame.loc[frame["tool"] == tool, "peer_versions"]
            if isinstance(v, dict)
        }
        for version in sorted(versions):
            items = json.loads(version).items()
            described += " (" + ", ".join(f"{k} {v}" for k, v in items) + ")"
        lines.append(f"- {label(tool)}: {described}")
    return lines


def family_lines(frame: pd.DataFrame, tools: list[str]) -> list[str]:
    """Which families the final models use: our members' families with their
    mean weight, AutoGluon's model types of its best model, FLAML's best estimator."""
    lines = []
    for tool in tools:
        part = frame[frame["tool"] == tool]
        if tool == "flaml" and not part.empty:
            counts = Counter(part["best_estimator"].fillna("?"))
            mix = ", ".join(f"{name} {n}" for name, n in counts.most_common())
            lines.append(f"- {label(tool)}: best estimator {mix}.")
            continue
        n_families = pd.to_numeric(part["n_families"], errors="coerce").dropna()
        if n_families.empty:  # not recorded
            continue
        appears = Counter(f for families in part["families"] for f in families)
        weight = Counter()
        for families in part["families"]:
            if isinstance(families, dict):  # ours: family -> summed weight
                weight.update(families)
        mix = ", ".join(
            f"{name} {n}"
            + (f" (mean weight {weight[name] / len(part):.2f})" if weight else "")
            for name, n in appears.most_common()
        )
        members = tables.mean_of(part["ensemble_members_distinct"])
        stacked = part.get("stacking_chosen", pd.Series(dtype=object)).dropna()
        lines.append(
            f"- {label(tool)}: {tables.fmt(n_families.mean(), 2)} "
            f"families per ensemble on average (max {int(n_families.max())})"
            + (f", {tables.fmt(members, 1)} distinct members" if members else "")
            + f"; ensembles using each family (of {len(part)}): {mix}"
            + (
                f"; stacked where CV chose it: {int(stacked.sum())} of {len(stacked)}"
                if len(stacked)
                else ""
            )
            + "."
        )
    return lines


def loss_table(part: pd.DataFrame, tools: list[str]) -> str:
    """Mean test loss per dataset and tool, the repetitions in brackets."""
    means = part.pivot_table(
        index="dataset", columns="tool", values="test_loss", aggfunc="mean"
    )
    counts = part.pivot_table(
        index="dataset", columns="tool", values="test_loss", aggfunc="count"
    )
    rows = [
        [dataset]
        + [
            f"{tables.fmt(means.at[dataset, tool])} ({int(counts.at[dataset, tool])})"
            if tool in means and not math.isnan(means.at[dataset, tool])
            else "-"
            for tool in tools
        ]
        for dataset in means.index
    ]
    return tables.markdown_table(["dataset", *(label(t) for t in tools)], rows)


def section(part: pd.DataFrame, tools: list[str], task: str) -> list[str]:
    """One (time budget, task)'s tables."""
    lines = [
        "Tools:",
        "",
        *setup_lines(part, tools),
        "",
        "Mean test loss (repetitions):",
        "",
        loss_table(part, tools),
    ]
    metrics = ["test_loss"]
    if task == "classification":
        metrics += [m for m in list(PROBABILITY_METRICS)[1:] if m in part]
        lines += ["", "Means over cells:", "", metric_means(part, tools)]
    for metric in metrics:
        comparisons = comparison_rows(part, tools, metric)
        if not comparisons:
            continue
        if task == "classification":
            lines += ["", f"Paired on {PROBABILITY_METRICS[metric]}:"]
        lines += ["", tables.markdown_table(COMPARISON_HEADER, comparisons)]
    return [
        *lines,
        "",
        "Costs, means per cell (fit: the whole `.fit`, against the budget T; "
        "search: the tool's own clock, which T bounds; refit: the final model's "
        "fit on the whole training part (FLAML: fit - search; AutoGluon: none, T "
        "bounds its whole fit); other: fit - search - refit, e.g. our evaluation "
        "worker's start-up; trials: configurations evaluated (AutoGluon: models "
        "trained, its weighted ensembles included); predict: the fastest of 3 "
        "predictions of the test part, probabilities for classes; model: what "
        "predicts, pickled (ours: the ensemble; FLAML: its best model) or on disk "
        "(AutoGluon: its deployment clone); fitted: the whole fitted object (ours: "
        "with the search's record; AutoGluon: every model it trained):",
        "",
        tables.markdown_table(COST_HEADER, cost_rows(part, tools)),
        "",
        "Family mix:",
        "",
        *family_lines(part, tools),
    ]


COMPARISON_HEADER = [
    "comparison",
    "paired cells",
    "win rate",
    "Wilcoxon p",
    "win rate per dataset",
    "p per dataset",
]


def report(records: dict[str, dict[str, Any]], source: str) -> str:
    """The Markdown report of a store's records (source: where they are)."""
    ok, failed = tables.split_records(records)
    lines = tables.report_head(
        "Our ensemble searches against AutoML peers at equal wall time",
        source,
        ok,
        failed,
        "Test loss: MSE of the target standardized by the training part's mean and "
        "std (regression), error rate (classification), on the project's test split "
        "of repetition r (the benchmark pipeline's split_dataset with seed "
        "repetition_seed(0, r); test_size 0.33, stratified for classes), every tool "
        "scored by the same code on its predictions; mean over repetitions, their "
        "number in brackets. Win rate: share of paired (dataset, repetition) cells "
        "where the first tool's loss is lower (ties count half; AUC: higher); p: "
        "two-sided Wilcoxon signed-rank test on those pairs; per dataset: the same "
        "on the datasets' mean losses (the share is the datasets won).",
    )
    if not ok:
        return "\n".join([*lines, "", "No finished cells yet.", ""])
    frame = pd.DataFrame(ok)
    for column in OPTIONAL_COLUMNS:
        if column not in frame:
            frame[column] = None
    frame["families"] = frame["families"].apply(
        lambda v: v if isinstance(v, dict | list) else {}
    )
    tools = sorted(
        set(frame["tool"]), key=lambda tool: (TOOLS.index(parse_tool(tool)[0]), tool)
    )
    for budget in sorted(frame["time_budget"].unique()):
        for task in ("regression", "classification"):
            part = frame[(frame["time_budget"] == budget) & (frame["task"] == task)]
            if part.empty:
                continue
            here = [tool for tool in tools if tool in set(part["tool"])]
            lines += [
                "",
                f"## T = {budget:g} s, {task}",
                "",
                *section(part, here, task),
            ]
    lines += tables.failed_lines(failed)
    return "\n".join([*lines, ""])
