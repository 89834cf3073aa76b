"""Validate a raw dataset, split it and prepare the model input."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
