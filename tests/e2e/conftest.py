"""Fixtures the end-to-end modules share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local-mode SparkSession for the index job, one per module (stopped after it)."""
    from spark_jobs.index_job import spark_session

    session = spark_session("local[2]", "1g")
    yield session
    session.stop()
