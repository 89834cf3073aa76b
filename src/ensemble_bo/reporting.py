"""Tables and figures of a finished search and of a benchmark (no Kedro, no MLflow).

SEARCH_REPORTS declares what every search reports, once: the report node's
outputs, the files under data/08_reporting, the MLflow artifacts, what a
stopped search leaves and what a rerun compares all follow from it.

Figures are `matplotlib.figure.Figure` objects on the Agg canvas, made without
pyplot: importing this module leaves the caller's matplotlib backend alone
(a notebook keeps its own), and no figure piles up in pyplot's state.
"""

from __future__ import annotations

import io
import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from ensemble_bo.comparison_plots import critical_difference_diagram
from ensemble_bo.core.comparison import (
    average_repetitions,
    expected_ranks,
    friedman_test,
    nemenyi_critical_difference,
    pairwise_test_probabilities,
    pairwise_wilcoxon,
)
from ensemble_bo.core.comparison_table import comparison_table, markdown_table
from ensemble_bo.core.conformal import expected_calibration_error
from ensemble_bo.core.diversity import mutual_information_matrix, pairwise_disagreement
from ensemble_bo.core.explanations import leaderboard
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.row_capped import capped_rows


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    """A figure on the Agg canvas (savefig works headless) and its one axes."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


# A run both files a figure (the catalog) and logs it (MLflow): rendered once,
# its PNG serves both (0.3-0.5 s a figure, ten renders a run otherwise).
_PNG_OF: weakref.WeakKeyDictionary[Figure, bytes] = weakref.WeakKeyDictionary()


def png_bytes(figure: Figure) -> bytes:
    """`figure` as PNG (savefig's defaults), rendered on the first call only."""
    if figure not in _PNG_OF:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        _PNG_OF[figure] = buffer.getvalue()
    return _PNG_OF[figure]


def trial_history(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per trial: parameters, status, CV losses, EI, its weight in the final ensemble."""
    frame = result.pool.to_frame()
    iterations = pd.DataFrame(
        [
            (
                record.trial,
                record.iteration,
                record.slot,
                record.action,
                record.acquisition_value,
                record.ensemble_loss,
            )
            for record in result.history
        ],
        # named here, not by the rows, so a search stopped before its first
        # iteration ended still gives the table its columns
        columns=[
            "trial",
            "iteration",
            "slot",
            "action",
            "acquisition_value",
            "cv_loss_ensemble_after",
        ],
    )
    # A search trains one trial per iteration; a post-hoc selection may add a
    # trial at several steps, and the table keeps the first.
    iterations = iterations.drop_duplicates("trial", keep="first")
    frame = frame.merge(iterations, on="trial", how="left")
    frame["cv_loss_single"] = result.single_losses
    weights = result.member_weights
    frame["final_weight"] = [weights.get(trial, 0.0) for trial in frame["trial"]]
    return frame


RUNG_COLUMNS = [
    "bracket",
    "rung",
    "resource",
    "trial",
    "status",
    "objective",
    "promoted",
    "fit_seconds",
    "error",
]


def rung_history(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per evaluation of a multi-fidelity search: bracket, rung, resource,
    the pool index it joined as (-1: none), the target it was ranked by, whether
    it was promoted, then its parameters; no rows without a fidelity schedule."""
    rows = [
        {
            **{column: getattr(evaluation, column) for column in RUNG_COLUMNS},
            **evaluation.config,
        }
        for evaluation in result.rung_evaluations
    ]
    return pd.DataFrame(rows, columns=None if rows else RUNG_COLUMNS)


def ensemble_composition(result: EnsembleSearchResult) -> pd.DataFrame:
    """One row per distinct member: pool index, weight, individual CV loss, parameters."""
    rows = [
        {
            "trial": index,
            "weight": weight,
            "cv_loss_single": float(result.single_losses[index]),
            **result.pool.configs[index],
        }
        for index, weight in result.member_weights.items()
    ]
    return pd.DataFrame(rows)


def convergence_plot(result: EnsembleSearchResult, title: str) -> Figure:
    """Ensemble vs best single-model CV loss per iteration."""
    figure, axes = _figure(7, 4.5)
    iterations = [record.iteration + 1 for record in result.history]
    axes.plot(iterations, [r.ensemble_loss for r in result.history], label="ensemble")
    axes.plot(
        iterations,
        [r.best_single_loss for r in result.history],
        label="best single model",
    )
    axes.set_xlabel("iteration")
    axes.set_ylabel("CV loss")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    return figure


def cost_plot(result: EnsembleSearchResult, title: str) -> Figure:
    """The ensemble's CV loss against its prediction seconds per 1,000 rows
    (its members' as their trials measured them), at every iteration: the
    trade-off the search went through, coloured by iteration, the last one
    ringed."""
    figure, axes = _figure(7, 4.5)
    records = [
        r
        for r in result.history
        if np.isfinite(r.ensemble_predict_seconds) and np.isfinite(r.ensemble_loss)
    ]
    if records:
        seconds = [r.ensemble_predict_seconds for r in records]
        losses = [r.ensemble_loss for r in records]
        points = axes.scatter(
            seconds, losses, c=[r.iteration for r in records], cmap="viridis", s=18
        )
        axes.scatter(
            seconds[-1:],
            losses[-1:],
            s=120,
            facecolors="none",
            edgecolors="C3",
            label="final ensemble",
        )
        figure.colorbar(points, ax=axes, label="iteration")
        axes.legend()
    axes.set_xlabel("prediction seconds per 1,000 rows (members' trials)")
    axes.set_ylabel("ensemble CV loss")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    return figure


def diversity_heatmap(result: EnsembleSearchResult, title: str) -> Figure:
    """Pairwise mutual information -1/2 log(1 - rho^2) (regression) or disagreement
    (classification) between the distinct members."""
    members, predictions = result.distinct_member_predictions()
    figure, axes = _figure(6, 5)
    if result.task == "classification":
        matrix = pairwise_disagreement(predictions)
        np.fill_diagonal(matrix, np.nan)
        image = axes.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0)
        label = "disagreement (share of samples)"
    else:
        matrix = mutual_information_matrix(predictions)
        np.fill_diagonal(matrix, np.nan)  # a member's MI with itself is not information
        # Log colours: members with identical predictions sit at the cap (~13 nats)
        # and would otherwise flatten every other pair into one colour.
        pairs = matrix[np.isfinite(matrix)]
        floor = max(float(pairs.min()), 1e-3) if pairs.size else 1e-3
        ceiling = max(float(pairs.max()), 10 * floor) if pairs.size else 10 * floor
        image = axes.imshow(
            np.maximum(matrix, floor),
            cmap="viridis",
            norm=LogNorm(vmin=floor, vmax=ceiling),
        )
        label = "mutual information (nats)"
    labels = [f"trial {index}" for index in members]
    axes.set_xticks(range(len(members)), labels, rotation=90)
    axes.set_yticks(range(len(members)), labels)
    axes.set_title(title)
    figure.colorbar(image, ax=axes, label=label)
    return figure


def _interval_plot(axes: Axes, model: Any, features: pd.DataFrame, truth: np.ndarray):
    """Test rows by prediction: the 90% interval (where the model gives one)
    and the true target, red where it falls outside."""
    predictions = np.asarray(model.predict(features), dtype=float)
    order = np.argsort(predictions)
    rows = np.arange(len(order))
    axes.plot(rows, predictions[order], color="C0", lw=1, label="prediction")
    title = "test split"
    if hasattr(model, "predict_interval"):
        bounds = model.predict_interval(features, 0.9)[order]
        axes.fill_between(
            rows,
            bounds[:, 0],
            bounds[:, 1],
            color="C0",
            alpha=0.25,
            label="90% interval",
        )
        outside = (truth[order] < bounds[:, 0]) | (truth[order] > bounds[:, 1])
        title = f"{np.mean(~outside):.1%} of test targets inside their 90% interval"
    else:
        outside = np.zeros(len(order), dtype=bool)
    axes.scatter(rows[~outside], truth[order][~outside], s=8, color="k", label="truth")
    axes.scatter(
        rows[outside], truth[order][outside], s=10, color="C3", label="truth outside"
    )
    axes.set_xlabel("test rows, by prediction")
    axes.set_ylabel("target")
    return title


def _reliability_plot(
    axes: Axes, model: Any, features: pd.DataFrame, truth: np.ndarray
):
    """Top-label reliability diagram: accuracy against mean confidence per bin."""
    probabilities = model.predict_proba(features)
    error, table = expected_calibration_error(
        probabilities, np.searchsorted(model.classes_, truth)
    )
    bins = pd.DataFrame(table)
    axes.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="calibrated")
    axes.bar(
        bins["bin_lower"],
        bins["accuracy"],
        width=bins["bin_upper"] - bins["bin_lower"],
        align="edge",
        alpha=0.5,
        edgecolor="C0",
        label="accuracy",
    )
    axes.plot(bins["mean_confidence"], bins["accuracy"], "o-", color="C0")
    for _, row in bins.iterrows():
        axes.annotate(
            str(int(row["rows"])),
            (row["mean_confidence"], row["accuracy"]),
            textcoords="offset points",
            xytext=(0, 5),
            ha="center",
            fontsize=7,
        )
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("confidence (top class probability)")
    axes.set_ylabel("accuracy")
    title = f"expected calibration error {error:.3f}"
    if hasattr(model, "predict_set"):
        sets = model.predict_set(features, 0.9)
        covered = sets[np.arange(len(truth)), np.searchsorted(model.classes_, truth)]
        title += (
            f"; 90% sets: {covered.mean():.1%} hold the class, "
            f"{sets.sum(axis=1).mean():.2f} classes on average"
        )
    return title


