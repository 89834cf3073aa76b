"""Model search pipelines (segor, smbo, random_search, posthoc): search, refit, report."""

from .pipeline import create_pipeline, create_posthoc_pipeline

__all__ = ["create_pipeline", "create_posthoc_pipeline"]
