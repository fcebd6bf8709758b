"""Fixtures: a collector app over a local store that holds the known sample scenario."""

from __future__ import annotations

import time

import pytest
from api_helpers import INGEST_TOKEN, QUERY_TOKEN, fill_store

from collector.server.app import create_app
from collector.server.config import CollectorConfig
from tests.fixtures.sample import ScenarioIds


@pytest.fixture
def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def config(tmp_path) -> CollectorConfig:
    return CollectorConfig(data_dir=str(tmp_path), durability="os")


@pytest.fixture
def ids(config, now_ms) -> ScenarioIds:
    return fill_store(config.store_url, now_ms)


@pytest.fixture
async def client(aiohttp_client, config, ids):
    return await aiohttp_client(create_app(config))


@pytest.fixture
async def secured_client(aiohttp_client, tmp_path, now_ms):
    config = CollectorConfig(data_dir=str(tmp_path), durability="os",
                             query_token=QUERY_TOKEN, ingest_token=INGEST_TOKEN)
    fill_store(config.store_url, now_ms)
    return await aiohttp_client(create_app(config))