def feature_importance_plot(
    importance: pd.DataFrame, title: str, measure: str
) -> Figure:
    """Permutation importance per feature (core.explanations.feature_importance),
    most important at the top, with its spread over the shuffles; at most the
    30 most important features."""
    shown = importance.head(30).iloc[::-1]
    figure, axes = _figure(7, max(2.5, 0.3 * len(shown) + 1.2))
    axes.barh(
        shown["feature"], shown["importance"], xerr=shown["importance_std"], color="C0"
    )
    axes.axvline(0, color="grey", lw=1)
    axes.set_xlabel(f"{measure} when the feature is shuffled")
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3, axis="x")
    return figure


# The most test rows the uncertainty plot shows: a scatter of more is a blot,
# and at 330,000 test rows its predictions took minutes for a slow ensemble
# (the run's coverage metrics are on every test row).
PLOTTED_ROWS = 5_000


def uncertainty_plot(
    model: Any, features: pd.DataFrame, target: pd.Series, task: str, title: str
) -> Figure:
    """The final model on the test split: regression, the 90% prediction
    intervals against the true targets; classification, the reliability
    diagram (with the counts of rows per bin) and the 90% sets' coverage.
    Above PLOTTED_ROWS test rows, on a seeded sample of that many."""
    figure, axes = _figure(8, 4.5)
    n = len(target)
    if n > PLOTTED_ROWS:
        rows = capped_rows(target.to_numpy(), PLOTTED_ROWS, 0, stratify=False)
        features, target = features.iloc[rows], target.iloc[rows]
        title += f" (a sample of {PLOTTED_ROWS:,} of its {n:,} rows)"
    truth = np.asarray(target)
    plot = _reliability_plot if task == "classification" else _interval_plot
    detail = plot(axes, model, features, truth)
    axes.set_title(f"{title}\n{detail}", fontsize=10)
    axes.legend(fontsize=8, loc="best")
    axes.grid(alpha=0.3)
    return figure


