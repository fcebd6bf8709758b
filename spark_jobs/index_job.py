"""The ``tracehook index`` command's entry module (``add_arguments``, ``run``); the job and its API are :mod:`spark_jobs`."""

from __future__ import annotations

from spark_jobs.cli import add_arguments, run

__all__ = ["add_arguments", "run"]
