"""Fixtures for the collector tests: a config on a fresh data dir, collector subprocesses."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from collector_service_helpers import CollectorProcess

from collector.server.config import CollectorConfig


@pytest.fixture
def collector_config(tmp_path: pathlib.Path) -> CollectorConfig:
    """A collector config on a fresh data dir, without an index store."""
    return CollectorConfig(data_dir=str(tmp_path / "data"), port=0, store_url="none")


@pytest.fixture
def collector_process(tmp_path: pathlib.Path) -> Iterator[type[CollectorProcess]]:
    """A factory for collector subprocesses; every one started is stopped at the end."""
    started: list[CollectorProcess] = []

    class Tracked(CollectorProcess):
        def __init__(self, data_dir: str | None = None, *extra: str, env: dict[str, str] | None = None,
                     ca_file: str | None = None) -> None:
            super().__init__(data_dir or str(tmp_path / "data"), *extra, env=env, ca_file=ca_file)
            started.append(self)

    yield Tracked
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait()