# --- a search's reports ---------------------------------------------------------------

# What a report is, and so how it is written under data/08_reporting and logged
# to MLflow: a CSV table (tables/), a PNG figure (plots/), or metrics
# ({name: value}, a JSON file and the run's metrics).
TABLE = "table"
FIGURE = "figure"
METRICS = "metrics"


@dataclass(frozen=True)
class SearchReport:
    """One report of a search, made from its result and its title.

    In `kedro run` it is an output of the search's report node, the dataset
    `<method>_<name>#<kind>` (report_dataset): the catalog's pattern for its
    kind writes the file, data/08_reporting/<method>_<name>.<csv|png|json>,
    and the tracking hook logs it by kind (conf/base/mlflow.yml), e.g.
    tables/<method>_<name>.csv. `ensemble-bo rerun` compares every table.
    `of_stopped_search`: also made for a search that stopped early, and logged
    as partial/partial_<name>.<csv|png> (tables and figures only).
    """

    kind: str
    make: Callable[[EnsembleSearchResult, str], Any]
    of_stopped_search: bool = False


# Every report of a search, by name: adding one here adds its node output, its
# file and its MLflow artifact (and, for a table, its comparison by a rerun).
SEARCH_REPORTS: dict[str, SearchReport] = {
    "trial_history": SearchReport(
        TABLE, lambda result, _: trial_history(result), of_stopped_search=True
    ),
    # empty without a fidelity schedule (then written with its header only,
    # and not logged)
    "rung_history": SearchReport(TABLE, lambda result, _: rung_history(result)),
    "ensemble_composition": SearchReport(
        TABLE, lambda result, _: ensemble_composition(result)
    ),
    "convergence_plot": SearchReport(FIGURE, convergence_plot),
    "diversity_heatmap": SearchReport(
        FIGURE,
        lambda result, title: diversity_heatmap(result, f"Ensemble diversity, {title}"),
    ),
    "diversity": SearchReport(METRICS, lambda result, _: result.diversity()),
    # every trial ranked, with its costs, weight and contribution
    "leaderboard": SearchReport(TABLE, lambda result, _: leaderboard(result)),
    "cost_plot": SearchReport(
        FIGURE,
        lambda result, title: cost_plot(
            result, f"CV loss against prediction time, {title}"
        ),
    ),
}


