"""Fixtures for the collector tests: a config on a fresh data dir (collector subprocesses:
``collector_process`` from tests/fixtures/collector_process.py)."""

from __future__ import annotations

import pathlib

import pytest

from collector.server.config import CollectorConfig


@pytest.fixture
def collector_config(tmp_path: pathlib.Path) -> CollectorConfig:
    """A collector config on a fresh data dir, without an index store."""
    return CollectorConfig(data_dir=str(tmp_path / "data"), store_url="none")
