"""Shared pytest configuration: where generated test artifacts go, hypothesis' example database."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# Fixtures for real services, usable from every test package; the skip guard; pytester for its test.
# fixtures.stopping, fixtures.sharing, fixtures.prestart and fixtures.spark first: the server fixtures import them, and a
# plugin must be registered before it is imported.
pytest_plugins = [
    "fixtures.stopping", "fixtures.sharing", "fixtures.prestart", "fixtures.spark", "fixtures.hbase", "fixtures.brokers",
    "fixtures.tls", "fixtures.spark_cluster", "fixtures.stores", "fixtures.collector_process", "fixtures.prometheus",
    "fixtures.skips", "fixtures.tiers", "fixtures.order", "fixtures.fallback", "pytester",
]

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
HYPOTHESIS_DB = ROOT / ".hypothesis" / "examples"
"""Failing examples hypothesis found, replayed first on the next run (git-ignored; whatever the cwd)."""

# too_slow: how fast examples are drawn is not what any test checks, and it varies with the host's load
# (two xdist workers, services and JVMs on two cores); a test's own ``deadline`` still applies.
settings.register_profile("tracehook", database=DirectoryBasedExampleDatabase(str(HYPOTHESIS_DB)),
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tracehook")


@pytest.fixture(scope="session")
def artifacts_dir() -> pathlib.Path:
    """A git-ignored directory for screenshots and logs a test wants to keep."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
