"""SEGOR (Roschewitz et al. 2017): SEGO's slot ensemble for regression, with the
paper's sizing methods and robust losses, and its variant shorthand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ensemble_bo.core.inference_budget import InferenceBudget
from ensemble_bo.core.losses import regression_loss
from ensemble_bo.core.selection.stages import WEIGHTINGS
from ensemble_bo.core.settings import (
    Block,
    InvalidInput,
    SearchSettings,
    count,
    one_of,
    setting,
)
from ensemble_bo.core.strategies.base import PoolScorer
from ensemble_bo.core.strategies.slots import SlotEnsemble

# Ensemble sizing of SEGOR s.3.2, by name and the paper's shorthand.
SIZE_METHODS = {
    "fixed": "fixed",
    "f": "fixed",
    "growing": "growing",
    "best-growing": "growing",
    "bg": "growing",
    "g": "growing",
    "dynamic": "dynamic",
    "best-dynamic": "dynamic",
    "bd": "dynamic",
    "d": "dynamic",
}

# The grammar of a SEGOR variant (SEGOR s.4's shorthand), for messages.
SEGOR_VARIANT_GRAMMAR = (
    "<sizing>-<loss>: sizing f (fixed, F), g (best-growing, BG) or d (best-dynamic, "
    "BD); loss m (mse), h (huber) or t (tukey); e.g. f-m, g-h, d-t"
)


def size_method(name: str) -> str:
    """'fixed', 'growing' or 'dynamic' for a sizing name or shorthand (F, BG, BD)."""
    try:
        return SIZE_METHODS[str(name).lower()]
    except KeyError:
        raise ValueError(
            f"unknown ensemble size method {name!r}; choose one of {sorted(SIZE_METHODS)}"
        ) from None


def segor_variant(variant: str) -> tuple[str, str]:
    """(sizing, loss) of a SEGOR variant in the paper's shorthand (s.4).

    'f-m' is fixed size with MSE, 'g-h' best-growing with Huber, 'd-t'
    best-dynamic with Tukey; long names work too ('dynamic-huber'). A bad
    variant is refused naming every bad part and showing the grammar.
    """
    sizing, _, loss = str(variant).rpartition("-")
    if not sizing:
        raise ValueError(
            f"SEGOR variant {variant!r} is not <sizing>-<loss>; a variant is "
            f"{SEGOR_VARIANT_GRAMMAR}"
        )
    problems = []
    if str(sizing).lower() not in SIZE_METHODS:
        problems.append(f"unknown ensemble size method {sizing!r}")
    try:
        regression_loss(loss)
    except ValueError:
        problems.append(f"unknown regression loss {loss!r}")
    if problems:
        raise ValueError(
            f"SEGOR variant {variant!r}: {' and '.join(problems)}; a variant is "
            f"{SEGOR_VARIANT_GRAMMAR}"
        )
    return size_method(sizing), loss


class Segor(SlotEnsemble):
    """SEGOR with the mean combiner (SEGOR s.3, Alg. 1): the slot ensemble
    (strategies.slots) on a regression target, with `loss` mse, huber or
    tukey of the residuals (s.3.1) and `sizing` fixed, growing or dynamic
    (s.3.2, or their shorthands F, BG, BD)."""

    def __init__(
        self,
        y: np.ndarray,
        fold_ids: np.ndarray,
        ensemble_size: int = 12,
        loss: str = "auto",
        sizing: str = "fixed",
        budget: InferenceBudget | None = None,
    ) -> None:
        super().__init__(
            PoolScorer(y, fold_ids, loss, task="regression"),
            ensemble_size,
            size_method(sizing),
            budget,
        )


def check_variant(path: str, value: Any, tasks: tuple[str, ...]) -> None:
    """`ensemble.variant`: the paper's shorthand, every bad part named."""
    try:
        segor_variant(value)
    except ValueError as error:
        raise InvalidInput(f"{path}: {error} (--params {path}=g-h)") from None


@dataclass(frozen=True)
class SegorSettings(SearchSettings):
    """`segor`: the search's block; its ensemble's settings are `ensemble`'s."""


@dataclass(frozen=True)
class EnsembleSettings(Block):
    """`ensemble`: SEGOR's ensemble (m slots, the variant, the final weights)."""

    file: ClassVar[str] = "segor"

    size: int = setting(count(1, "the number of ensemble slots"))
    variant: str = setting(check_variant)
    weighting: str = setting(one_of(WEIGHTINGS))
