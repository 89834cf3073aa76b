"""Model search pipelines (segor, smbo, random_search): search, refit and score, report."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
