"""SEGOR: ensemble-aware Bayesian optimization for regression."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
