"""Errors raised by the Spark index job."""

from __future__ import annotations


class IndexJobError(Exception):
    """The index job failed; the checkpoint was not advanced, so the next run retries the same segments."""


class NoSparkError(IndexJobError):
    """PySpark is not installed (``pip install -e ".[index]"``)."""


class LocalStoreOnClusterError(IndexJobError, ValueError):
    """A ``local:`` (SQLite) store with a Spark master whose executors may run on other hosts.

    Each executor would write its own SQLite file on its own host, and SQLite's WAL mode
    needs every writer on one host (shared memory), so a shared filesystem does not help.
    """


class LogInputError(IndexJobError):
    """The log or the checkpoint cannot be indexed as given (exit 3): fix the input, a retry will not help."""


class CheckpointMismatchError(LogInputError):
    """The checkpoint directory belongs to another log (or another store)."""


class RecordGoneError(IndexJobError):
    """The trace log (or topic) no longer holds a set-aside event's record (``tracehook set-aside``)."""