def report_dataset(method: str, name: str) -> str:
    """The catalog name of `method`'s report `name`: the name it has in data/
    and in MLflow, `#`, its kind (which the catalog's patterns match)."""
    return f"{method}_{name}#{SEARCH_REPORTS[name].kind}"


def search_reports(
    result: EnsembleSearchResult, title: str, stopped: bool = False
) -> dict[str, Any]:
    """Every declared report of `result` by name (stopped: only those made for
    a search that stopped early)."""
    return {
        name: report.make(result, title)
        for name, report in SEARCH_REPORTS.items()
        if report.of_stopped_search or not stopped
    }


# --- the benchmark report ------------------------------------------------------------

_DECIMALS = 4
_CELL_COLUMNS = [
    "key",
    "dataset",
    "task",
    "model",
    "method",
    "repetition",
    "seed",
    "budget",
    "test_loss",
    "cv_loss",
    "ensemble_size",
    "ensemble_members_distinct",
    "ensemble_mutual_information",
    "ensemble_disagreement",
    "trials_failed",
    "status",
    "error",
]


def rank_curves(records: list[Mapping]) -> pd.DataFrame:
    """Mean rank of each method's CV loss at each iteration (cf. ESMBO Fig. 1-2,
    which rank the test risk).

    records: benchmark cells with `dataset`, `repetition`, `method` and
    `cv_loss_curve`. At iteration t the methods are ranked (1 = lowest CV
    loss, ties averaged, no model yet = last) within each (dataset,
    repetition), and the ranks are averaged over them. A curve shorter than
    the longest keeps its last value. Rows: iteration 1..T; columns: methods
    (sorted).
    """
    methods = sorted({record["method"] for record in records})
    length = max((len(record["cv_loss_curve"]) for record in records), default=0)
    ranks = []
    groups: dict[tuple[str, int], dict[str, list]] = {}
    for record in records:
        groups.setdefault((record["dataset"], record["repetition"]), {})[
            record["method"]
        ] = record["cv_loss_curve"]
    for _, curves in sorted(groups.items()):
        table = pd.DataFrame(
            {
                method: _padded(curves[method], length)
                for method in methods
                if method in curves
            },
            index=pd.RangeIndex(1, length + 1, name="iteration"),
        )
        ranks.append(table.rank(axis=1, method="average", na_option="bottom"))
    if not ranks:
        return pd.DataFrame(index=pd.RangeIndex(1, 1, name="iteration"))
    mean = pd.concat(ranks).groupby(level="iteration").mean()
    return mean.reindex(columns=methods)


