"""Errors raised by the Spark index job."""

from __future__ import annotations


class IndexJobError(Exception):
    """The index job failed; the checkpoint was not advanced, so the next run retries the same segments."""


class NoSparkError(IndexJobError):
    """PySpark is not installed (``pip install -e ".[spark]"``)."""
