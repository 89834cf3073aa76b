"""Search strategies: what the optimizer minimizes over the pool, and the ensemble kept.

One module each, with the settings of the parameter block it reads;
`base.Strategy` is the interface the search loop drives.
"""

from ensemble_bo.core.strategies.base import (
    IterationContext,
    PoolScorer,
    Strategy,
    Update,
)
from ensemble_bo.core.strategies.esmbo import ESMBO_ENSEMBLES, Esmbo, EsmboSettings
from ensemble_bo.core.strategies.sego import Sego, SegoSettings
from ensemble_bo.core.strategies.segor import (
    EnsembleSettings,
    Segor,
    SegorSettings,
    segor_variant,
    size_method,
)
from ensemble_bo.core.strategies.single_best import (
    ErsSettings,
    SingleBest,
    SingleBestSettings,
)
from ensemble_bo.core.strategies.slots import SlotEnsemble

__all__ = [
    "ESMBO_ENSEMBLES",
    "EnsembleSettings",
    "ErsSettings",
    "Esmbo",
    "EsmboSettings",
    "IterationContext",
    "PoolScorer",
    "Sego",
    "SegoSettings",
    "Segor",
    "SegorSettings",
    "SingleBest",
    "SingleBestSettings",
    "SlotEnsemble",
    "Strategy",
    "Update",
    "segor_variant",
    "size_method",
]
