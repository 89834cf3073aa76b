"""Search strategies: what the optimizer minimizes over the pool, and the ensemble kept.

One module each; `base.Strategy` is the interface the search loop drives.
"""

from ensemble_bo.core.strategies.base import (
    IterationContext,
    PoolScorer,
    Strategy,
    Update,
)
from ensemble_bo.core.strategies.esmbo import ESMBO_ENSEMBLES, Esmbo
from ensemble_bo.core.strategies.sego import Sego
from ensemble_bo.core.strategies.segor import Segor, segor_variant, size_method
from ensemble_bo.core.strategies.single_best import SingleBest
from ensemble_bo.core.strategies.slots import SlotEnsemble

__all__ = [
    "ESMBO_ENSEMBLES",
    "Esmbo",
    "IterationContext",
    "PoolScorer",
    "Sego",
    "Segor",
    "SingleBest",
    "SlotEnsemble",
    "Strategy",
    "Update",
    "segor_variant",
    "size_method",
]
