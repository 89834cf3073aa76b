"""Ensemble BO: Bayesian-optimized model ensembles (SEGOR, SEGO, ESMBO, ...).

from ensemble_bo import EnsembleClassifier, EnsembleRegressor, EnsembleSearch, METHODS
"""

from ensemble_bo.api import EnsembleClassifier, EnsembleRegressor, EnsembleSearch
from ensemble_bo.core.methods import METHODS

# Part of every search journal's key (core.journal): 0.2 pools keep class
# probabilities, so trials recorded by 0.1, which lack them, are not replayed.
__version__ = "0.3"

__all__ = [
    "METHODS",
    "EnsembleClassifier",
    "EnsembleRegressor",
    "EnsembleSearch",
    "__version__",
]
