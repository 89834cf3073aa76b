"""Model search pipelines, one per registered method: search, refit, report."""

from .pipeline import create_pipeline, create_selection_pipeline

__all__ = ["create_pipeline", "create_selection_pipeline"]
