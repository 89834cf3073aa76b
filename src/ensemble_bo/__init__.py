"""Ensemble BO: Bayesian-optimized model ensembles (SEGOR, SEGO, ESMBO, ...).

from ensemble_bo import EnsembleClassifier, EnsembleRegressor, EnsembleSearch, METHODS
"""

from ensemble_bo.api import EnsembleClassifier, EnsembleRegressor, EnsembleSearch
from ensemble_bo.core.methods import METHODS

# Part of every search journal's key (core.journal), so that a journal is only
# replayed by the version whose trials it records: 0.3 journals record each
# trial's request (configuration, folds, share of rows).
__version__ = "0.3"

__all__ = [
    "METHODS",
    "EnsembleClassifier",
    "EnsembleRegressor",
    "EnsembleSearch",
    "__version__",
]
