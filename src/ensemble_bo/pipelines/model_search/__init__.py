"""Model search pipelines (segor, smbo, random_search, posthoc): search, refit, report."""

from .pipeline import create_ers_pipeline, create_pipeline, create_posthoc_pipeline

__all__ = ["create_ers_pipeline", "create_pipeline", "create_posthoc_pipeline"]
