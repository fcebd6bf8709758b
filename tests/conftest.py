"""Shared pytest configuration: where generated test artifacts go."""

from __future__ import annotations

import pathlib

import pytest

# Fixtures for real services, usable from every test package; the skip guard; pytester for its test.
pytest_plugins = ["fixtures.hbase", "fixtures.brokers", "fixtures.tls", "fixtures.spark_cluster", "fixtures.spark",
                  "fixtures.skips", "pytester"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def artifacts_dir() -> pathlib.Path:
    """A git-ignored directory for screenshots and logs a test wants to keep."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
