"""Ensemble BO: Bayesian-optimized model ensembles (SEGOR, SEGO, ESMBO, ...).

from ensemble_bo import EnsembleSearch, METHODS
"""

from ensemble_bo.api import EnsembleSearch
from ensemble_bo.core.methods import METHODS

__version__ = "0.1"

__all__ = ["METHODS", "EnsembleSearch", "__version__"]
