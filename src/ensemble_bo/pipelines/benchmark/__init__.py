"""benchmark: datasets x methods x repetitions, stored per cell, compared at the end."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
