"""Incremental web re-crawler."""

__version__ = "0.1.0"
