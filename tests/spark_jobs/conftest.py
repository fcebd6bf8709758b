"""A session-scoped local SparkSession (local[2], 1 GiB driver) shared by the Spark tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from spark_jobs.index_job import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", "1g")
    yield session
    session.stop()
