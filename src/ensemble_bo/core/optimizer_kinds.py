"""The optimizers by name, as a method's `optimizer` block selects them (`kind`)."""

from __future__ import annotations

import inspect
from typing import Any

from ensemble_bo.core.optimizer import (
    GPEIOptimizer,
    GridSearch,
    Optimizer,
    RandomSearch,
)
from ensemble_bo.core.random_forest import RandomForestOptimizer
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.tpe import TPEOptimizer

OPTIMIZERS: dict[str, type[Optimizer]] = {
    "gp": GPEIOptimizer,
    "tpe": TPEOptimizer,
    "rf": RandomForestOptimizer,
    "random": RandomSearch,
    "grid": GridSearch,
}
OPTIMIZER_KINDS = tuple(OPTIMIZERS)


def options_of(kind: str) -> set[str]:
    """The options the optimizer `kind` reads (its constructor's, but space and seed)."""
    return set(inspect.signature(OPTIMIZERS[kind]).parameters) - {"space", "seed"}


def make_optimizer(
    space: SearchSpace, seed: int, kind: str = "gp", **options: Any
) -> Optimizer:
    """An optimizer by name, e.g. from a conf block {kind: gp, n_initial: 10, ...}.

    The block may hold options of other kinds (the GP's `hyperparameters`
    under `kind: tpe`): the chosen kind ignores them, so that switching kind
    is one parameter. An option that no kind reads is refused (a typo).
    """
    if kind not in OPTIMIZERS:
        raise ValueError(
            f"optimizer kind={kind!r} is not one of {list(OPTIMIZER_KINDS)}"
        )
    known = set().union(*map(options_of, OPTIMIZER_KINDS))
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"optimizer options {unknown} are read by no kind; the kinds' options "
            f"are {sorted(known)}"
        )
    read = options_of(kind)
    return OPTIMIZERS[kind](
        space, seed=seed, **{name: options[name] for name in options if name in read}
    )