def _padded(curve: list, length: int) -> list[float]:
    values = [math.nan if value is None else float(value) for value in curve]
    last = values[-1] if values else math.nan
    return values + [last] * (length - len(values))


def rank_curves_plot(curves: pd.DataFrame, title: str) -> Figure:
    """One line per method (column of `rank_curves`): its mean rank per iteration."""
    figure, axes = _figure(7, 4.5)
    for method in curves.columns:
        axes.plot(curves.index, curves[method], label=method)
    axes.set_xlabel("iteration")
    axes.set_ylabel("mean rank of the CV loss (1 = best)")
    axes.set_title(title)
    if len(curves.columns):
        axes.legend()
    axes.grid(alpha=0.3)
    return figure


def _formatted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.map(lambda value: f"{value:.{_DECIMALS}f}")


def _comparison(
    losses: pd.DataFrame,
    records: list[Mapping],
    complete: set[tuple[str, int]],
    notes: list[str],
):
    """The comparison table, its PB test on the test outcomes of `complete` cells."""
    kept = [r for r in records if (r["dataset"], r["repetition"]) in complete]
    probabilities = pairwise_test_probabilities(
        kept, list(losses.index), list(losses.columns)
    )
    if probabilities is None:
        notes.append(
            "The PB test used each dataset's winner: some cells were stored "
            "without their per-sample test losses."
        )
    return comparison_table(losses, pairwise_probabilities=probabilities)


def _wilcoxon_lines(wilcoxon: pd.DataFrame) -> list[str]:
    return [
        "",
        "One-tailed Wilcoxon signed-rank p-values on the per-dataset mean test "
        "losses (SEGO eq. 10; SEGOR Tables 4-5): row better than column.",
        "",
        markdown_table(_formatted(wilcoxon), index_name="method"),
    ]


