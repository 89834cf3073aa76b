"""Ensemble BO"""

__version__ = "0.1"
