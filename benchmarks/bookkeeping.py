"""Ensemble bookkeeping cost per iteration, without model training.

What SEGOR (fixed and dynamic sizing), SEGO and ESMBO compute each iteration
besides the GP: the loss of every candidate ensemble from the pool's out-of-fold
predictions (SEGOR: L(E[j] <- h) and, when dynamic, L(E + h) for all h; SEGO: the
squared margin of the vote with slot j replaced by each h, on the pool's 0/1
correctness; ESMBO: the bootstrap risks of all h on N replicas and each
replica's argmin). Pools of t models x n validation rows of synthetic
predictions (for SEGO: labels and class probabilities, K = 3 classes for its
squared margin, then K = 10 for each of its objectives: the squared margin and
the vote's error on the labels, the log-loss on the probability of the true
class, the Brier score on all K probabilities); median of repeats.

    .venv/bin/python benchmarks/bookkeeping.py
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np

from ensemble_bo.benchmarking.tables import markdown_table
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.strategies import Esmbo, Sego, Segor
from ensemble_bo.core.trials import TrialResult

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 50.0
# SEGO's objectives, timed on pools of K = 10 classes.
CLASS_LOSSES = ("squared_margin", "error", "log_loss", "brier")


def filled_pool(t: int, n: int, rng: np.random.Generator) -> tuple[Pool, np.ndarray]:
    y = rng.normal(size=n)
    pool = Pool(n)
    for _ in range(t):
        pool.add({"x": 0.5}, np.array([0.5]), TrialResult(y + rng.normal(size=n), 0.0))
    return pool, y


def filled_classification_pool(
    t: int, n: int, rng: np.random.Generator, n_classes: int = 3
) -> tuple[Pool, np.ndarray]:
    """t models of 70% accuracy, with class probabilities whose argmax is the label."""
    labels = rng.integers(0, n_classes, size=n)
    pool = Pool(n, labels=labels)
    rows = np.arange(n)
    for _ in range(t):
        wrong = rng.random(n) < 0.3
        predictions = np.where(wrong, (labels + 1) % n_classes, labels)
        probabilities = rng.random((n, n_classes))
        probabilities[rows, predictions] += 1.0
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        pool.add(
            {"x": 0.5},
            np.array([0.5]),
            TrialResult(
                predictions.astype(float), 0.0, oof_probabilities=probabilities
            ),
        )
    return pool, labels


def iteration_seconds(strategy, pool: Pool, iterations: int = 5) -> float:
    """Median seconds of one strategy iteration's bookkeeping (its context, the
    targets of the whole pool, the update)."""
    strategy.scorer.forget()
    strategy.start()
    times = []
    single = [0.0] * len(pool)
    for iteration in range(iterations + 1):
        start = time.perf_counter()
        context = strategy.begin(iteration, pool)
        targets = strategy.targets(context, pool, slice(None), single)
        strategy.update(context, pool, targets, single)
        if iteration:  # the first fills the ensemble from empty
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for t in (100, 1000):
        for n in (1_000, 10_000):
            pool, y = filled_pool(t, n, rng)
            folds = np.arange(n) % 5
            strategies = {
                "SEGOR fixed (m = 12)": Segor(y, folds, 12),
                "SEGOR dynamic": Segor(y, folds, sizing="dynamic"),
                "ESMBO (N = 10)": Esmbo(y, folds, n_replicas=10),
            }
            pools = {name: pool for name in strategies}
            for n_classes, losses in ((3, ("squared_margin",)), (10, CLASS_LOSSES)):
                labelled_pool, labels = filled_classification_pool(t, n, rng, n_classes)
                for loss in losses:
                    name = f"SEGO {loss} (m = 12, K = {n_classes})"
                    strategies[name] = Sego(labels, folds, 12, loss=loss)
                    pools[name] = labelled_pool
            for name, strategy in strategies.items():
                ms = 1000 * iteration_seconds(strategy, pools[name])
                rows.append(
                    {"strategy": name, "pool t": t, "rows n": n, "ms per iteration": ms}
                )
                print(f"{name:22s} t={t:5d} n={n:6d}: {ms:8.1f} ms", flush=True)  # noqa: T201
    lines = [
        "# Bookkeeping per iteration (no training)",
        "",
        f"Machine: {platform.machine()}, numpy {np.__version__}; target < {TARGET_MS:.0f} ms "
        "at t = 1000, n = 10,000.",
        "",
        markdown_table(
            ["strategy", "pool t", "rows n", "ms per iteration"],
            [
                [r["strategy"], str(r["pool t"]), str(r["rows n"])]
                + [f"{r['ms per iteration']:.1f}"]
                for r in rows
            ],
        ),
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bookkeeping.md").write_text("\n".join(lines))
    (RESULTS / "bookkeeping.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))  # noqa: T201


if __name__ == "__main__":
    main()