def _model_space_report(
    model: str, records: list[Mapping]
) -> tuple[dict[str, pd.DataFrame], str, dict[str, Figure]]:
    tables: dict[str, pd.DataFrame] = {}
    figures: dict[str, Figure] = {}
    frame = pd.DataFrame(records)
    methods = sorted(frame["method"].unique())
    by_repetition = frame.pivot_table(
        index=["dataset", "repetition"],
        columns="method",
        values="test_loss",
        aggfunc="first",
    ).reindex(columns=methods)
    by_repetition.columns.name = None
    complete = by_repetition.dropna()
    losses = average_repetitions(complete) if len(complete) else complete
    notes = []
    dropped = sorted(set(by_repetition.index) - set(complete.index))
    if dropped:
        notes.append(f"Left out of the comparison (a method has no result): {dropped}.")
    tables[f"{model}/test_loss_by_repetition"] = by_repetition.reset_index()
    tables[f"{model}/test_loss"] = losses.reset_index()

    repetitions = sorted(frame["repetition"].unique())
    datasets = list(losses.index)
    lines = [
        f"# Benchmark: model `{model}`",
        "",
        f"Datasets: {', '.join(sorted(frame['dataset'].unique()))}. "
        f"Methods: {', '.join(methods)}. Repetitions: {len(repetitions)}. "
        f"Budget: {', '.join(str(b) for b in sorted(frame['budget'].unique()))}.",
        "",
        "## Test loss, mean over repetitions",
        "",
        "Regression: MSE of the standardized target; classification: error rate; "
        "on each repetition's seeded test split (33% by default) after the "
        "searches' 5-fold CV on the rest (data_processing's defaults). Lower is "
        "better.",
        "",
        markdown_table(_formatted(losses), index_name="dataset")
        if len(losses)
        else "(no complete dataset)",
    ]
    lines += ["", "## Pairwise comparison", ""]
    if len(methods) >= 2 and len(datasets) >= 1:
        comparison = _comparison(losses, records, set(complete.index), notes)
        tables[f"{model}/comparison"] = (
            comparison.to_frame().rename_axis("method").reset_index()
        )
        lines.append(comparison.to_markdown())
        ranks = comparison.expected_rank
        wilcoxon = pairwise_wilcoxon(losses).loc[ranks.index, ranks.index]
        tables[f"{model}/wilcoxon"] = wilcoxon.rename_axis("method").reset_index()
        lines += _wilcoxon_lines(wilcoxon)
    else:
        lines.append("Skipped: needs at least 2 methods and 1 dataset.")
        ranks = expected_ranks(losses) if len(methods) >= 2 else None
    lines += ["", "## Friedman test and Nemenyi critical difference", ""]
    if len(methods) >= 3 and len(datasets) >= 2:
        friedman = friedman_test(losses)
        lines.append(
            f"Friedman chi-square = {friedman.statistic:.{_DECIMALS}f}, "
            f"p = {friedman.pvalue:.{_DECIMALS}f} "
            f"({len(methods)} methods, {len(datasets)} datasets)."
        )
    else:
        lines.append(
            "Friedman test skipped: needs at least 3 methods and 2 datasets "
            f"(have {len(methods)} and {len(datasets)})."
        )
    if ranks is not None and len(datasets) >= 1:
        difference = nemenyi_critical_difference(len(methods), len(datasets))
        lines.append(
            f"Nemenyi critical difference (alpha = 0.05): CD = "
            f"{difference:.{_DECIMALS}f}; see critical_difference.png."
        )
        figures[f"{model}/critical_difference"] = critical_difference_diagram(
            ranks, difference, title=f"{model}: mean rank of the test loss"
        )
    else:
        lines.append("Nemenyi critical difference skipped: needs at least 2 methods.")

    curves = rank_curves(records)
    tables[f"{model}/convergence_mean_rank"] = curves.reset_index()
    figures[f"{model}/convergence"] = rank_curves_plot(
        curves, f"{model}: mean rank of the CV loss per iteration"
    )
    lines += [
        "",
        "## Convergence",
        "",
        "Mean rank of each method's CV loss at each iteration over datasets and "
        "repetitions (1 = best): convergence_mean_rank.csv, convergence.png. "
        "ESMBO Fig. 1-2 rank the test risk per iteration; these curves rank the "
        "CV objective each method optimizes (its `loss`, or its variant's: "
        "segor:g-h, sego:log_loss; for classification by default SEGO's squared "
        "margin, and the error rate for the other methods), which "
        "is optimistic for the methods that select on it and compares like with "
        "like only where the methods share it.",
    ]
    if len(curves):
        last = curves.iloc[[-1]].rename(index=lambda i: f"iteration {i}")
        lines += ["", markdown_table(_formatted(last), index_name="")]
    if notes:
        lines += ["", *notes]
    return tables, "\n".join(lines) + "\n", figures


def failures_note(model: str, failed: list[Mapping]) -> str:
    """The report's list of a model's failed cells, each with its error."""
    lines = [
        f"## Failed cells of `{model}` (left out; a rerun tries them again)",
        "",
        *(f"- {record['key']}: {record['error']}" for record in failed),
    ]
    return "\n".join(lines) + "\n"


def benchmark_report(
    records: list[Mapping],
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, Figure]]:
    """Per model: loss tables, comparison table, tests, CD diagram, rank curves.

    records: the benchmark's cell records (core/grid.py: `run_cell`). Returns
    (CSV tables, markdown reports, figures), each keyed by `<model
    space>/<name>`, plus a `cells` table of every record. Depends only on the
    records' contents, not on their order or wall times.
    """
    records = sorted(records, key=lambda record: record["key"])
    tables: dict[str, pd.DataFrame] = {
        "cells": pd.DataFrame(records, columns=_CELL_COLUMNS)
    }
    reports: dict[str, str] = {}
    figures: dict[str, Figure] = {}
    for model in sorted({record["model"] for record in records}):
        of_model = [record for record in records if record["model"] == model]
        finished = [r for r in of_model if r.get("status", "ok") == "ok"]
        failed = [r for r in of_model if r.get("status", "ok") != "ok"]
        if not finished:
            reports[f"{model}/report"] = failures_note(model, failed)
            continue
        space_tables, report, space_figures = _model_space_report(model, finished)
        tables.update(space_tables)
        reports[f"{model}/report"] = report + (
            "\n" + failures_note(model, failed) if failed else ""
        )
        figures.update(space_figures)
    return tables, reports, figures
